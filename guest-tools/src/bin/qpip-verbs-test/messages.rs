//! The message-framing check that `qpip-verbs-test` runs on the device and
//! `guest-lib/tests/soft.rs` on the software provider (it includes this file): six messages on one TCP connection —
//! one byte, none, a gather of two pieces, inline, one too big for its receive buffer,
//! inline again — each with its immediate, and what their receives must report.

use qpip::{MemoryRegion, Qp, SendWr, Status};

/// Bytes of each receive buffer (the fifth message does not fit).
pub const RECV_SIZE: usize = 4096;
/// Bytes of the region the messages are sent from.
pub const SEND_SIZE: usize = 3 * 4096;

/// Fills the send region with its pattern: byte `i` is `i % 251`.
pub fn fill(sbuf: &mut MemoryRegion) {
    for (i, x) in sbuf.iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
}

/// Posts the six messages from `sbuf` on `client`, tagged 1 to 6; the first failure and
/// its tag.
pub fn post(client: &Qp, sbuf: &MemoryRegion) -> Result<(), (u64, qpip::Error)> {
    let one = [sbuf.sge(0, 1)];
    let gather = [sbuf.sge(100, 1000), sbuf.sge(2000, 2000)];
    let too_big = [sbuf.sge(0, 5000)];
    let wrs = [
        SendWr::new(1, &one).imm(11),
        SendWr::new(2, &[]).imm(22),
        SendWr::new(3, &gather).imm(33),
        SendWr::inline(4, b"inline").imm(44),
        SendWr::new(5, &too_big).imm(55),
        SendWr::inline(6, b"after").imm(66),
    ];
    for (tag, wr) in (1..).zip(&wrs) {
        client.post_send(wr).map_err(|e| (tag, e))?;
    }
    Ok(())
}

/// What the receives report, posted in order with tags 100 on (RECV_SIZE each): tag,
/// status, bytes, immediate. The fifth message is too long: LocalLength with its size.
pub const RECEIVES: [(u64, Status, u32, u32); 6] = [
    (100, Status::Success, 1, 11),
    (101, Status::Success, 0, 22),
    (102, Status::Success, 3000, 33),
    (103, Status::Success, 6, 44),
    (104, Status::LocalLength, 5000, 55),
    (105, Status::Success, 5, 66),
];

/// The bytes of the third message, gathered from `sbuf`.
pub fn gathered(sbuf: &MemoryRegion) -> Vec<u8> {
    sbuf[100..1100]
        .iter()
        .chain(&sbuf[2000..4000])
        .copied()
        .collect()
}
