//! iWARP queue pairs (QPIP_QP_TCP_IWARP): connection setup with MPA parameters and
//! private data, what the setup agreed, and RDMA Writes and Reads of the peer's memory.
//! (Regions peers may reach are made by qpip_mr_alloc_remote(), module `mr`; solicited
//! Sends are qpip_post_send() with QPIP_SEND_SOLICITED, module `qp`.)

use std::ffi::c_int;

use verbs::{ConnInfo, Framing, Listener, Mpa, Qp, QpKind, RemoteAddr, SendWr};

use crate::addr::{addr_arg, from_sock};
use crate::error::fail;
use crate::handle::{get, put, MAGIC_LISTENER, MAGIC_QP};
use crate::qp::sges;
use crate::timeout::timeout_or_forever;
use crate::types::*;

// The header's limits are literals (cbindgen writes only those); they must be the
// library's.
const _: () = assert!(QPIP_MPA_MAX_PRIVATE_DATA as usize == Mpa::MAX_PRIVATE_DATA);
const _: () = assert!(QPIP_MPA_MAX_IRD_ORD == Mpa::MAX_IRD_ORD);

fn kind_name(k: QpKind) -> &'static str {
    match k {
        QpKind::Udp => "a UDP QP",
        QpKind::Tcp(Framing::Message) => "a message-framed TCP QP",
        QpKind::Tcp(Framing::Stream) => "a stream-framed TCP QP",
        QpKind::Tcp(Framing::Iwarp) => "an iWARP QP",
    }
}

/// QPIP_E_WRONG_KIND unless `qp` is an iWARP QP.
pub(crate) fn need_iwarp(qp: &Qp, what: &str) -> Result<(), c_int> {
    if qp.kind() == QpKind::Tcp(Framing::Iwarp) {
        return Ok(());
    }
    Err(fail(
        QPIP_E_WRONG_KIND,
        format!(
            "{what} needs an iWARP QP (QPIP_QP_TCP_IWARP); QP {} is {}",
            qp.id(),
            kind_name(qp.kind())
        ),
    ))
}

/// The library's MPA parameters for the `qpip_mpa` at `p`, every field checked (its
/// private data copied).
///
/// # Safety
/// `p` is null or readable; its `private_data` is null or valid for `pd_len` reads.
unsafe fn mpa_arg(p: *const qpip_mpa) -> Result<Mpa, c_int> {
    if p.is_null() {
        return Err(fail(
            QPIP_E_NULL,
            "mpa is NULL (qpip_mpa_init() fills defaults)",
        ));
    }
    // SAFETY: the caller's promise.
    let m = unsafe { &*p };
    if m.pd_len > QPIP_MPA_MAX_PRIVATE_DATA {
        return Err(fail(
            QPIP_E_INVALID,
            format!(
                "{} bytes of private data, at most QPIP_MPA_MAX_PRIVATE_DATA ({QPIP_MPA_MAX_PRIVATE_DATA})",
                m.pd_len
            ),
        ));
    }
    if m.ird > QPIP_MPA_MAX_IRD_ORD || m.ord > QPIP_MPA_MAX_IRD_ORD {
        return Err(fail(
            QPIP_E_INVALID,
            format!(
                "IRD {} and ORD {}: at most QPIP_MPA_MAX_IRD_ORD ({QPIP_MPA_MAX_IRD_ORD}) each",
                m.ird, m.ord
            ),
        ));
    }
    let known = QPIP_MPA_CRC | QPIP_MPA_PEER_TO_PEER | QPIP_MPA_IMMEDIATE;
    if m.flags & !known != 0 {
        return Err(fail(
            QPIP_E_INVALID,
            format!("unknown MPA flags {:#x}", m.flags),
        ));
    }
    let private_data = match (m.pd_len, m.private_data.is_null()) {
        (0, _) => Vec::new(),
        (_, true) => {
            return Err(fail(
                QPIP_E_NULL,
                format!("mpa->private_data is NULL and pd_len {}", m.pd_len),
            ))
        }
        // SAFETY: non-null and valid for pd_len reads (the caller's promise).
        (n, false) => unsafe { std::slice::from_raw_parts(m.private_data, n as usize) }.to_vec(),
    };
    Ok(Mpa {
        private_data,
        ird: m.ird,
        ord: m.ord,
        crc: m.flags & QPIP_MPA_CRC != 0,
        peer_to_peer: m.flags & QPIP_MPA_PEER_TO_PEER != 0,
        immediate: m.flags & QPIP_MPA_IMMEDIATE != 0,
    })
}

/// `qpip_conn_info` for the library's (private data beyond the room cut off, which MPA's
/// limit rules out).
fn conn_info_to_c(i: &ConnInfo) -> qpip_conn_info {
    let mut out = qpip_conn_info {
        crc: i.crc as u32,
        peer_to_peer: i.peer_to_peer as u32,
        immediate: i.immediate as u32,
        rejected: i.rejected as u32,
        ird: i.ird,
        ord: i.ord,
        revision: i.revision as u32,
        has_terminate: i.terminate.is_some() as u32,
        terminate: qpip_terminate::default(),
        pd_len: 0,
        private_data: [0; QPIP_MPA_MAX_PEER_PRIVATE_DATA],
    };
    if let Some(t) = i.terminate {
        out.terminate = qpip_terminate {
            layer: t.layer,
            etype: t.etype,
            code: t.code,
            received: t.received as u8,
        };
    }
    let n = i.private_data.len().min(QPIP_MPA_MAX_PEER_PRIVATE_DATA);
    out.private_data[..n].copy_from_slice(&i.private_data[..n]);
    out.pd_len = n as u16;
    out
}

/// Fills `mpa` with the defaults: no private data, IRD and ORD 8, no flags.
///
/// # Safety
/// `mpa` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_mpa_init(mpa: *mut qpip_mpa) -> c_int {
    if mpa.is_null() {
        return fail(QPIP_E_NULL, "mpa is NULL");
    }
    let d = Mpa::new();
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe {
        put(
            mpa,
            qpip_mpa {
                private_data: std::ptr::null(),
                pd_len: 0,
                ird: d.ird,
                ord: d.ord,
                flags: 0,
            },
        )
    };
    QPIP_OK
}

/// Starts connecting an iWARP QP to `peer`, bringing `mpa` to the setup; the outcome is a
/// QPIP_EVENT_CONNECT event with `user_data` once the peer's MPA reply came (then
/// qpip_qp_conn_info() tells what was agreed). qpip_qp_connect() on an iWARP QP is this
/// with qpip_mpa_init()'s defaults.
///
/// # Safety
/// `qp` null or live; `peer` null or readable; `mpa` null or readable (and its private
/// data as qpip_mpa says).
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect_mpa(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    mpa: *const qpip_mpa,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, p, m) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
            tri!(mpa_arg(mpa)),
        )
    };
    q!(qp.connect_mpa(p, &m, user_data));
    QPIP_OK
}

/// qpip_qp_connect_mpa() and wait up to `timeout_ms` (negative: for ever).
///
/// # Safety
/// As qpip_qp_connect_mpa().
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_connect_mpa_wait(
    qp: *const qpip_qp,
    peer: *const qpip_addr,
    mpa: *const qpip_mpa,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (qp, p, m) = unsafe {
        (
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(addr_arg(peer, "peer")),
            tri!(mpa_arg(mpa)),
        )
    };
    q!(qp.connect_mpa_wait(p, &m, timeout_or_forever(timeout_ms)));
    QPIP_OK
}

/// Offers the idle iWARP QP `qp` for the next connection, answering the initiator's MPA
/// request with `mpa`; the outcome is a QPIP_EVENT_ACCEPT event with `user_data` (then
/// qpip_qp_conn_info() holds the initiator's private data).
///
/// # Safety
/// Handles null or live; `mpa` null or readable (and its private data as qpip_mpa says).
#[no_mangle]
pub unsafe extern "C" fn qpip_accept_mpa(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    mpa: *const qpip_mpa,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (l, qp, m) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(mpa_arg(mpa)),
        )
    };
    q!(l.accept_mpa(qp, &m, user_data));
    QPIP_OK
}

/// qpip_accept_mpa() and wait up to `timeout_ms` (negative: for ever); the peer goes to
/// `peer` if not NULL.
///
/// # Safety
/// As qpip_accept_mpa(); `peer` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_accept_mpa_wait(
    l: *const qpip_listener,
    qp: *const qpip_qp,
    mpa: *const qpip_mpa,
    timeout_ms: c_int,
    peer: *mut qpip_addr,
) -> c_int {
    // SAFETY: the caller's promise, for each pointer.
    let (l, qp, m) = unsafe {
        (
            tri!(get::<Listener>(l.cast(), MAGIC_LISTENER, "listener")),
            tri!(get::<Qp>(qp.cast(), MAGIC_QP, "QP")),
            tri!(mpa_arg(mpa)),
        )
    };
    let p = q!(l.accept_mpa_wait(qp, &m, timeout_or_forever(timeout_ms)));
    // SAFETY: the caller's promise.
    unsafe { put(peer, from_sock(p)) };
    QPIP_OK
}

/// Fills `out` with what the setup of the iWARP QP's connection agreed, the peer's
/// private data, and the Terminate that ended it, if one did (valid once the connect or
/// accept completed, also when the peer rejected it).
///
/// # Safety
/// `qp` null or live; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn qpip_qp_conn_info(qp: *const qpip_qp, out: *mut qpip_conn_info) -> c_int {
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    if out.is_null() {
        return fail(QPIP_E_NULL, "out is NULL");
    }
    let info = q!(qp.conn_info());
    // SAFETY: checked non-null; the caller's promise that it is writable.
    unsafe { put(out, conn_info_to_c(&info)) };
    QPIP_OK
}

/// An RDMA Write or Read tagged `wr_id` between `sg` and the peer's memory at `remote`.
///
/// # Safety
/// As qpip_post_rdma_write().
unsafe fn post_rdma(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
    remote: *const qpip_remote,
    read: bool,
) -> c_int {
    let (what, arg) = if read {
        ("an RDMA Read", "from")
    } else {
        ("an RDMA Write", "to")
    };
    // SAFETY: the caller's promise.
    let qp = tri!(unsafe { get::<Qp>(qp.cast(), MAGIC_QP, "QP") });
    if remote.is_null() {
        return fail(QPIP_E_NULL, format!("{arg} is NULL"));
    }
    // SAFETY: checked non-null; the caller's promise that it is readable.
    let r = unsafe { &*remote };
    let at = RemoteAddr {
        addr: r.addr,
        rkey: r.rkey,
    };
    // Before the SGEs and the library's own checks: on a UDP QP the library would first
    // miss a destination, which is not what is wrong.
    tri!(need_iwarp(qp, what));
    // SAFETY: the caller's promise.
    let list = tri!(unsafe { sges(sg, n) });
    let wr = if read {
        SendWr::rdma_read(wr_id, &list, at)
    } else {
        SendWr::rdma_write(wr_id, &list, at)
    };
    q!(qp.post_send(&wr));
    QPIP_OK
}

/// Posts an RDMA Write of the bytes named by `sges` (gathered in order) into the peer's
/// memory at `to` (a region it allocated with QPIP_ACCESS_REMOTE_WRITE), tagged `wr_id`.
/// It completes (QPIP_OP_RDMA_WRITE) when the peer has every byte; nothing completes on
/// the peer's side. A refused access ends the connection: QPIP_WC_REMOTE_ACCESS.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads; `to` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_rdma_write(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
    to: *const qpip_remote,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { post_rdma(qp, wr_id, sg, n, to, false) }
}

/// Posts an RDMA Read of the peer's memory at `from` (a region it allocated with
/// QPIP_ACCESS_REMOTE_READ) into `sges` (filled in order, as many bytes as they hold),
/// tagged `wr_id`. It completes (QPIP_OP_RDMA_READ) when every byte is here; at most the
/// connection's ORD are outstanding at once.
///
/// # Safety
/// `qp` null or live; `sg` null or valid for `n` reads; `from` null or readable.
#[no_mangle]
pub unsafe extern "C" fn qpip_post_rdma_read(
    qp: *const qpip_qp,
    wr_id: u64,
    sg: *const qpip_sge,
    n: usize,
    from: *const qpip_remote,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { post_rdma(qp, wr_id, sg, n, from, true) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::qpip_last_error;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: qpip_last_error() returns a NUL-terminated string of this thread's.
        unsafe { CStr::from_ptr(qpip_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn mpa(pd: &[u8], ird: u8, ord: u8, flags: u32) -> qpip_mpa {
        qpip_mpa {
            private_data: pd.as_ptr(),
            pd_len: pd.len() as u16,
            ird,
            ord,
            flags,
        }
    }

    #[test]
    fn mpa_fields_become_the_library_parameters() {
        let pd = *b"hello peer";
        let c = mpa(&pd, 4, 2, QPIP_MPA_CRC | QPIP_MPA_PEER_TO_PEER);
        // SAFETY: `c` and its private data are live.
        let m = unsafe { mpa_arg(&c) }.unwrap_or_else(|_| panic!("{}", last_error()));
        assert_eq!(
            m,
            Mpa::new()
                .private_data(&pd)
                .ird_ord(4, 2)
                .crc(true)
                .peer_to_peer(true)
        );
        let none = qpip_mpa {
            private_data: std::ptr::null(),
            ..mpa(&[], 8, 8, 0)
        };
        // SAFETY: `none` is live; pd_len 0 reads no private data.
        assert_eq!(unsafe { mpa_arg(&none) }.ok(), Some(Mpa::new()));
    }

    #[test]
    fn mpa_init_gives_the_library_defaults() {
        let mut c = mpa(b"x", 0, 0, QPIP_MPA_CRC);
        // SAFETY: `c` is writable.
        assert_eq!(unsafe { qpip_mpa_init(&mut c) }, QPIP_OK);
        assert!(c.private_data.is_null());
        // SAFETY: `c` is live.
        assert_eq!(unsafe { mpa_arg(&c) }.ok(), Some(Mpa::new()));
        // SAFETY: a null pointer is allowed.
        assert_eq!(unsafe { qpip_mpa_init(std::ptr::null_mut()) }, QPIP_E_NULL);
    }

    #[test]
    fn bad_mpa_fields_are_refused_with_a_message() {
        let big = vec![7u8; QPIP_MPA_MAX_PRIVATE_DATA as usize + 1];
        let max = vec![7u8; QPIP_MPA_MAX_PRIVATE_DATA as usize];
        let cases = [
            (mpa(&big, 8, 8, 0), QPIP_E_INVALID, "private data"),
            (mpa(&[], 33, 8, 0), QPIP_E_INVALID, "IRD 33"),
            (mpa(&[], 8, 255, 0), QPIP_E_INVALID, "ORD 255"),
            (mpa(&[], 8, 8, 8), QPIP_E_INVALID, "flags 0x8"),
            (
                qpip_mpa {
                    private_data: std::ptr::null(),
                    ..mpa(&max, 8, 8, 0)
                },
                QPIP_E_NULL,
                "NULL",
            ),
        ];
        for (c, code, words) in cases {
            // SAFETY: `c` and its private data are live (or null with the refusal
            // expected before any read).
            assert_eq!(unsafe { mpa_arg(&c) }.err(), Some(code), "{words}");
            assert!(last_error().contains(words), "{words}: {}", last_error());
        }
        // SAFETY: the largest allowed private data is live.
        let m = unsafe { mpa_arg(&mpa(&max, 32, 32, 0)) };
        assert_eq!(m.map(|m| m.private_data.len()).ok(), Some(max.len()));
        // SAFETY: a null pointer is allowed.
        assert_eq!(
            unsafe { mpa_arg(std::ptr::null()) }.err(),
            Some(QPIP_E_NULL)
        );
    }

    #[test]
    fn conn_info_carries_every_field_and_the_terminate() {
        let pd: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let info = ConnInfo {
            crc: true,
            peer_to_peer: false,
            immediate: true,
            rejected: true,
            ird: 3,
            ord: 5,
            revision: 2,
            private_data: pd.clone(),
            terminate: Some(verbs::iwarp::Terminate {
                layer: 1,
                etype: 2,
                code: 0x0b,
                received: true,
            }),
        };
        let c = conn_info_to_c(&info);
        assert_eq!((c.crc, c.peer_to_peer, c.rejected), (1, 0, 1));
        assert_eq!((c.ird, c.ord, c.revision), (3, 5, 2));
        assert_eq!(c.pd_len as usize, pd.len());
        assert_eq!(&c.private_data[..pd.len()], &pd[..]);
        assert!(c.private_data[pd.len()..].iter().all(|&b| b == 0));
        assert_eq!(c.has_terminate, 1);
        let t = c.terminate;
        assert_eq!((t.layer, t.etype, t.code, t.received), (1, 2, 0x0b, 1));

        let quiet = conn_info_to_c(&ConnInfo {
            terminate: None,
            private_data: vec![1; QPIP_MPA_MAX_PEER_PRIVATE_DATA + 10],
            ..info
        });
        assert_eq!(quiet.has_terminate, 0);
        assert_eq!(quiet.terminate.layer, 0);
        assert_eq!(quiet.pd_len as usize, QPIP_MPA_MAX_PEER_PRIVATE_DATA);
    }
}
