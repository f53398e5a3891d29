//! iWARP queue pairs of a whole device (the real engine behind vfio-user) driven by a fake
//! guest over the device's own loopback: MPA setup with private data, IRD/ORD and CRC;
//! Sends, RDMA Writes and Reads with every byte checked; the protection checks ending in
//! a Terminate and error completions on both sides. Requests of an initiator the test
//! plays segment by segment on a cable too.

use qpip_testkit as support;

// The remote end of a cable played frame by frame (the TCP conformance suite's scripts):
// here an initiator that sends its MPA request the way a Linux peer does. Only part of it
// is used by this suite.
#[allow(dead_code)]
#[path = "../support/tcp_script/mod.rs"]
mod script;

mod close;
mod deregistered;
mod golden;
mod immediate;
mod impaired;
mod protection;
mod requests;
mod setup;
mod transfer;
mod tripwires;

use support::*;

/// A fake guest with two contexts (server, client).
fn guest() -> (FakeGuest, u32, u32) {
    let mut g = FakeGuest::new();
    let s = g.create_ctx().unwrap();
    let c = g.create_ctx().unwrap();
    (g, s, c)
}

/// Both ends connected with plain parameters; panics if the setup fails.
fn connected(g: &mut FakeGuest, s: u32, c: u32, port: u16) -> (TcpEnd, TcpEnd) {
    let (se, ce, con, acc) = g.iwarp_pair((s, c), port, &Mpa::plain(), &Mpa::plain());
    assert_eq!(
        con.status,
        ADMIN_STATUS_OK,
        "connect: {}",
        admin_status_name(con.status)
    );
    assert_eq!(
        acc.status,
        ADMIN_STATUS_OK,
        "accept: {}",
        admin_status_name(acc.status)
    );
    (se, ce)
}

/// A region of `len` bytes in `ctx` with `access`, filled with `fill`.
fn region(g: &mut FakeGuest, ctx: u32, len: u64, access: u32, fill: u8) -> (Buf, Mr) {
    let b = g.alloc_buf(len, 0x80);
    g.buf_write(&b, 0, &vec![fill; len as usize]);
    let mr = g.reg_mr(ctx, &b, access).expect("register");
    (b, mr)
}

/// Bytes that show where each came from.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[track_caller]
fn ok(c: &Cqe, op: u8, len: u32, what: &str) {
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (CQE_STATUS_SUCCESS, op, len),
        "{what}: {c:?}"
    );
}
