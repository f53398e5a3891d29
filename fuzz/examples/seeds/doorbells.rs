//! Seeds of the `doorbells` target: objects set up, then posts, doorbells and completions.

use std::path::Path;

use qpip_fuzz::Seed;

use crate::save;

// ---- doorbells --------------------------------------------------------------------------------
// top level: 0 send, 2 recv, 3 ring QP, 4 ring CQ, 5 raw word, 6 page fill, 7 run,
// 9 consume, 11 admin, 12 data. QPs: 0 = UDP :7 (ctx A), 1 = UDP ::1:9 (ctx A), 2 = TCP
// (ctx A), 3 = UDP :11 (ctx B). MRs: 0 = A writable, 1 = A read-only, 2 = B writable.

/// A receive WQE with one SGE of `len` bytes at offset 0 of MR `mr`, rung at once.
fn post_recv(s: &mut Seed, qp: u8, mr: u8, len: u16) {
    s.u8(2).u8(qp);
    s.u8(1); // structured
    s.u8(2); // opcode: the right one
    s.u8(1); // one SGE
    s.u8(mr).u8(0).u8(0).u16(0).u8(0).u16(len);
    s.u8(1); // no noise
    s.u8(1); // ring
}

/// A send WQE from QP `qp` to ::1 port choice `port`, one SGE from MR `mr`, rung at once.
fn post_send(s: &mut Seed, qp: u8, port: u8, mr: u8, len: u16) {
    s.u8(0).u8(qp);
    s.u8(1).u8(2);
    s.u8(0); // imm
    s.u8(0); // ::1
    s.u8(port);
    s.u8(1); // not inline
    s.u8(1); // one SGE
    s.u8(mr).u8(0).u8(0).u16(0).u8(0).u16(len);
    s.u8(1);
    s.u8(1);
}

fn post_inline(s: &mut Seed, qp: u8, port: u8, data: &[u8]) {
    s.u8(0).u8(qp);
    s.u8(1).u8(2);
    s.u8(0).u8(0).u8(port);
    s.u8(0).u8(data.len() as u8).bytes(data); // inline
    s.u8(1);
    s.u8(1);
}

pub(crate) fn doorbells(dir: &Path) {
    let mut s = Seed::default();
    // Datagrams from QP 1 to QP 0 (port 7) and back (QP 1 is on ::1 port 9), gathered from
    // the read-only region and inline, received into the writable one; CQs armed; all
    // completions consumed.
    s.u8(12).u8(1).u16(0).u8(32).bytes(&[0x5a; 32]); // data into the read-only MR
    post_recv(&mut s, 0, 0, 512);
    post_recv(&mut s, 1, 0, 512);
    s.u8(4).u8(0).u8(0); // arm CQ 0
    s.u8(4).u8(1).u8(0); // arm CQ 1
    post_send(&mut s, 1, 0, 1, 32);
    post_inline(&mut s, 0, 1, b"reply");
    s.u8(7);
    s.u8(9).u8(0).u8(8);
    s.u8(9).u8(1).u8(8);
    s.u8(7);
    save(dir, "udp-loopback", &s);

    let mut s = Seed::default();
    // Protection: a send naming the other context's region, a receive into the read-only
    // region, a send to a non-local address, a TCP QP sending unconnected.
    post_recv(&mut s, 0, 1, 64);
    post_send(&mut s, 1, 0, 2, 16);
    post_send(&mut s, 1, 0, 0, 16);
    post_send(&mut s, 2, 0, 0, 16);
    s.u8(7);
    s.u8(9).u8(0).u8(8);
    s.u8(9).u8(1).u8(8);
    save(dir, "protection", &s);

    let mut s = Seed::default();
    // A doorbell far beyond the ring (the QP goes to error and flushes), a stray word in the
    // page, a whole page of 0xff, a destroyed QP.
    post_recv(&mut s, 0, 0, 64);
    s.u8(3).u8(0).u8(1).u8(2).u8(200); // SQ tail + 200
    s.u8(7);
    s.u8(5).u8(0).u16(0x7fc).u32(0xdead_beef).u8(1);
    s.u8(6).u8(2).u16(4096).bytes(&[0xff; 4096]);
    s.u8(7);
    s.u8(11).u8(0).u8(1); // destroy QP 1
    s.u8(7);
    save(dir, "wild-doorbells", &s);
}
