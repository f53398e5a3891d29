//! The WQE parsers (`engine::decode::send_wqe`, `recv_wqe`) on any 128-byte ring slot: no
//! panic, the wr_id of a refused WQE is always recovered (it is what the error CQE carries),
//! and an accepted WQE stays within the ABI's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_abi::cqe::*;
use qpip_abi::wqe::*;
use qpip_device::engine::decode::{self, Payload};

fuzz_target!(|data: &[u8]| {
    let mut slot = [0u8; WQE_SIZE as usize];
    let n = data.len().min(slot.len());
    slot[..n].copy_from_slice(&data[..n]);
    let wr_id = u64::from_le_bytes(slot[..8].try_into().unwrap());
    let known = [
        CQE_STATUS_BAD_OPCODE,
        CQE_STATUS_BAD_WQE,
        CQE_STATUS_LOCAL_LENGTH,
        CQE_STATUS_LOCAL_PROTECTION,
    ];
    match decode::send_wqe(&slot) {
        Ok(wr) => {
            assert_eq!(wr.wr_id, wr_id);
            assert_eq!(slot[8], wr.opcode);
            assert!(
                [WQE_OP_SEND, WQE_OP_RDMA_WRITE, WQE_OP_RDMA_READ].contains(&wr.opcode),
                "opcode {} accepted",
                wr.opcode
            );
            if wr.opcode != WQE_OP_SEND {
                assert!(!wr.solicited, "a solicited RDMA operation");
                if !wr.with_imm {
                    assert_eq!(wr.imm_data, 0, "immediate data without WQE_FLAG_IMM");
                }
            }
            if wr.with_imm {
                assert_eq!(
                    wr.opcode, WQE_OP_RDMA_WRITE,
                    "immediate data after a non-Write"
                );
            }
            if wr.opcode == WQE_OP_RDMA_READ {
                assert!(
                    matches!(wr.payload, Payload::Gather(_)),
                    "an inline RDMA Read"
                );
            }
            match wr.payload {
                Payload::Inline(d) => {
                    assert!(d.len() as u32 <= MAX_INLINE);
                    let at = WQE_SGE_OFFSET as usize;
                    assert_eq!(
                        &d[..],
                        &slot[at..at + d.len()],
                        "inline bytes are the slot's"
                    );
                }
                Payload::Gather(s) => assert!(s.len() as u32 <= MAX_SGE),
            }
        }
        Err(e) => {
            assert_eq!(e.wr_id, wr_id, "a refused WQE keeps its wr_id");
            assert!(known.contains(&e.status), "unexpected status {e:?}");
        }
    }
    match decode::recv_wqe(&slot) {
        Ok(wr) => {
            assert_eq!(wr.wr_id, wr_id);
            assert_eq!(slot[8], WQE_OP_RECV);
            assert!(wr.sges.len() as u32 <= MAX_SGE);
        }
        Err(e) => {
            assert_eq!(e.wr_id, wr_id, "a refused WQE keeps its wr_id");
            assert!(known.contains(&e.status), "unexpected status {e:?}");
        }
    }
});
