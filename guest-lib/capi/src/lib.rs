//! The C API of the qpip verbs library: `libqpip.so` and `include/qpip.h` (generated from
//! this file by cbindgen; `tests/c_header.rs` fails when the checked-in header is stale).
//!
//! Each C handle is a boxed [`Handle`] whose first field is a magic number per type, so
//! a null pointer or a handle of the wrong type gives `QPIP_E_NULL` / `QPIP_E_BAD_HANDLE`
//! instead of undefined behaviour. (A pointer that was freed or never came from this
//! library cannot be checked.) Failures also leave a message for [`qpip_last_error`].

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::{Ipv6Addr, SocketAddrV6};
use std::path::Path;
use std::time::Duration;

use verbs::{
    Completion, Context, Cq, Error, Event, EventKind, Framing, Listener, MemoryRegion, Opcode, Qp,
    QpInit, QpKind, SendWr, Status,
};

// ---- error codes -----------------------------------------------------------------------

/// Success.
pub const QPIP_OK: c_int = 0;
/// A required pointer was NULL.
pub const QPIP_E_NULL: c_int = -1;
/// A handle of another type (or a corrupted one) was passed.
pub const QPIP_E_BAD_HANDLE: c_int = -2;
/// An argument is out of range or inconsistent.
pub const QPIP_E_INVALID: c_int = -3;
/// No qpip device (and QPIP_PROVIDER=device), or QPIP_PROVIDER holds a bad name.
pub const QPIP_E_NO_DEVICE: c_int = -4;
/// The device was reset or removed: open a new context.
pub const QPIP_E_DEVICE_GONE: c_int = -5;
/// A system call failed (qpip_last_error() says which and why).
pub const QPIP_E_OS: c_int = -6;
/// The work queue is full: poll the completion queue first.
pub const QPIP_E_QUEUE_FULL: c_int = -7;
/// Too many scatter/gather entries, inline data too long, or a range outside its region.
pub const QPIP_E_LENGTH: c_int = -8;
/// An object of another context was used.
pub const QPIP_E_FOREIGN: c_int = -9;
/// The operation does not apply to this kind of QP.
pub const QPIP_E_WRONG_KIND: c_int = -10;
/// A UDP send without a destination, or a TCP send with one.
pub const QPIP_E_DESTINATION: c_int = -11;
/// A blocking call gave up waiting.
pub const QPIP_E_TIMEDOUT: c_int = -12;
/// An accept, connect or close failed (refused, reset, cancelled ...).
pub const QPIP_E_CONNECTION: c_int = -13;
/// The device speaks an interface version this library does not know.
pub const QPIP_E_ABI: c_int = -14;

/// QP kinds for qpip_qp_create().
pub const QPIP_QP_UDP: c_int = 0;
/// TCP, QP ⇄ QP: each send is one message.
pub const QPIP_QP_TCP_MESSAGE: c_int = 1;
/// TCP, QP ⇄ plain socket: the bytes are the stream.
pub const QPIP_QP_TCP_STREAM: c_int = 2;

/// Providers (qpip_provider()).
pub const QPIP_PROVIDER_DEVICE: c_int = 0;
pub const QPIP_PROVIDER_SOFT: c_int = 1;

/// Completion opcodes.
pub const QPIP_OP_SEND: u32 = 0;
pub const QPIP_OP_RECV: u32 = 1;

/// Completion statuses (qpip_completion.status).
pub const QPIP_WC_SUCCESS: u32 = 0;
pub const QPIP_WC_LOCAL_LENGTH: u32 = 1;
pub const QPIP_WC_LOCAL_PROTECTION: u32 = 2;
pub const QPIP_WC_BAD_OPCODE: u32 = 3;
pub const QPIP_WC_BAD_WQE: u32 = 4;
pub const QPIP_WC_FLUSHED: u32 = 5;
pub const QPIP_WC_BAD_DEST: u32 = 6;
pub const QPIP_WC_OTHER: u32 = 255;

/// Event kinds (qpip_event.kind).
pub const QPIP_EVENT_ACCEPT: u32 = 1;
pub const QPIP_EVENT_CONNECT: u32 = 2;
pub const QPIP_EVENT_CLOSE: u32 = 3;
pub const QPIP_EVENT_QP_ERROR: u32 = 4;
pub const QPIP_EVENT_PEER_CLOSED: u32 = 5;
pub const QPIP_EVENT_LOST: u32 = 6;
pub const QPIP_EVENT_OTHER: u32 = 255;

/// qpip_post_send() flags: carry `imm` (TCP message framing only).
pub const QPIP_SEND_IMM: u32 = 1;

// ---- plain C types -------------------------------------------------------------------------

/// An IPv6 address and port (host byte order).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_addr {
    pub addr: [u8; 16],
    pub port: u16,
}

/// `len` bytes at `offset` in a memory region.
#[repr(C)]
pub struct qpip_sge {
    pub mr: *const qpip_mr,
    pub offset: usize,
    pub len: usize,
}

/// One completed work request.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_completion {
    pub wr_id: u64,
    /// The QP (qpip_qp_id()).
    pub qp: u32,
    /// QPIP_OP_*.
    pub opcode: u32,
    /// QPIP_WC_*.
    pub status: u32,
    /// Which check failed, for error completions (the device's detail code).
    pub detail: u32,
    pub byte_len: u32,
    /// TCP message framing: the sender's immediate data.
    pub imm: u32,
    /// UDP receives: 1 and the sender in `src`.
    pub has_src: u32,
    pub src: qpip_addr,
}

/// A connection event.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct qpip_event {
    /// QPIP_EVENT_*.
    pub kind: u32,
    /// 0 or a negative errno.
    pub status: i32,
    pub qp: u32,
    /// 1 and the peer in `peer` for a successful accept or connect.
    pub has_peer: u32,
    pub user_data: u64,
    pub peer: qpip_addr,
}

/// Opaque handles.
pub struct qpip_context {
    _private: [u8; 0],
}
pub struct qpip_mr {
    _private: [u8; 0],
}
pub struct qpip_cq {
    _private: [u8; 0],
}
pub struct qpip_qp {
    _private: [u8; 0],
}
pub struct qpip_listener {
    _private: [u8; 0],
}

// ---- handles and errors ------------------------------------------------------------------

/// What a C handle points to: a magic number per type first (repr(C), so it is at offset
/// 0 whatever `T` is), then the object.
#[repr(C)]
struct Handle<T> {
    magic: u32,
    value: T,
}

const MAGIC_CTX: u32 = 0x5150_4301;
const MAGIC_MR: u32 = 0x5150_4302;
const MAGIC_CQ: u32 = 0x5150_4303;
const MAGIC_QP: u32 = 0x5150_4304;
const MAGIC_LISTENER: u32 = 0x5150_4305;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

fn fail(code: c_int, msg: impl Into<String>) -> c_int {
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
    }
}

fn err(e: Error) -> c_int {
    fail(code_of(&e), e.to_string())
}

/// The object behind handle `p` of type `magic`, or the error code.
///
/// # Safety
/// `p` is null or was returned by this library for some handle type and not freed.
unsafe fn get<'a, T>(p: *const c_void, magic: u32, what: &str) -> Result<&'a T, c_int> {
    if p.is_null() {
        return Err(fail(QPIP_E_NULL, format!("{what} is NULL")));
    }
    // SAFETY: every handle is a live Box<Handle<_>> (the caller's promise), and Handle is
    // repr(C) with the u32 magic first, so reading a u32 at `p` is valid for any handle
    // type; only once it matches is `p` taken as a Handle<T>.
    let h = unsafe {
        if *(p as *const u32) != magic {
            return Err(fail(
                QPIP_E_BAD_HANDLE,
                format!("{what} is not a {what} handle"),
            ));
        }
        &*(p as *const Handle<T>)
    };
    Ok(&h.value)
}

fn new_handle<T, H>(magic: u32, value: T) -> *mut H {
    Box::into_raw(Box::new(Handle { magic, value })) as *mut H
}

/// Frees handle `p` of type `magic` (null: nothing).
///
/// # Safety
/// As for [`get`]; `p` is not used afterwards.
unsafe fn free<T>(p: *mut c_void, magic: u32, what: &str) -> c_int {
    if p.is_null() {
        return QPIP_OK;
    }
    // SAFETY: `get` checked the magic, so `p` is a Box<Handle<T>> from `new_handle`;
    // the magic is cleared before the box is dropped so a second free of the same
    // pointer is more likely caught (it cannot be in general: the memory is gone).
    unsafe {
        if let Err(e) = get::<T>(p, magic, what) {
            return e;
        }
        (*(p as *mut Handle<T>)).magic = 0;
        drop(Box::from_raw(p as *mut Handle<T>));
    }
    QPIP_OK
}

/// Writes `v` to `out` if it is not null.
///
/// # Safety
/// `out` is null or valid for a write of T.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller's promise.
        unsafe { out.write(v) };
    }
}

fn to_sock(a: &qpip_addr) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::from(a.addr), a.port, 0, 0)
}

fn from_sock(a: SocketAddrV6) -> qpip_addr {
    qpip_addr {
        addr: a.ip().octets(),
        port: a.port(),
    }
}

/// A negative timeout waits for ever.
fn timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// The address at `p`.
///
/// # Safety
/// `p` is null or points to a qpip_addr.
unsafe fn addr_arg(p: *const qpip_addr, what: &str) -> Result<SocketAddrV6, c_int> {
    if p.is_null() {
        return Err(fail(QPIP_E_NULL, format!("{what} is NULL")));
    }
    // SAFETY: the caller's promise.
    Ok(to_sock(unsafe { &*p }))
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

macro_rules! q {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return err(e),
        }
    };
}

// ---- errors --------------------------------------------------------------------------------

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

/// Fills `out` from a textual IPv6 address (IPv4 becomes IPv4-mapped) and `port`.
///
/// # Safety
/// `ip` is null or a NUL-terminated string; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_addr_parse(
    ip: *const c_char,
    port: u16,
    out: *mut qpip_addr,
) -> c_int {
    if ip.is_null() || out.is_null() {
        return fail(QPIP_E_NULL, "ip or out is NULL");
    }
    // SAFETY: the caller's promise: a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(ip) }.to_string_lossy();
    let s = s.trim_start_matches('[').trim_end_matches(']');
    let a = match (s.parse::<Ipv6Addr>(), s.parse::<std::net::Ipv4Addr>()) {
        (Ok(a), _) => a,
        (_, Ok(v4)) => v4.to_ipv6_mapped(),
        _ => return fail(QPIP_E_INVALID, format!("{s:?} is not an IP address")),
    };
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe {
        put(
            out,
            qpip_addr {
                addr: a.octets(),
                port,
            },
        )
    };
    QPIP_OK
}

// ---- context -------------------------------------------------------------------------------

fn open_with(out: *mut *mut qpip_context, r: verbs::Result<Context>) -> c_int {
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let ctx = q!(r);
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, new_handle(MAGIC_CTX, ctx)) };
    QPIP_OK
}

/// Opens the provider QPIP_PROVIDER names (soft or device); unset: the first device if
/// there is one, else the software provider.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open(out: *mut *mut qpip_context) -> c_int {
    open_with(out, Context::open())
}

/// Opens the software provider (kernel sockets).
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open_soft(out: *mut *mut qpip_context) -> c_int {
    open_with(out, Context::open_soft())
}

/// Opens the device at `path` (/dev/qpipN).
///
/// # Safety
/// `path` is null or NUL-terminated; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_open_device(
    path: *const c_char,
    out: *mut *mut qpip_context,
) -> c_int {
    if path.is_null() {
        return fail(QPIP_E_NULL, "path is NULL");
    }
    // SAFETY: the caller's promise: a NUL-terminated string.
    let p = unsafe { CStr::from_ptr(path) }
        .to_string_lossy()
        .into_owned();
    open_with(out, Context::open_device(Path::new(&p)))
}

/// Frees a context (its objects keep it open while they exist). NULL is allowed.
///
/// # Safety
/// `ctx` is null or a live context handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_context_free(ctx: *mut qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Context>(ctx.cast(), MAGIC_CTX, "context") }
}

/// QPIP_PROVIDER_DEVICE or QPIP_PROVIDER_SOFT, or an error code.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_provider(ctx: *const qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    match c.provider() {
        verbs::ProviderKind::Device => QPIP_PROVIDER_DEVICE,
        verbs::ProviderKind::Soft => QPIP_PROVIDER_SOFT,
    }
}

/// Largest inline send, in bytes, or an error code.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_max_inline(ctx: *const qpip_context) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    c.limits().max_inline as c_int
}

// ---- memory --------------------------------------------------------------------------------

/// Allocates and registers `len` zeroed bytes; qpip_mr_data() is where they are.
///
/// # Safety
/// `ctx` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_alloc(
    ctx: *const qpip_context,
    len: usize,
    out: *mut *mut qpip_mr,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let mr = q!(c.alloc(len));
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, new_handle(MAGIC_MR, mr)) };
    QPIP_OK
}

/// The region's bytes (NULL for a bad handle). Fill a send buffer before posting it and
/// leave it until its completion; read a receive buffer after its completion. The
/// pointer is valid until qpip_mr_free().
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_data(mr: *mut qpip_mr) -> *mut u8 {
    // SAFETY: the caller's promise; `get` checked the magic, so `mr` is a live
    // Handle<MemoryRegion> of ours, and the &mut lasts only for this call. The pointer
    // handed out is from as_mut_slice: the region's heap buffer, which the device (or
    // provider) shares anyway; writes through it follow the contract above, the same as
    // MemoryRegion::as_mut_slice's.
    unsafe {
        match get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") {
            Ok(_) => (*(mr as *mut Handle<MemoryRegion>))
                .value
                .as_mut_slice()
                .as_mut_ptr(),
            Err(_) => std::ptr::null_mut(),
        }
    }
}

/// The region's size in bytes (0 for a bad handle).
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_len(mr: *const qpip_mr) -> usize {
    // SAFETY: the caller's promise.
    unsafe { get::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }.map_or(0, |m| m.len())
}

/// Frees a region: it stays registered until the work requests naming it completed, but
/// qpip_mr_data()'s pointer must not be used any more. NULL is allowed.
///
/// # Safety
/// `mr` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_mr_free(mr: *mut qpip_mr) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<MemoryRegion>(mr.cast(), MAGIC_MR, "memory region") }
}

// ---- completion queues ---------------------------------------------------------------------

/// Creates a CQ of `depth` entries (a power of two).
///
/// # Safety
/// `ctx` is null or a live handle; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_create(
    ctx: *const qpip_context,
    depth: u32,
    out: *mut *mut qpip_cq,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let cq = q!(c.create_cq(depth));
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, new_handle(MAGIC_CQ, cq)) };
    QPIP_OK
}

/// Frees a CQ (after the QPs that use it). NULL is allowed.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_free(cq: *mut qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Cq>(cq.cast(), MAGIC_CQ, "CQ") }
}

fn to_c(c: &Completion) -> qpip_completion {
    let status = match c.status {
        Status::Success => QPIP_WC_SUCCESS,
        Status::LocalLength => QPIP_WC_LOCAL_LENGTH,
        Status::LocalProtection => QPIP_WC_LOCAL_PROTECTION,
        Status::BadOpcode => QPIP_WC_BAD_OPCODE,
        Status::BadWqe => QPIP_WC_BAD_WQE,
        Status::Flushed => QPIP_WC_FLUSHED,
        Status::BadDest => QPIP_WC_BAD_DEST,
        _ => QPIP_WC_OTHER,
    };
    let detail = match c.detail {
        verbs::Detail::None => 0,
        verbs::Detail::BadLkey => 1,
        verbs::Detail::OtherContext => 2,
        verbs::Detail::OutOfBounds => 3,
        verbs::Detail::Access => 4,
        verbs::Detail::BadIndex => 5,
        verbs::Detail::NoRoute => 6,
        verbs::Detail::NotBound => 7,
        verbs::Detail::BadAddress => 8,
        verbs::Detail::Other(d) => d,
    };
    qpip_completion {
        wr_id: c.wr_id,
        qp: c.qp,
        opcode: if c.opcode == Opcode::Recv {
            QPIP_OP_RECV
        } else {
            QPIP_OP_SEND
        },
        status,
        detail,
        byte_len: c.byte_len,
        imm: c.imm,
        has_src: c.src.is_some() as u32,
        src: c.src.map(from_sock).unwrap_or_default(),
    }
}

/// Moves up to `n` completions to `out` (never blocks); returns how many, or an error.
///
/// # Safety
/// `cq` is null or a live handle; `out` is null or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_poll(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { cq_take(cq, out, n, None) }
}

/// Waits up to `timeout_ms` (negative: for ever) for a completion, then as qpip_cq_poll;
/// returns 0 when the time ran out.
///
/// # Safety
/// As qpip_cq_poll.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_wait(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { cq_take(cq, out, n, Some(timeout(timeout_ms))) }
}

/// # Safety
/// As qpip_cq_poll.
unsafe fn cq_take(
    cq: *const qpip_cq,
    out: *mut qpip_completion,
    n: usize,
    wait: Option<Option<Duration>>,
) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let mut buf = vec![Completion::default(); n.min(1024)];
    let got = match wait {
        None => cq.poll(&mut buf),
        Some(t) => q!(cq.wait(&mut buf, t)),
    };
    for (i, c) in buf[..got].iter().enumerate() {
        // SAFETY: i < got <= n, and `out` is valid for n writes (the caller's promise).
        unsafe { out.add(i).write(to_c(c)) };
    }
    got as c_int
}

/// Asks for one wake-up of qpip_cq_fd() at the next completion.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_arm(cq: *const qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    q!(cq.arm());
    QPIP_OK
}

/// Clears the descriptor's readiness after a wake-up; returns how many it gathered.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_ack(cq: *const qpip_cq) -> c_int {
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    cq.ack().min(c_int::MAX as u64) as c_int
}

/// The CQ's descriptor for poll/epoll (readable after qpip_cq_arm once a completion is
/// there), or an error code.
///
/// # Safety
/// `cq` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_cq_fd(cq: *const qpip_cq) -> c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's promise.
    let cq = tri!(unsafe { get::<Cq>(cq.cast(), MAGIC_CQ, "CQ") });
    cq.as_raw_fd()
}

// ---- queue pairs ---------------------------------------------------------------------------

/// Creates a QP of `kind` (QPIP_QP_*); sends complete on `send_cq`, receives on
/// `recv_cq` (may be the same); queue depths are powers of two (0: 64).
///
/// # Safety
/// Handles are null or live; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_create(
    ctx: *const qpip_context,
    kind: c_int,
    send_cq: *const qpip_cq,
    recv_cq: *const qpip_cq,
    sq_depth: u32,
    rq_depth: u32,
    out: *mut *mut qpip_qp,
) -> c_int {
    // SAFETY: the caller's promise, for each handle.
    let (c, scq, rcq) = unsafe {
        (
            tri!(get::<Context>(ctx.cast(), MAGIC_CTX, "context")),
            tri!(get::<Cq>(send_cq.cast(), MAGIC_CQ, "send CQ")),
            tri!(get::<Cq>(recv_cq.cast(), MAGIC_CQ, "receive CQ")),
        )
    };
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let kind = match kind {
        QPIP_QP_UDP => QpKind::Udp,
        QPIP_QP_TCP_MESSAGE => QpKind::Tcp(Framing::Message),
        QPIP_QP_TCP_STREAM => QpKind::Tcp(Framing::Stream),
        k => {
            return fail(
                QPIP_E_INVALID,
                format!("QP kind {k}: expected QPIP_QP_UDP, _TCP_MESSAGE or _TCP_STREAM"),
            )
        }
    };
    let or64 = |d: u32| if d == 0 { 64 } else { d };
    let init = QpInit::new(kind, scq)
        .recv_cq(rcq)
        .depth(or64(sq_depth), or64(rq_depth));
    let qp = q!(c.create_qp(&init));
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, new_handle(MAGIC_QP, qp)) };
    QPIP_OK
}

/// Destroys a QP: outstanding requests complete flushed, a connection is reset (unless
/// it was closed gracefully). NULL is allowed.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_free(qp: *mut qpip_qp) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Qp>(qp.cast(), MAGIC_QP, "QP") }
}

/// The QP's number (the `qp` of its completions and events), or an error code.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_id(qp: *const qpip_qp) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    qp.id().min(c_int::MAX as u32) as c_int
}

/// Binds to `addr` (port 0: an ephemeral one); the bound address goes to `bound` if not
/// NULL.
///
/// # Safety
/// `qp` is null or live; `addr` null or readable; `bound` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_bind(
    qp: *const qpip_qp,
    addr: *const qpip_addr,
    bound: *mut qpip_addr,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, a) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(addr, "addr")),
        )
    };
    let b = q!(qp.bind(a));
    // SAFETY: the caller's promise.
    unsafe { put(bound, from_sock(b)) };
    QPIP_OK
}

/// Starts connecting a TCP QP; the outcome is a QPIP_EVENT_CONNECT event with `user_data`.
///
/// # Safety
/// `qp` is null or live; `peer` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise.
    let (qp, p) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
        )
    };
    q!(qp.connect(p, user_data));
    QPIP_OK
}

/// Connects and waits up to `timeout_ms` (negative: for ever).
///
/// # Safety
/// `qp` is null or live; `peer` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect_wait(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (qp, p) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
        )
    };
    let t = timeout(timeout_ms).unwrap_or(Duration::from_secs(u32::MAX as u64));
    q!(qp.connect_wait(p, t));
    QPIP_OK
}

/// Closes the sending direction gracefully after the sends posted before; the outcome is
/// a QPIP_EVENT_CLOSE event.
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_close(qp: *const qpip_qp, user_data: u64) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    q!(qp.close(user_data));
    QPIP_OK
}

/// qpip_qp_close and wait up to `timeout_ms` (negative: for ever).
///
/// # Safety
/// `qp` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_close_wait(qp: *const qpip_qp, timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    q!(qp.close_wait(timeout(timeout_ms).unwrap_or(Duration::from_secs(u32::MAX as u64))));
    QPIP_OK
}

/// Resolves C SGEs into the library's (each region checked).
///
/// # Safety
/// `sges` is null (then `n` must be 0) or valid for `n` reads; their `mr` are null or live.
unsafe fn sges<'a>(sges: *const qpip_sge, n: usize) -> Result<Vec<verbs::Sge<'a>>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if sges.is_null() {
        return Err(fail(QPIP_E_NULL, "sges is NULL"));
    }
    if n > 64 {
        return Err(fail(QPIP_E_LENGTH, format!("{n} SGEs")));
    }
    // SAFETY: non-null and valid for n reads (the caller's promise).
    let s = unsafe { std::slice::from_raw_parts(sges, n) };
    s.iter()
        .map(|g| {
            // SAFETY: the caller's promise about each mr.
            let mr = unsafe { get::<MemoryRegion>(g.mr.cast(), MAGIC_MR, "SGE memory region") }?;
            Ok(mr.sge(g.offset, g.len))
        })
        .collect()
}

/// Posts a send of the bytes named by `sges` (gathered in order), tagged `wr_id`; `dest`
/// for UDP (NULL for TCP); `imm` goes with it when `flags` has QPIP_SEND_IMM.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads; `dest` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_send(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
    dest: *const qpip_addr,
    imm: u32,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, list) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(sges(sg, n)),
        )
    };
    // SAFETY: dest is null or readable.
    let dest = (!dest.is_null()).then(|| to_sock(unsafe { &*dest }));
    post(qp, SendWr::new(wr_id, &list), dest, imm, flags)
}

/// Posts a send of `len` bytes at `data`, copied now (at most qpip_max_inline() bytes;
/// no registered memory needed).
///
/// # Safety
/// `qp` null or live; `data` null (then `len` 0) or valid for `len` reads; `dest` null or
/// readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_send_inline(
    qp: *const qpip_qp,
    wr_id: u64,
    data: *const c_void,
    len: usize,
    dest: *const qpip_addr,
    imm: u32,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    if data.is_null() && len > 0 {
        return fail(QPIP_E_NULL, "data is NULL");
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: non-null and valid for len reads (the caller's promise).
        unsafe { std::slice::from_raw_parts(data.cast(), len) }
    };
    // SAFETY: dest is null or readable.
    let dest = (!dest.is_null()).then(|| to_sock(unsafe { &*dest }));
    post(qp, SendWr::inline(wr_id, bytes), dest, imm, flags)
}

fn post(qp: &Qp, mut wr: SendWr<'_>, dest: Option<SocketAddrV6>, imm: u32, flags: u32) -> c_int {
    if flags & !QPIP_SEND_IMM != 0 {
        return fail(QPIP_E_INVALID, format!("unknown send flags {flags:#x}"));
    }
    if flags & QPIP_SEND_IMM != 0 {
        wr = wr.imm(imm);
    }
    if let Some(d) = dest {
        wr = wr.to(d);
    }
    q!(qp.post_send(&wr));
    QPIP_OK
}

/// Posts a receive buffer made of `sges` (filled in order), tagged `wr_id`.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_recv(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, list) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(sges(sg, n)),
        )
    };
    q!(qp.post_recv(wr_id, &list));
    QPIP_OK
}

// ---- listeners and events ----------------------------------------------------------------

/// Listens for TCP connections on `addr` (port non-zero).
///
/// # Safety
/// `ctx` null or live; `addr` null or readable; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_listen(
    ctx: *const qpip_context,
    addr: *const qpip_addr,
    backlog: u32,
    out: *mut *mut qpip_listener,
) -> c_int {
    // SAFETY: the caller's promise.
    let (c, a) = unsafe {
        (
            tri!(get::<Context>(ctx.cast(), MAGIC_CTX, "context")),
            tri!(addr_arg(addr, "addr")),
        )
    };
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let l = q!(c.listen(a, backlog));
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, new_handle(MAGIC_LISTENER, l)) };
    QPIP_OK
}

/// Frees a listener (pending accepts end with -ECANCELED). NULL is allowed.
///
/// # Safety
/// `l` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_listener_free(l: *mut qpip_listener) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { free::<Listener>(l.cast(), MAGIC_LISTENER, "listener") }
}

/// Offers the idle TCP QP `qp` for the next connection; the outcome is a
/// QPIP_EVENT_ACCEPT event with `user_data`.
///
/// # Safety
/// Handles null or live.
#[no_mangle]
pub unsafe extern "C" fn qpip_accept(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise.
    let (l, qp) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
        )
    };
    q!(l.accept(qp, user_data));
    QPIP_OK
}

/// Accepts a connection on `qp`, waiting up to `timeout_ms` (negative: for ever); the peer
/// goes to `peer` if not NULL.
///
/// # Safety
/// Handles null or live; `peer` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_accept_wait(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    timeout_ms: c_int,
    peer: *mut qpip_addr,
) -> c_int {
    // SAFETY: the caller's promise.
    let (l, qp) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
        )
    };
    let p = q!(l.accept_wait(
        qp,
        timeout(timeout_ms).unwrap_or(Duration::from_secs(u32::MAX as u64))
    ));
    // SAFETY: the caller's promise.
    unsafe { put(peer, from_sock(p)) };
    QPIP_OK
}

fn event_to_c(e: &Event) -> qpip_event {
    qpip_event {
        kind: match e.kind {
            EventKind::Accept => QPIP_EVENT_ACCEPT,
            EventKind::Connect => QPIP_EVENT_CONNECT,
            EventKind::Close => QPIP_EVENT_CLOSE,
            EventKind::QpError => QPIP_EVENT_QP_ERROR,
            EventKind::PeerClosed => QPIP_EVENT_PEER_CLOSED,
            EventKind::Lost => QPIP_EVENT_LOST,
            EventKind::Other(_) => QPIP_EVENT_OTHER,
        },
        status: e.status,
        qp: e.qp,
        has_peer: e.peer.is_some() as u32,
        user_data: e.user_data,
        peer: e.peer.map(from_sock).unwrap_or_default(),
    }
}

/// The next connection event, waiting up to `timeout_ms` (0: just look; negative: for
/// ever). Returns 1 with `*out` filled, 0 if none came, or an error code.
///
/// # Safety
/// `ctx` null or live; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_wait_event(
    ctx: *const qpip_context,
    out: *mut qpip_event,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let e = if timeout_ms == 0 {
        q!(c.poll_event())
    } else {
        q!(c.wait_event(timeout(timeout_ms)))
    };
    match e {
        Some(e) => {
            // SAFETY: checked non-null; the caller's promise that it is writable.
            unsafe { put(out, event_to_c(&e)) };
            1
        }
        None => 0,
    }
}

/// The descriptor that polls readable while a connection event is queued.
///
/// # Safety
/// `ctx` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn qpip_events_fd(ctx: *const qpip_context) -> c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: the caller's promise.
    let c = tri!(unsafe { get::<Context>(ctx.cast(), MAGIC_CTX, "context") });
    c.events_fd().as_raw_fd()
}
