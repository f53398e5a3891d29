//! The library's one error type. Each variant says what was attempted and why it failed;
//! system call failures keep the `io::Error` so callers can match on its kind.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Result of every fallible call of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `QPIP_PROVIDER` holds something other than `soft` or `device`.
    #[error("QPIP_PROVIDER={0:?}: expected \"soft\" or \"device\"")]
    BadProviderName(String),
    /// The device provider was asked for, but no `/dev/qpipN` exists.
    #[error("no qpip device (/dev/qpip*): is the qpip driver loaded? (QPIP_PROVIDER=soft uses kernel sockets instead)")]
    NoDevice,
    /// The device file could not be opened.
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// The device speaks an interface major version this library does not know.
    #[error("{path}: device interface {major}.{minor}, this library knows {known}.x")]
    AbiMismatch {
        path: PathBuf,
        major: u16,
        minor: u16,
        known: u16,
    },
    /// The device was reset or removed: the context is dead, open a new one.
    #[error("the qpip device was reset or removed (ENODEV): open a new context")]
    DeviceGone,
    /// A system call failed.
    #[error("{op}: {source}")]
    Os { op: &'static str, source: io::Error },
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The work queue has as many outstanding work requests as its depth: poll the CQ.
    #[error("{queue} queue of QP {qp} is full ({depth} work requests outstanding): poll its completion queue first")]
    QueueFull {
        qp: u32,
        queue: &'static str,
        depth: u32,
    },
    /// More scatter/gather entries than a work request can carry.
    #[error("{given} scatter/gather entries, at most {max} per work request")]
    TooManySges { given: usize, max: u32 },
    /// Inline data longer than a work queue entry can carry.
    #[error("{len} bytes of inline data, at most {max}")]
    InlineTooLong { len: usize, max: u32 },
    /// A scatter/gather entry reaches outside its memory region.
    #[error("bytes {offset}..{end} are outside the {size}-byte memory region (lkey {lkey:#x})")]
    OutOfBounds {
        lkey: u32,
        offset: usize,
        end: usize,
        size: usize,
    },
    /// An object of another context was used (a memory region, a CQ, a listener).
    #[error("{0} belongs to another context")]
    ForeignObject(&'static str),
    /// The operation does not apply to this kind of QP.
    #[error("QP {qp} is a {kind} QP: {what}")]
    WrongQpKind {
        qp: u32,
        kind: &'static str,
        what: &'static str,
    },
    /// A UDP send without a destination, or a TCP send with one.
    #[error("{0}")]
    Destination(&'static str),
    /// A blocking helper gave up waiting.
    #[error("{what} timed out after {after:?}")]
    TimedOut { what: &'static str, after: Duration },
    /// An accept, connect or close failed (the event's status).
    #[error("{what} failed: {source}")]
    Connection {
        what: &'static str,
        source: io::Error,
    },
    /// What was asked needs the device (iWARP on the software provider).
    #[error("not supported here: {0}")]
    Unsupported(&'static str),
}

impl Error {
    /// The error of a failed system call, `DeviceGone` for `ENODEV`.
    pub(crate) fn os(op: &'static str, source: io::Error) -> Error {
        if source.raw_os_error() == Some(libc::ENODEV) {
            Error::DeviceGone
        } else {
            Error::Os { op, source }
        }
    }

    /// `os` with the calling thread's `errno`.
    pub(crate) fn last_os(op: &'static str) -> Error {
        Error::os(op, io::Error::last_os_error())
    }

    /// The errno of a failed system call, if that is what this is.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Os { source, .. }
            | Error::Open { source, .. }
            | Error::Connection { source, .. } => source.raw_os_error(),
            Error::DeviceGone => Some(libc::ENODEV),
            _ => None,
        }
    }

    /// The `io::ErrorKind` of a failed system call (`Other` for the library's own errors).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Os { source, .. }
            | Error::Open { source, .. }
            | Error::Connection { source, .. } => source.kind(),
            Error::InvalidArgument(_)
            | Error::TooManySges { .. }
            | Error::InlineTooLong { .. }
            | Error::OutOfBounds { .. }
            | Error::Destination(_) => io::ErrorKind::InvalidInput,
            Error::TimedOut { .. } => io::ErrorKind::TimedOut,
            Error::Unsupported(_) => io::ErrorKind::Unsupported,
            _ => io::ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver refuses BIND and LISTEN of a port a kernel socket holds with EADDRINUSE
    /// (guest-driver/qpip_ports.c): callers see it as they would from a socket's bind.
    #[test]
    fn a_port_in_use_is_addr_in_use() {
        let e = Error::os(
            "bind (BIND)",
            io::Error::from_raw_os_error(libc::EADDRINUSE),
        );
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
    }
}
