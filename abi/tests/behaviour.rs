//! The behaviour `qpip-abi` owns beside its layouts: the message header's encoding and
//! reader, and the producer side of the doorbell protocol.

use std::sync::atomic::{AtomicU32, Ordering};

use qpip_abi::doorbell::{self, Producer, DB_CHANGE_COUNT, DB_ENGINE_SLEEPING};
use qpip_abi::pci::DOORBELL_PAGE_SIZE;
use qpip_abi::wqe::{HeaderReader, MsgHeader, MSG_HEADER_SIZE};

#[test]
fn a_message_header_is_little_endian_on_the_wire() {
    let h = MsgHeader::new(0x0102_0304, 0xa0b0_c0d0);
    let b = h.encode();
    assert_eq!(b, [4, 3, 2, 1, 0xd0, 0xc0, 0xb0, 0xa0]);
    assert_eq!(MsgHeader::decode(&b), h);
    assert_eq!(b.len(), MSG_HEADER_SIZE as usize);
}

/// Headers cut at every point (a segment may end anywhere inside one) come out whole, and
/// the reader takes no byte beyond a header.
#[test]
fn a_header_reader_takes_headers_in_pieces_of_any_size() {
    let headers = [
        MsgHeader::new(7, 1),
        MsgHeader::new(0, 0),
        MsgHeader::new(u32::MAX, 9),
    ];
    let stream: Vec<u8> = headers.iter().flat_map(|h| h.encode()).collect();
    for piece in 1..=stream.len() {
        let mut r = HeaderReader::default();
        let mut got = Vec::new();
        for chunk in stream.chunks(piece) {
            let mut at = 0;
            while at < chunk.len() {
                let (n, h) = r.take(&chunk[at..]);
                assert!(n > 0 && n <= r.missing().max(n));
                at += n;
                got.extend(h);
            }
        }
        assert_eq!(got, headers, "pieces of {piece}");
        assert!(!r.partial());
        assert_eq!(r.missing(), MSG_HEADER_SIZE as usize);
    }
    let mut r = HeaderReader::default();
    assert_eq!(r.take(&[1, 2, 3]), (3, None));
    assert!(r.partial());
    assert_eq!(r.missing(), 5);
    // Only the header's own bytes are taken.
    assert_eq!(r.take(&[0; 20]).0, 5);
    assert!(!r.partial());
}

/// A page of atomics standing in for the doorbell page.
fn page() -> Vec<AtomicU32> {
    (0..DOORBELL_PAGE_SIZE / 4)
        .map(|_| AtomicU32::new(0))
        .collect()
}

#[test]
fn ringing_stores_the_value_counts_the_change_and_says_when_to_kick() {
    let words = page();
    // SAFETY: a live, aligned page of atomics, as long as `words`.
    let p = unsafe { Producer::from_ptr(words.as_ptr() as *mut u8) };
    let at = |off: u32| words[off as usize / 4].load(Ordering::SeqCst);
    assert!(
        !p.ring(doorbell::qp_sq_tail(3), 17),
        "an awake engine needs no kick"
    );
    assert_eq!(at(doorbell::qp_sq_tail(3)), 17);
    assert_eq!(at(DB_CHANGE_COUNT), 1);
    words[DB_ENGINE_SLEEPING as usize / 4].store(1, Ordering::SeqCst);
    assert!(
        p.ring(doorbell::cq_head(5), 2),
        "a sleeping engine is kicked"
    );
    assert_eq!(p.load(doorbell::cq_head(5)), 2);
    assert_eq!(at(DB_CHANGE_COUNT), 2);
    assert!(p.engine_sleeping());
    // The slots' offsets as the ABI lays them out.
    assert_eq!(doorbell::qp_sq_tail(3), 0x040 + 3 * 8);
    assert_eq!(doorbell::qp_rq_tail(3), 0x040 + 3 * 8 + 4);
    assert_eq!(doorbell::cq_head(5), 0x800 + 5 * 8);
    assert_eq!(doorbell::cq_arm_seq(5), 0x800 + 5 * 8 + 4);
}

/// Threads of one process share a page without a lock: no change is lost.
#[test]
fn threads_ringing_one_page_lose_no_change() {
    let words = page();
    // SAFETY: as above.
    let p = unsafe { Producer::from_ptr(words.as_ptr() as *mut u8) };
    std::thread::scope(|s| {
        for t in 0..4u32 {
            s.spawn(move || {
                for i in 0..10_000 {
                    p.ring(doorbell::qp_sq_tail(t), i);
                }
            });
        }
    });
    assert_eq!(p.load(DB_CHANGE_COUNT), 40_000);
}

#[test]
fn a_wqe_slot_holds_its_header_then_its_body_at_the_sge_offset() {
    use qpip_abi::wqe::*;
    use zerocopy::{FromZeros, IntoBytes};
    let mut h = Wqe::new_zeroed();
    h.wr_id = 0x1122_3344_5566_7788;
    h.opcode = WQE_OP_SEND;
    h.num_sge = 2;
    let sges = [
        Sge {
            addr: 0x1000,
            length: 7,
            lkey: 9,
        },
        Sge {
            addr: 0x2000,
            length: 8,
            lkey: 10,
        },
    ];
    let b = slot(&h, &sges);
    let o = WQE_SGE_OFFSET as usize;
    assert_eq!(&b[..h.as_bytes().len()], h.as_bytes());
    assert_eq!(&b[o..o + 32], sges.as_bytes());
    assert!(
        b[o + 32..].iter().all(|&x| x == 0),
        "the rest of the slot is zero"
    );
    let inline = slot_with(&h, b"hello");
    assert_eq!(&inline[o..o + 5], b"hello");
    // The largest body fills the slot exactly; a larger one is refused.
    let full = [0xab; WQE_SIZE as usize - WQE_SGE_OFFSET as usize];
    assert_eq!(slot_with(&h, &full)[WQE_SIZE as usize - 1], 0xab);
    let too_big = [0u8; WQE_SIZE as usize - WQE_SGE_OFFSET as usize + 1];
    assert!(std::panic::catch_unwind(|| slot_with(&h, &too_big)).is_err());
}
