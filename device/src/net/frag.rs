//! IPv6 fragmentation at the source and reassembly (RFC 8200 §4.5, RFC 5722), and IPv4's
//! (RFC 791) with the same bounds: a reassembly is keyed by its (mapped) addresses and an
//! identifier, IPv4's carrying its protocol too ([`Key::ipv4`]).
//!
//! Reassembly keeps at most [`MAX_REASSEMBLIES`] packets in progress and
//! [`MAX_REASSEMBLY_BYTES`] bytes in all; past either bound the oldest reassembly is
//! abandoned. A packet not complete [`REASSEMBLY_TIMEOUT`] after its first fragment arrived
//! is abandoned too (the stack answers with "fragment reassembly time exceeded" if the first
//! fragment was among those received). A fragment that overlaps another of the same packet
//! abandons the packet, and fragments of it that arrive later are dropped until the timeout
//! (RFC 5722); an exact duplicate of a fragment already held is only dropped (RFC 8200
//! allows this, and links do duplicate).

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

pub const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_REASSEMBLIES: usize = 64;
pub const MAX_REASSEMBLY_BYTES: usize = 4 << 20;
/// Largest reassembled payload: the payload length field's range.
pub const MAX_PACKET: usize = 65535;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub id: u32,
}

impl Key {
    /// An IPv4 packet's key: its addresses (mapped), protocol and 16-bit identification
    /// (RFC 791: the four together name a datagram). Mapped addresses never collide with an
    /// IPv6 packet's.
    pub fn ipv4(src: Ipv6Addr, dst: Ipv6Addr, protocol: u8, id: u16) -> Key {
        Key {
            src,
            dst,
            id: (protocol as u32) << 16 | id as u32,
        }
    }
}

struct Pending {
    /// Received ranges [start, end), sorted, disjoint.
    ranges: Vec<(usize, usize)>,
    data: Vec<u8>,
    /// The length of the packet, once the last fragment is in.
    total: Option<usize>,
    /// From the fragment at offset 0.
    next_header: Option<u8>,
    /// The first fragment as received (IPv6 packet), for a time-exceeded message.
    first: Option<Vec<u8>>,
    /// Abandoned after an overlap: later fragments are dropped until the timeout.
    dead: bool,
    fragments: usize,
}

/// A received fragment of either family, checked, for [`Reassembler::insert`].
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    pub key: Key,
    /// Where `data` starts in the packet's fragmentable part, in bytes.
    pub offset: usize,
    /// More fragments follow (IPv6's M flag, IPv4's MF).
    pub more: bool,
    /// The packet's next header (IPv4: its protocol).
    pub next_header: u8,
    /// The fragment's part of the fragmentable part.
    pub data: &'a [u8],
    /// The whole received packet (kept if `offset` is 0, to be quoted by time exceeded).
    pub packet: &'a [u8],
}

/// What became of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Held; the packet is not complete yet.
    Held,
    /// The packet is complete: its next header and the reassembled fragmentable part.
    Complete(u8, Vec<u8>),
    /// An exact duplicate of a fragment held already.
    Duplicate,
    /// Overlaps a fragment of the same packet (RFC 5722): the packet is abandoned, and
    /// this many fragments held for it are thrown away with this one.
    Overlap(usize),
    /// Inconsistent with the fragments before it (ends past the last fragment, or two last
    /// fragments that disagree): the packet is abandoned, with this many held fragments.
    Inconsistent(usize),
}

/// A reassembly given up, for the stack to report.
pub struct Expired {
    /// The first fragment, if it arrived (the stack sends time exceeded for it).
    pub first: Option<Vec<u8>>,
    pub fragments: usize,
    /// False when abandoned for an overlap or inconsistency (already counted), true when
    /// it timed out or was evicted.
    pub timed_out: bool,
}

#[derive(Default)]
pub struct Reassembler {
    pending: HashMap<Key, Pending>,
    /// Keys in the order their reassembly started: the front times out first.
    order: VecDeque<(Instant, Key)>,
    bytes: usize,
}

impl Reassembler {
    pub fn new() -> Reassembler {
        Reassembler::default()
    }

    pub fn in_progress(&self) -> usize {
        self.pending.values().filter(|p| !p.dead).count()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds one fragment. The caller checked the RFC 8200 length rules (multiple of 8
    /// unless last, end within 65535). `expired` receives reassemblies evicted to make room.
    pub fn insert(&mut self, f: Fragment, now: Instant, expired: &mut Vec<Expired>) -> Outcome {
        let Fragment {
            key,
            offset,
            more,
            next_header,
            data,
            packet,
        } = f;
        let end = offset + data.len();
        debug_assert!(end <= MAX_PACKET);
        if !self.pending.contains_key(&key) {
            while self.pending.len() >= MAX_REASSEMBLIES {
                if !self.evict_oldest(expired) {
                    break;
                }
            }
            self.pending.insert(
                key,
                Pending {
                    ranges: Vec::new(),
                    data: Vec::new(),
                    total: None,
                    next_header: None,
                    first: None,
                    dead: false,
                    fragments: 0,
                },
            );
            self.order.push_back((now, key));
        }
        let p = self.pending.get_mut(&key).expect("present");
        if p.dead {
            return Outcome::Overlap(0);
        }
        // Overlap with what we hold: an exact duplicate is harmless, anything else is not.
        for &(s, e) in &p.ranges {
            if offset < e && s < end {
                if s == offset && e == end && p.data[s..e] == *data {
                    let consistent = more || p.total == Some(end);
                    if consistent {
                        return Outcome::Duplicate;
                    }
                }
                return Outcome::Overlap(self.kill(key));
            }
        }
        let total_ok = match (p.total, more) {
            (Some(t), false) => t == end,
            (Some(t), true) => end <= t,
            (None, false) => p.ranges.last().is_none_or(|&(_, e)| e <= end),
            (None, true) => true,
        };
        if !total_ok || data.is_empty() && more {
            return Outcome::Inconsistent(self.kill(key));
        }
        if !more {
            p.total = Some(end);
        }
        if offset == 0 {
            p.next_header = Some(next_header);
            p.first = Some(packet.to_vec());
            self.bytes += packet.len();
        }
        if p.data.len() < end {
            self.bytes += end - p.data.len();
            p.data.resize(end, 0);
        }
        p.data[offset..end].copy_from_slice(data);
        let at = p.ranges.partition_point(|&(s, _)| s < offset);
        p.ranges.insert(at, (offset, end));
        p.fragments += 1;
        let complete = p.total.is_some_and(|t| {
            let mut covered = 0;
            for &(s, e) in &p.ranges {
                if s != covered {
                    return false;
                }
                covered = e;
            }
            covered == t
        });
        if complete {
            let p = self.pending.remove(&key).expect("present");
            self.bytes -= p.data.len() + p.first.as_ref().map_or(0, Vec::len);
            self.order.retain(|(_, k)| *k != key);
            return Outcome::Complete(p.next_header.expect("offset 0 is in"), p.data);
        }
        // Over the memory bound the oldest reassemblies go (possibly this one).
        while self.bytes > MAX_REASSEMBLY_BYTES {
            if !self.evict_oldest(expired) {
                break;
            }
        }
        // (Possibly evicted just now: then it is counted through `expired`.)
        Outcome::Held
    }

    /// Abandons a reassembly after an overlap: its memory goes, a tombstone stays until the
    /// timeout so that later fragments of it are dropped too.
    /// Returns how many fragments it held.
    fn kill(&mut self, key: Key) -> usize {
        let Some(p) = self.pending.get_mut(&key) else {
            return 0;
        };
        self.bytes -= p.data.len() + p.first.as_ref().map_or(0, Vec::len);
        p.data = Vec::new();
        p.first = None;
        p.ranges.clear();
        p.dead = true;
        std::mem::take(&mut p.fragments)
    }

    fn evict_oldest(&mut self, expired: &mut Vec<Expired>) -> bool {
        let Some((_, key)) = self.order.pop_front() else {
            return false;
        };
        if let Some(p) = self.pending.remove(&key) {
            self.bytes -= p.data.len() + p.first.as_ref().map_or(0, Vec::len);
            if !p.dead {
                expired.push(Expired {
                    first: None, // evicted, not timed out: no ICMP (RFC 8200 §4.5)
                    fragments: p.fragments,
                    timed_out: true,
                });
            }
        }
        true
    }

    /// Abandons the reassemblies that have timed out.
    pub fn poll(&mut self, now: Instant, expired: &mut Vec<Expired>) {
        while let Some(&(t, key)) = self.order.front() {
            if now < t + REASSEMBLY_TIMEOUT {
                break;
            }
            self.order.pop_front();
            if let Some(p) = self.pending.remove(&key) {
                self.bytes -= p.data.len() + p.first.as_ref().map_or(0, Vec::len);
                expired.push(Expired {
                    first: p.first,
                    fragments: p.fragments,
                    timed_out: !p.dead,
                });
            }
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.order.front().map(|&(t, _)| t + REASSEMBLY_TIMEOUT)
    }
}

/// Splits a fragmentable part (upper-layer header and data) into fragment payloads for a
/// link of `mtu` with `headers` bytes of headers in each fragment (IPv6 and its fragment
/// header, or IPv4's): every fragment but the last carries a multiple of 8 bytes, and each
/// fits. Returns (offset, more, bytes) per fragment.
pub fn split(
    part: &[u8],
    mtu: usize,
    headers: usize,
) -> impl Iterator<Item = (usize, bool, &[u8])> {
    let room = (mtu - headers) & !7;
    part.chunks(room).enumerate().map(move |(i, c)| {
        let offset = i * room;
        (offset, offset + c.len() < part.len(), c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u32) -> Key {
        Key {
            src: "fd51::1".parse().unwrap(),
            dst: "fd51::2".parse().unwrap(),
            id,
        }
    }

    fn ins(
        r: &mut Reassembler,
        id: u32,
        off: usize,
        more: bool,
        data: &[u8],
        now: Instant,
    ) -> Outcome {
        let mut ex = Vec::new();
        let f = Fragment {
            key: key(id),
            offset: off,
            more,
            next_header: 17,
            data,
            packet: data,
        };
        r.insert(f, now, &mut ex)
    }

    #[test]
    fn reassembles_in_any_order() {
        let t = Instant::now();
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let frags: Vec<_> = split(&data, 1280, 48).collect();
        assert_eq!(frags.len(), 3);
        assert!(frags.iter().all(|(o, _, _)| o % 8 == 0));
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            let mut r = Reassembler::new();
            let mut out = None;
            for i in order {
                let (o, m, d) = frags[i];
                match ins(&mut r, 1, o, m, d, t) {
                    Outcome::Complete(nh, p) => out = Some((nh, p)),
                    Outcome::Held => {}
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(out, Some((17, data.clone())));
            assert_eq!(r.bytes(), 0);
            assert_eq!(r.in_progress(), 0);
        }
    }

    #[test]
    fn duplicates_are_dropped_overlaps_abandon() {
        let t = Instant::now();
        let mut r = Reassembler::new();
        assert_eq!(ins(&mut r, 1, 0, true, &[1; 16], t), Outcome::Held);
        assert_eq!(ins(&mut r, 1, 0, true, &[1; 16], t), Outcome::Duplicate);
        // Same range, different bytes: an overlap.
        assert_eq!(ins(&mut r, 1, 0, true, &[2; 16], t), Outcome::Overlap(1));
        // Later fragments of that packet go too, even ones that would complete it.
        assert_eq!(ins(&mut r, 1, 16, false, &[1; 8], t), Outcome::Overlap(0));
        assert_eq!(r.bytes(), 0);
        // Partial overlap.
        assert_eq!(ins(&mut r, 2, 0, true, &[1; 16], t), Outcome::Held);
        assert_eq!(ins(&mut r, 2, 8, false, &[1; 16], t), Outcome::Overlap(1));
        // After the timeout the tombstone is gone and the id is usable again.
        let mut ex = Vec::new();
        r.poll(t + REASSEMBLY_TIMEOUT, &mut ex);
        assert_eq!(ex.len(), 2);
        assert!(ex.iter().all(|e| !e.timed_out));
        assert_eq!(
            ins(&mut r, 1, 0, false, &[5; 3], t + REASSEMBLY_TIMEOUT),
            Outcome::Complete(17, vec![5; 3])
        );
    }

    #[test]
    fn inconsistent_lengths_abandon() {
        let t = Instant::now();
        let mut r = Reassembler::new();
        assert_eq!(ins(&mut r, 1, 16, true, &[1; 16], t), Outcome::Held);
        assert_eq!(
            ins(&mut r, 1, 8, false, &[1; 8], t),
            Outcome::Inconsistent(1)
        );
        let mut r = Reassembler::new();
        assert_eq!(ins(&mut r, 1, 16, false, &[1; 3], t), Outcome::Held);
        assert_eq!(
            ins(&mut r, 1, 24, true, &[1; 8], t),
            Outcome::Inconsistent(1)
        );
        let mut r = Reassembler::new();
        assert_eq!(ins(&mut r, 1, 16, false, &[1; 3], t), Outcome::Held);
        assert_eq!(
            ins(&mut r, 1, 32, false, &[1; 3], t),
            Outcome::Inconsistent(1)
        );
    }

    #[test]
    fn timeout_reports_first_fragment() {
        let t = Instant::now();
        let mut r = Reassembler::new();
        ins(&mut r, 1, 0, true, &[1; 8], t);
        ins(&mut r, 2, 8, true, &[1; 8], t + Duration::from_secs(1));
        assert_eq!(r.next_deadline(), Some(t + REASSEMBLY_TIMEOUT));
        let mut ex = Vec::new();
        r.poll(t + Duration::from_secs(59), &mut ex);
        assert!(ex.is_empty());
        r.poll(t + REASSEMBLY_TIMEOUT, &mut ex);
        assert_eq!(ex.len(), 1);
        assert!(ex[0].timed_out && ex[0].first.is_some());
        r.poll(t + REASSEMBLY_TIMEOUT + Duration::from_secs(1), &mut ex);
        assert_eq!(ex.len(), 2);
        assert!(ex[1].first.is_none());
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn memory_and_count_bounds() {
        let t = Instant::now();
        let mut r = Reassembler::new();
        let mut ex = Vec::new();
        for id in 0..200u32 {
            // A fragment at the far end of a 64 KiB packet costs 64 KiB.
            let f = Fragment {
                key: key(id),
                offset: 65000,
                more: true,
                next_header: 17,
                data: &[0; 8],
                packet: &[],
            };
            r.insert(f, t, &mut ex);
            assert!(r.bytes() <= MAX_REASSEMBLY_BYTES);
            assert!(r.pending.len() <= MAX_REASSEMBLIES);
        }
        assert!(!ex.is_empty());
        assert!(ex.iter().all(|e| e.first.is_none()));
    }
}
