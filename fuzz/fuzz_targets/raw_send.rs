//! A raw QP's send path on any input: the WQE parser (`engine::decode::raw_send_wqe`) on
//! a 128-byte ring slot, then the frame the rest of the input stands for through
//! `engine::raw::frame::prepare` with the WQE's offload fields, the identity check
//! (`backend::switch::sent_as`), the port split's look at its source port
//! (`engine::raw::port_split::source_port`) and, for a TSO super-segment, the cut the link
//! makes of it. Nothing panics; a refused WQE keeps its wr_id; an accepted frame stays
//! within the MTU (or, with TSO, 65,535 bytes of IP packet) and every segment cut from it
//! fits the MTU and names the super-segment's source port, so the port split's verdict on
//! the whole is its verdict on every frame that reaches the wire.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_abi::wqe::*;
use qpip_device::backend::switch::sent_as;
use qpip_device::engine::decode::{self, Payload};
use qpip_device::engine::raw::{frame, port_split};
use qpip_device::net::gso;

const MTU: usize = 1500;
const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let mut slot = [0u8; WQE_SIZE as usize];
    let n = data.len().min(slot.len());
    slot[..n].copy_from_slice(&data[..n]);
    let wr_id = u64::from_le_bytes(slot[..8].try_into().unwrap());
    let wr = match decode::raw_send_wqe(&slot) {
        Ok(wr) => wr,
        Err(e) => {
            assert_eq!(e.wr_id, wr_id, "a refused WQE keeps its wr_id");
            return;
        }
    };
    assert!(!wr.tso || wr.csum, "TSO without CSUM accepted");
    if let Payload::Inline(b) = &wr.frame {
        assert!(b.len() <= MAX_INLINE as usize);
    }
    // The frame: the input after the slot (the gathered bytes stand for themselves).
    let bytes = data.get(WQE_SIZE as usize..).unwrap_or(&[]).to_vec();
    let len = bytes.len();
    let Ok(ready) = frame::prepare(bytes, wr.csum, wr.tso, &wr.offload, MTU) else {
        return;
    };
    assert_eq!(
        ready.frame.len(),
        len,
        "offloads never change a frame's length"
    );
    assert!(ready.frame.len() >= frame::MIN_FRAME);
    if wr.tso {
        assert!(ready.frame.len() <= frame::MAX_TSO_FRAME);
    } else {
        assert!(ready.frame.len() <= MTU + 14);
        assert_eq!(ready.mss, 0);
    }
    let v6 = [[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 1]];
    let _ = sent_as(&ready.frame, &MAC, &v6, &[[10, 0, 0, 1]]);
    let port = port_split::source_port(&ready.frame);
    if ready.mss != 0 {
        let mut segments = 0;
        gso::split_frame(&ready.frame, ready.mss as usize, |s| {
            assert!(s.len() <= MTU + 14, "a segment of {} bytes", s.len());
            assert_eq!(
                port_split::source_port(&s),
                port,
                "a segment names its super-segment's source port"
            );
            segments += 1;
        })
        .expect("a super-segment prepare accepted is one the link can cut");
        assert_eq!(segments, ready.segments);
    }
});
