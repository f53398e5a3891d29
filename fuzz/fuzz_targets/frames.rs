//! Received frames against the device's network: the real `net::Stack` (IPv6 and IPv4
//! addresses, a static and a learned neighbour, NDP and ARP, ICMPv6 and ICMPv4, fragments,
//! path MTU) and the real TCP
//! (`ConnectionTable` with a listener with SYN cookies and an established connection),
//! driven as the engine drives them (see `qpip_fuzz::frames`). The input is a sequence of
//! operations: raw frames; TCP segments built around fuzzed fields near the live sequence
//! numbers, with any flags and options, corrupted or in fragments at will; ICMPv6 echo,
//! NDP, packet too big and other errors; UDP; time passing (up to an hour a step);
//! application calls (send, read, close, abort, connect) and the listener going and
//! coming back.
//!
//! Checked after every operation:
//! * nothing panics (no arithmetic overflow either: fuzz builds check it);
//! * every connection's invariants (`Connection::check_invariants`);
//! * the application's view: in-order delivery within the space offered, `Acked` moving
//!   forward within what was queued, the send source never read beyond what was queued,
//!   `DataArrived` within what the sink holds;
//! * the listener's backlog bounds its half-open connections;
//! * every frame the device sends is from its MAC and one of its addresses (ARP as
//!   itself), within the MTU, and a TCP segment in it has a right checksum;
//! * a path MTU reported to TCP is within 1280..=MTU (576..=MTU toward IPv4).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_fuzz::frames::{Op, World};
use qpip_fuzz::{trace, Input};

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut i = Input::new(data);
    let mut steps = 0;
    while !i.is_empty() && steps < 256 {
        let op = Op::decode(&mut i);
        trace!("{op:?}");
        w.step(&op);
        trace!(
            "  -> {} connections, {} frames sent so far; {:?}",
            w.table.len(),
            w.sent.len(),
            w.table.stats()
        );
        steps += 1;
    }
});
