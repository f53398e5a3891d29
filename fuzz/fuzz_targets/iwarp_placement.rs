//! The placement path of an iWARP QP (`engine::tcp::iwarp`) fed whatever a peer may send:
//! a running QP with regions of every kind around guard pages
//! (`engine::tcp::iwarp::untrusted::Placement`), given stream bytes in order and ahead of
//! holes.
//!
//! Input: a control byte (bit 0: CRCs on), then operations until the input ends, each an
//! opcode byte:
//! * 0: raw bytes in order (a u16 length, then the bytes);
//! * 1: raw bytes ahead of a hole (a u16 gap, a u16 length, the bytes);
//! * 2: a well-formed FPDU, in order — an RDMAP opcode byte, a target byte (which STag: the
//!   writable region, the read-only one, another context's, the Read's sink, or a u32 from
//!   the input), a TO offset (u32), an MSN (u8), an MO (u16), the Last flag, a payload
//!   length (u16) — so the fuzzer reaches placement past the framing and CRC;
//! * 3: the same FPDU, placed ahead of a hole (u16 gap first).
//!
//! Checked: nothing panics; no byte is written outside what the peer may reach (guard
//! pages, the read-only region and the other context's region keep their bytes); no more
//! receive completions than receive WRs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_device::engine::tcp::iwarp::untrusted::*;
use qpip_device::net::iwarp::wire::fpdu;
use qpip_device::net::iwarp::wire::rdmap::{self, Opcode, ReadRequest};
use qpip_fuzz::Input;

fn crafted(i: &mut Input<'_>, crc: bool) -> Vec<u8> {
    let op = Opcode::from_u8(i.u8() % 10).unwrap_or(Opcode::Send);
    let (stag, base) = match i.u8() % 5 {
        0 => (STAG_RW, VA_RW),
        1 => (STAG_RO, VA_RO),
        2 => (STAG_OTHER, VA_RW),
        3 => (STAG_SINK, VA_SINK),
        _ => (i.u32(), i.u64()),
    };
    let to = base.wrapping_add(i.u32() as u64 % 0x3000);
    let msn = i.u8() as u32;
    let mo = i.u16() as u32;
    let last = i.u8() & 1 != 0;
    let payload = vec![0x5a; i.u16() as usize % 3000];
    let m = match op {
        Opcode::Write => rdmap::write(stag, to, last, &payload),
        Opcode::ReadResponse => rdmap::read_response(stag, to, last, &payload),
        Opcode::ReadRequest => rdmap::read_request(
            msn,
            ReadRequest {
                sink_stag: 7,
                sink_to: 0,
                size: payload.len() as u32,
                source_stag: stag,
                source_to: to,
            },
        ),
        Opcode::Terminate | Opcode::ImmediateData | Opcode::ImmediateDataSe => {
            rdmap::send(Opcode::Send, 0, msn, mo, last, &payload)
        }
        send => rdmap::send(send, stag, msn, mo, last, &payload),
    };
    let mut u = Vec::new();
    m.write(&mut u);
    let mut out = Vec::new();
    fpdu::build(&u, crc, &mut out).expect("a ULPDU under 64 KiB");
    out
}

fuzz_target!(|data: &[u8]| {
    let mut i = Input::new(data);
    let crc = i.u8() & 1 != 0;
    let mut p = Placement::new(crc);
    while !i.is_empty() && !p.ended() {
        match i.u8() % 4 {
            0 => {
                let n = i.u16() as usize;
                let b = i.bytes(n);
                p.feed(&b);
            }
            1 => {
                let gap = i.u16() as u64 + 1;
                let n = i.u16() as usize;
                let b = i.bytes(n);
                p.feed_ahead(gap, &b);
            }
            2 => {
                let b = crafted(&mut i, crc);
                p.feed(&b);
            }
            _ => {
                let gap = i.u16() as u64 + 1;
                let b = crafted(&mut i, crc);
                p.feed_ahead(gap, &b);
            }
        }
        if let Err(e) = p.check() {
            panic!("{e}");
        }
    }
});
