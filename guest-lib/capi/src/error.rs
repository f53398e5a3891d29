//! Failures: the code each library error maps to, the calling thread's last message, and
//! the two calls that describe them (qpip_strerror(), qpip_last_error()).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

use verbs::Error;

use crate::types::*;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

pub(crate) fn fail(code: c_int, msg: impl Into<String>) -> c_int {
    set_last(msg.into());
    code
}

fn code_of(e: &Error) -> c_int {
    match e {
        Error::BadProviderName(_) | Error::NoDevice => QPIP_E_NO_DEVICE,
        Error::Open { .. } | Error::Os { .. } => QPIP_E_OS,
        Error::AbiMismatch { .. } => QPIP_E_ABI,
        Error::DeviceGone => QPIP_E_DEVICE_GONE,
        Error::InvalidArgument(_) => QPIP_E_INVALID,
        Error::QueueFull { .. } => QPIP_E_QUEUE_FULL,
        Error::TooManySges { .. } | Error::InlineTooLong { .. } | Error::OutOfBounds { .. } => {
            QPIP_E_LENGTH
        }
        Error::ForeignObject(_) => QPIP_E_FOREIGN,
        Error::WrongQpKind { .. } => QPIP_E_WRONG_KIND,
        Error::Destination(_) => QPIP_E_DESTINATION,
        Error::TimedOut { .. } => QPIP_E_TIMEDOUT,
        Error::Connection { .. } => QPIP_E_CONNECTION,
        Error::Unsupported(_) => QPIP_E_UNSUPPORTED,
    }
}

pub(crate) fn err(e: Error) -> c_int {
    fail(code_of(&e), e.to_string())
}

/// A short description of a QPIP_E_* code (a static string).
#[no_mangle]
pub extern "C" fn qpip_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        QPIP_OK => c"success",
        QPIP_E_NULL => c"a required pointer is NULL",
        QPIP_E_BAD_HANDLE => c"not a handle of the expected type",
        QPIP_E_INVALID => c"invalid argument",
        QPIP_E_NO_DEVICE => c"no qpip device (QPIP_PROVIDER=soft uses kernel sockets)",
        QPIP_E_DEVICE_GONE => c"the qpip device was reset or removed",
        QPIP_E_OS => c"system call failed",
        QPIP_E_QUEUE_FULL => c"work queue full",
        QPIP_E_LENGTH => c"too many SGEs, inline data too long, or outside the memory region",
        QPIP_E_UNSUPPORTED => c"not supported by this provider",
        QPIP_E_FOREIGN => c"object of another context",
        QPIP_E_WRONG_KIND => c"not for this kind of QP",
        QPIP_E_DESTINATION => c"destination missing (UDP) or not allowed (TCP)",
        QPIP_E_TIMEDOUT => c"timed out",
        QPIP_E_CONNECTION => c"connection failed",
        QPIP_E_ABI => c"unknown device interface version",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// The message of the calling thread's last failure ("" if none); valid until the
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn qpip_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
