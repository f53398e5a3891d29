//! Frames from a TAP with offloads: a virtio-net header and a frame, as the kernel hands
//! them to the device (`backend::vnet::finish_rx`, then the same world as the `frames`
//! target: the real stack and TCP with a listener and connections). The input mixes the
//! `frames` target's operations (so connections exist and segments reach them) with raw
//! frames of up to 64 KiB behind any header: partial checksums anywhere, GSO types, GRO'd
//! sizes. Each such frame is also cut by the software segmentation (`net::gso`) at a
//! fuzzed size.
//!
//! Checked: nothing panics (arithmetic overflow included), a refused header changes
//! nothing, a completed partial checksum makes its range verify with the partial sum, and every
//! piece the segmentation makes is a frame no longer than its headers plus the size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_device::backend::vnet::{self, VnetHdr};
use qpip_device::net::{checksum, gso};
use qpip_fuzz::frames::{Op, World};
use qpip_fuzz::{trace, Input};

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut i = Input::new(data);
    let mut steps = 0;
    while !i.is_empty() && steps < 64 {
        steps += 1;
        if i.bool() {
            let op = Op::decode(&mut i);
            trace!("{op:?}");
            w.step(&op);
            continue;
        }
        let h = VnetHdr::parse(&i.bytes(vnet::LEN)).expect("10 bytes");
        let n = i.u16() as usize;
        let mut f = i.bytes(n);
        let before = f.clone();
        trace!("vnet {h:?}, {n} bytes");
        match vnet::finish_rx(&h, &mut f) {
            Ok(()) => {
                if h.flags & vnet::F_NEEDS_CSUM != 0 {
                    // The range now sums, with the partial sum the field held, to zero.
                    let start = h.csum_start as usize;
                    let at = start + h.csum_offset as usize;
                    let partial = u16::from_be_bytes([before[at], before[at + 1]]);
                    let sum = checksum::add(checksum::sum(0, &f[start..]), partial);
                    assert_eq!(sum, 0xffff, "completed checksum");
                }
                w.receive(&f);
            }
            Err(_) => assert_eq!(f, before, "a refused frame is left alone"),
        }
        let mss = i.u16() as usize;
        let headers = gso::frame_headers_len(&f);
        let _ = gso::split_frame(&f, mss, |p| {
            let hl = headers.expect("only a TCP super-frame is cut");
            assert!(p.len() <= hl + mss, "a piece of at most the size");
        });
    }
});
