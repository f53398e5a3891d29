//! Addresses: `qpip_addr` to and from the library's, and qpip_addr_parse().

use std::ffi::{c_char, c_int, CStr};
use std::net::{Ipv6Addr, SocketAddrV6};

use crate::error::fail;
use crate::handle::put;
use crate::types::*;

pub(crate) fn to_sock(a: &qpip_addr) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::from(a.addr), a.port, 0, 0)
}

pub(crate) fn from_sock(a: SocketAddrV6) -> qpip_addr {
    qpip_addr {
        addr: a.ip().octets(),
        port: a.port(),
    }
}

/// The address at `p`.
///
/// # Safety
/// `p` is null or points to a qpip_addr.
pub(crate) unsafe fn addr_arg(p: *const qpip_addr, what: &str) -> Result<SocketAddrV6, c_int> {
    if p.is_null() {
        return Err(fail(QPIP_E_NULL, format!("{what} is NULL")));
    }
    // SAFETY: the caller's promise.
    Ok(to_sock(unsafe { &*p }))
}

/// The address at `p`, if `p` is not null (a UDP send's destination).
///
/// # Safety
/// `p` is null or points to a qpip_addr.
pub(crate) unsafe fn opt_addr(p: *const qpip_addr) -> Option<SocketAddrV6> {
    // SAFETY: the caller's promise.
    (!p.is_null()).then(|| to_sock(unsafe { &*p }))
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
