//! The receive side of a running iWARP QP fed whatever a peer may send — for the placement
//! path's fuzz target and tests. One guest RAM region holds, each between guard bytes, a
//! region peers may write and read, a read-only region, a region of another context, four
//! receive buffers and the sink of an outstanding RDMA Read; the QP is set up as MPA would
//! have left it. [`Placement::feed`] delivers stream bytes (in order, or ahead of a hole
//! as the connection offers them), and [`Placement::check`] says what went wrong: a byte
//! written outside what the peer may reach, or a state the protocol cannot be in.

use std::collections::HashMap;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use qpip_abi::admin::*;

use super::rx::{Env, RecvWr};
use super::tx::OutRead;
use super::{IwarpQp, Phase};
use crate::engine::memory::{MemoryRegion, Span, PAGE_SIZE};
use crate::net::iwarp::wire::fpdu::{self, Deframer};

/// Guest RAM of the harness, one page a piece: guard, writable+readable region (2 pages),
/// guard, read-only region, guard, another context's region, guard, receive buffers,
/// guard, Read sink, guard.
const BASE: u64 = 0x10_0000;
const PAGES: u64 = 13;
const GUARD: u8 = 0xee;

/// The keys peers see.
pub const STAG_RW: u32 = 0x1111_0001;
pub const STAG_RO: u32 = 0x2222_0002;
pub const STAG_OTHER: u32 = 0x3333_0003;
/// The sink STag of the outstanding Read (its response must name it).
pub const STAG_SINK: u32 = 0x4444_0004;
/// Virtual addresses of the regions (what TOs name).
pub const VA_RW: u64 = 0x7000_0000;
pub const VA_RO: u64 = 0x7100_0000;
pub const VA_SINK: u64 = 0x7200_0000;

fn page(n: u64) -> u64 {
    BASE + n * PAGE_SIZE
}

/// What may be written: (first page, pages).
const WRITABLE: [(u64, u64); 3] = [(1, 2), (8, 1), (10, 1)];

/// A running iWARP QP's receive side and the memory it may place into.
pub struct Placement {
    iw: IwarpQp,
    guest: Guest,
    /// Stream offset of the next in-order byte.
    next: u64,
}

/// The guest's side of the QP: its RAM and the regions registered in it.
struct Guest {
    mem: GuestMemoryMmap,
    mrs: HashMap<u32, MemoryRegion>,
    tripwires: HashMap<u32, crate::engine::tripwire::Tripwire>,
}

impl Guest {
    /// What the QP's receive side is handed, as the engine hands it (context 1, QP 9).
    fn env(&self) -> Env<'_> {
        Env {
            mem: &self.mem,
            mrs: &self.mrs,
            tripwires: &self.tripwires,
            ctx: 1,
            qp: 9,
        }
    }
}

fn region(first: u64, pages: u64, iova: u64, ctx: u32, access: u32) -> MemoryRegion {
    MemoryRegion {
        ctx,
        pages: (first..first + pages).map(page).collect(),
        iova,
        length: pages * PAGE_SIZE,
        first_page_offset: 0,
        access,
    }
}

impl Placement {
    /// A QP as MPA left it, CRC `crc`, with four receive buffers of 1 KiB posted and a
    /// Read of 4 KiB outstanding.
    pub fn new(crc: bool) -> Placement {
        let mem =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(BASE), (PAGES * PAGE_SIZE) as usize)])
                .expect("guest memory");
        mem.write_slice(
            &vec![GUARD; (PAGES * PAGE_SIZE) as usize],
            GuestAddress(BASE),
        )
        .expect("fill");
        let mut mrs = HashMap::new();
        let rights = MR_ACCESS_LOCAL_WRITE | MR_ACCESS_REMOTE_WRITE | MR_ACCESS_REMOTE_READ;
        mrs.insert(STAG_RW, region(1, 2, VA_RW, 1, rights));
        mrs.insert(STAG_RO, region(4, 1, VA_RO, 1, MR_ACCESS_REMOTE_READ));
        mrs.insert(STAG_OTHER, region(6, 1, VA_RW, 2, rights));
        let mut iw = IwarpQp::new();
        iw.phase = Phase::Running;
        iw.deframer = Deframer::new(crc, fpdu::MAX_ULPDU);
        iw.tx.crc = crc;
        iw.conn_ird = 4;
        iw.conn_ord = 4;
        for i in 0..4u64 {
            iw.recv_wrs.push_back(RecvWr {
                wr_id: i,
                spans: Ok(vec![Span {
                    addr: page(8) + i * 1024,
                    len: 1024,
                    key: STAG_RW,
                }]),
                cap: 1024,
                filled: 0,
            });
        }
        iw.tx.reads.push_back(OutRead {
            stag: STAG_SINK,
            to: VA_SINK,
            size: PAGE_SIZE as u32,
            sink: vec![Span {
                addr: page(10),
                len: PAGE_SIZE as usize,
                key: STAG_SINK,
            }]
            .into(),
            placed: 0,
            for_wr: true,
        });
        Placement {
            iw,
            guest: Guest {
                mem,
                mrs,
                tripwires: HashMap::new(),
            },
            next: 0,
        }
    }

    /// The next in-order bytes of the stream.
    pub fn feed(&mut self, data: &[u8]) {
        self.iw.receive(&self.guest.env(), data);
        self.next += data.len() as u64;
    }

    /// Bytes `gap` ahead of the in-order point, as the connection offers them after a
    /// loss; true if they were placed (the stream then skips them: they are passed over
    /// at once here, as the connection would once the hole is filled).
    pub fn feed_ahead(&mut self, gap: u64, data: &[u8]) -> bool {
        let at = self.next + gap;
        self.iw.place_ahead(&self.guest.env(), at, data)
    }

    /// Segments placed ahead of the in-order point and not yet passed by it.
    pub fn ahead(&self) -> usize {
        self.iw.ahead_ranges.len()
    }

    /// Whether the connection ended (a Terminate sent or received).
    pub fn ended(&self) -> bool {
        self.iw.phase() == Phase::Over
    }

    /// What went wrong, if anything: a byte written where the peer may not write (a guard,
    /// the read-only region, the other context's region), or completions beyond the
    /// receive WRs posted.
    pub fn check(&self) -> Result<(), String> {
        // Whole-page comparisons: the fuzz target checks after every feed, and a loop over
        // every byte (instrumented for coverage there) was most of its time.
        static GUARDS: [u8; PAGE_SIZE as usize] = [GUARD; PAGE_SIZE as usize];
        let mut b = vec![0u8; PAGE_SIZE as usize];
        for p in 0..PAGES {
            if WRITABLE.iter().any(|&(f, n)| (f..f + n).contains(&p)) {
                continue;
            }
            self.guest
                .mem
                .read_slice(&mut b, GuestAddress(page(p)))
                .expect("read");
            if b[..] != GUARDS[..] {
                let i = b.iter().position(|&x| x != GUARD).expect("a byte differs");
                return Err(format!("page {p} written at byte {i}"));
            }
        }
        let done = self.iw.recv_done.len() + self.iw.recv_wrs.len();
        if done > 4 {
            return Err(format!("{done} receive completions and WRs from 4 posted"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::iwarp::wire::rdmap;

    fn fpdu(m: rdmap::Message<'_>, crc: bool) -> Vec<u8> {
        let mut u = Vec::new();
        m.write(&mut u);
        let mut out = Vec::new();
        fpdu::build(&u, crc, &mut out).unwrap();
        out
    }

    #[test]
    fn writes_land_only_where_the_peer_may_write() {
        for crc in [false, true] {
            let mut p = Placement::new(crc);
            p.feed(&fpdu(
                rdmap::write(STAG_RW, VA_RW + 100, true, &[1; 300]),
                crc,
            ));
            p.feed(&fpdu(
                rdmap::send(rdmap::Opcode::Send, 0, 1, 0, true, &[2; 50]),
                crc,
            ));
            assert!(!p.ended());
            p.check().unwrap();
            // Into the read-only region: refused, the connection ends, nothing written.
            p.feed(&fpdu(rdmap::write(STAG_RO, VA_RO, true, &[3; 10]), crc));
            assert!(p.ended());
            p.check().unwrap();
            let mut p = Placement::new(crc);
            p.feed(&fpdu(rdmap::write(STAG_OTHER, VA_RW, true, &[3; 10]), crc));
            assert!(p.ended(), "another context's region");
            p.check().unwrap();
            // A Write placed ahead of a hole, into the region it may reach only.
            let mut p = Placement::new(crc);
            let w = fpdu(rdmap::write(STAG_RW, VA_RW, true, &[4; 64]), crc);
            assert!(p.feed_ahead(100, &w));
            let bad = fpdu(rdmap::write(STAG_RO, VA_RO, true, &[4; 64]), crc);
            assert!(
                !p.feed_ahead(200, &bad),
                "refused, left for the in-order pass"
            );
            p.check().unwrap();
        }
    }

    /// A peer that sends small Writes ahead of a hole it never fills: the QP remembers a
    /// bounded number of them; the rest wait for the hole (TCP buffers them within its
    /// own bounds, or drops them).
    #[test]
    fn segments_placed_ahead_of_a_hole_are_bounded() {
        let mut p = Placement::new(false);
        let seg = fpdu(rdmap::write(STAG_RW, VA_RW, true, &[7; 8]), false);
        let mut placed = 0;
        for i in 0..3 * super::super::rx::MAX_AHEAD_RANGES as u64 {
            placed += p.feed_ahead(1 + i * seg.len() as u64, &seg) as usize;
        }
        assert_eq!(placed, super::super::rx::MAX_AHEAD_RANGES);
        assert_eq!(p.ahead(), super::super::rx::MAX_AHEAD_RANGES);
        p.check().unwrap();
    }
}
