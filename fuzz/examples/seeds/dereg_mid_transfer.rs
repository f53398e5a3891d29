//! Seeds of the `dereg_mid_transfer` target: transfers with regions deregistered midway.

use std::path::Path;

use qpip_fuzz::Seed;

use crate::save;

// ---- dereg_mid_transfer -----------------------------------------------------------------------
// first byte: the pairs to connect (bits: 1 message, 2 stream, 4 iWARP). Then top level: 0 send, 3 recv, 5 step (then passes - 1), 8 settle, 9 consume, 10 DEREG_MR,
// 12 DESTROY_QP, 13 (0: DESTROY_CTX, 1: CLOSE). QPs, pair by pair among those connected:
// 0/1 message framing (context 0 accepts, context 1 connects), 2/3 stream framing, 4/5 iWARP
// (with all three; with one pair, its QPs are 0/1). Regions: 0-3 context 0's, 4-7 context
// 1's, in each: "out" (read-only to the device, remote read), "in" (local and remote write),
// "mix" (every right), "in2" (local write). An SGE picks among the regions that have the
// rights asked for ("fit": receives and Read sinks: in, mix, in2; RDMA Write targets: in,
// mix; Read sources: out, mix; send sources: all four).

/// One SGE: `len` bytes at `off` of the `fit`-th fitting region, its own lkey.
fn dm_sge(s: &mut Seed, fit: u8, off: u16, len: u16) {
    s.u8(1).u8(fit); // a fitting region
    s.u16(off).u8(2).u16(len); // inside it
    s.u8(1); // its lkey
}

fn dm_recv(s: &mut Seed, qp: u8, fit: u8, off: u16, len: u16) {
    s.u8(3).u8(qp).u8(0); // one SGE
    dm_sge(s, fit, off, len);
}

/// A Send of `len` bytes of fitting region `fit`; `kind` 0 message, 1 stream, 2 iWARP.
fn dm_send(s: &mut Seed, qp: u8, kind: u8, fit: u8, off: u16, len: u16) {
    s.u8(0).u8(qp);
    match kind {
        0 => {
            s.u8(7); // immediate data
        }
        2 => {
            s.u8(0); // a Send
        }
        _ => {}
    }
    s.u8(1).u8(0); // not inline, one SGE
    dm_sge(s, fit, off, len);
}

/// An RDMA Write (or Read) on iWARP QP `qp` of `len` bytes between local fitting region
/// `local` and the peer's fitting region `remote` at `roff`.
fn dm_rdma(
    s: &mut Seed,
    qp: u8,
    write: bool,
    (local, loff): (u8, u16),
    len: u16,
    (remote, roff): (u8, u16),
) {
    s.u8(0).u8(qp).u8(if write { 1 } else { 2 });
    s.u8(0); // one SGE
    dm_sge(s, local, loff, len);
    s.u8(1); // the peer's context
    s.u8(1).u8(remote).u16(roff);
    s.u8(1); // its rkey
}

fn dm_consume_all(s: &mut Seed) {
    for cq in 0..4 {
        s.u8(9).u8(cq).u8(15);
    }
}

pub(crate) fn dereg_mid_transfer(dir: &Path) {
    let mut s = Seed::default();
    // Message framing: the sender's region deregistered one pass into a 4000-byte message.
    s.u8(1);
    dm_recv(&mut s, 0, 0, 0, 4000);
    dm_send(&mut s, 1, 0, 0, 100, 4000);
    s.u8(5).u8(0);
    s.u8(10).u8(4);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "message-dereg-source", &s);

    let mut s = Seed::default();
    // Stream framing: the receiver's region deregistered while the bytes arrive.
    s.u8(2);
    dm_recv(&mut s, 0, 0, 0, 3000);
    dm_recv(&mut s, 0, 2, 0, 3000);
    dm_send(&mut s, 1, 1, 0, 0, 6000);
    s.u8(5).u8(0); // one pass: the segments wait in the loopback
    s.u8(10).u8(1);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "stream-dereg-sink", &s);

    let mut s = Seed::default();
    // iWARP: a Read of context 0's "out" region, deregistered while its Read Response
    // streams; then a Write into context 0's "in", deregistered under it.
    s.u8(4);
    dm_rdma(&mut s, 1, false, (0, 0), 6000, (0, 0));
    s.u8(5).u8(1); // two passes: the request is served, the response on its way
    s.u8(10).u8(0);
    s.u8(8);
    dm_rdma(&mut s, 1, true, (0, 0), 5000, (0, 0));
    s.u8(5).u8(0);
    s.u8(10).u8(1);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "iwarp-dereg", &s);

    let mut s = Seed::default();
    // Everything at once: transfers on every pair, then a QP destroyed, a close, the
    // connecting context destroyed, a region deregistered after its QP is gone.
    s.u8(7);
    dm_recv(&mut s, 0, 0, 0, 2000);
    dm_recv(&mut s, 2, 1, 0, 2000);
    dm_recv(&mut s, 4, 2, 0, 2000);
    dm_send(&mut s, 1, 0, 0, 0, 2000);
    dm_send(&mut s, 3, 1, 2, 0, 2000);
    dm_send(&mut s, 5, 2, 0, 0, 2000);
    dm_send(&mut s, 0, 0, 1, 0, 500);
    s.u8(5).u8(0);
    s.u8(12).u8(1);
    s.u8(13).u8(1).u8(2);
    s.u8(5).u8(2);
    s.u8(13).u8(0).u8(1);
    s.u8(8);
    s.u8(10).u8(0);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "destroy-mid-transfer", &s);

    let mut s = Seed::default();
    // Transfers that finish, with no region taken away.
    s.u8(7);
    dm_recv(&mut s, 1, 0, 0, 4096);
    dm_recv(&mut s, 3, 0, 4096, 4096);
    dm_recv(&mut s, 5, 1, 0, 3000);
    dm_send(&mut s, 0, 0, 0, 0, 4096);
    dm_send(&mut s, 2, 1, 3, 0, 4096);
    dm_send(&mut s, 4, 2, 2, 0, 3000);
    dm_rdma(&mut s, 4, true, (1, 0), 4000, (1, 0));
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "transfers", &s);
}
