//! The neighbour cache and neighbour unreachability detection (RFC 4861 §7.2, §7.3).
//!
//! One entry per on-link address, in one of the RFC's states: INCOMPLETE (a multicast
//! solicitation is out; packets wait in a bounded queue), REACHABLE (confirmed within
//! ReachableTime), STALE (address known, not recently confirmed), DELAY (used while STALE:
//! waiting for an upper-layer confirmation before probing), PROBE (unicast solicitations),
//! plus STATIC entries (`--neighbor`, `ADMIN_OP_ADD_NEIGH`) that nothing on the link
//! changes and nothing ages out; deleting one gives the address back to resolution. Timers
//! sit in a heap with lazy invalidation; REACHABLE expiry needs no timer (it is checked
//! when the entry is used).
//!
//! The cache does not send anything itself: it tells the stack what to do through
//! [`Action`]s, so it can be tested step by step.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use super::wire::Mac;

/// RFC 4861 §10 protocol constants. MAX_MULTICAST_SOLICIT is the default of a setting
/// (`qpipd --ndp-solicit`, [`NeighborCache::set_max_multicast_solicit`]), as in Linux
/// (`mcast_solicit`): a peer that is slow to answer, like a virtual machine starved of CPU,
/// needs more patience than the RFC's three seconds.
pub const MAX_MULTICAST_SOLICIT: u8 = 3;
pub const MAX_UNICAST_SOLICIT: u8 = 3;
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);
pub const REACHABLE_TIME: Duration = Duration::from_secs(30);
pub const DELAY_FIRST_PROBE_TIME: Duration = Duration::from_secs(5);

/// Bounds: entries, packets waiting per neighbour (a 64 KiB datagram is up to 52
/// fragments at the minimum MTU, so one whole datagram fits), and bytes waiting in all.
pub const MAX_ENTRIES: usize = 1024;
/// Entries evicted together when the table is full (see `NeighborCache::evict`).
pub const EVICT_BATCH: usize = MAX_ENTRIES / 8;
pub const MAX_QUEUE_PER_NEIGHBOR: usize = 128;
pub const MAX_QUEUED_BYTES: usize = 4 << 20;
/// Most static entries a function holds (`ADMIN_OP_ADD_NEIGH`).
pub const MAX_STATIC: usize = qpip_abi::admin::MAX_NEIGHBORS as usize;

/// Why the stack refused a change to its static neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticError {
    /// [`MAX_STATIC`] static entries are there already.
    Full,
    /// The address has no static entry.
    NotFound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Incomplete,
    Reachable,
    Stale,
    Delay,
    Probe,
    Static,
}

struct Entry {
    mac: Option<Mac>,
    state: State,
    /// Incomplete/Delay/Probe: when the timer fires. Reachable: when it turns stale.
    deadline: Option<Instant>,
    probes: u8,
    queue: VecDeque<Vec<u8>>,
    last_used: Instant,
}

/// What the cache asks of the stack.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this frame (Ethernet header still to be written) to this MAC.
    Send(Vec<u8>, Mac),
    /// Send a multicast neighbour solicitation for the address.
    SolicitMulticast(Ipv6Addr),
    /// Send a unicast neighbour solicitation (a reachability probe).
    SolicitUnicast(Ipv6Addr, Mac),
    /// Resolution failed; this many waiting packets are dropped.
    Failed(Ipv6Addr, usize),
    /// A waiting packet was pushed out by a newer one (the queue was full).
    Overflow,
}

pub struct NeighborCache {
    entries: HashMap<Ipv6Addr, Entry>,
    timers: BinaryHeap<Reverse<(Instant, Ipv6Addr)>>,
    queued_bytes: usize,
    rng: fastrand::Rng,
    /// Multicast solicitations for an address before resolution fails.
    max_multicast_solicit: u8,
}

impl NeighborCache {
    pub fn new(seed: u64) -> NeighborCache {
        NeighborCache {
            entries: HashMap::new(),
            timers: BinaryHeap::new(),
            queued_bytes: 0,
            rng: fastrand::Rng::with_seed(seed),
            max_multicast_solicit: MAX_MULTICAST_SOLICIT,
        }
    }

    /// Multicast solicitations for an address before its resolution fails (at least 1;
    /// RFC 4861's MAX_MULTICAST_SOLICIT by default).
    pub fn set_max_multicast_solicit(&mut self, n: u8) {
        self.max_multicast_solicit = n.max(1);
    }

    /// Makes `ip` a static entry at `mac`, in place of whatever entry it had: packets that
    /// were waiting for its resolution go to `mac` at once.
    pub fn add_static(&mut self, ip: Ipv6Addr, mac: Mac, now: Instant, out: &mut Vec<Action>) {
        let queue = match self.entries.remove(&ip) {
            Some(old) => old.queue,
            None => VecDeque::new(),
        };
        self.entries.insert(
            ip,
            Entry {
                mac: Some(mac),
                state: State::Static,
                deadline: None,
                probes: 0,
                queue,
                last_used: now,
            },
        );
        self.flush(ip, out);
    }

    /// Removes the static entry of `ip`, if it has one (a learned entry stays): the next
    /// packet to it is resolved as any other. Returns whether there was one.
    pub fn remove_static(&mut self, ip: &Ipv6Addr) -> bool {
        let is_static = self
            .entries
            .get(ip)
            .is_some_and(|e| e.state == State::Static);
        if is_static {
            self.entries.remove(ip);
        }
        is_static
    }

    /// The state and link-layer address of an entry.
    pub fn get(&self, ip: &Ipv6Addr) -> Option<(State, Option<Mac>)> {
        self.entries.get(ip).map(|e| (e.state, e.mac))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Packets waiting for resolution, over all neighbours.
    pub fn queued(&self) -> usize {
        self.entries.values().map(|e| e.queue.len()).sum()
    }

    /// ReachableTime, uniformly in 0.5..1.5 of the base (RFC 4861 §6.3.2).
    fn reachable_time(&mut self) -> Duration {
        REACHABLE_TIME.mul_f64(0.5 + self.rng.f64())
    }

    fn arm(&mut self, ip: Ipv6Addr, at: Instant) {
        if let Some(e) = self.entries.get_mut(&ip) {
            e.deadline = Some(at);
            self.timers.push(Reverse((at, ip)));
        }
    }

    /// Hands `frame` (an outgoing packet for next hop `ip`) on: sent at once if the link
    /// address is known, else queued while a solicitation goes out.
    pub fn resolve(&mut self, ip: Ipv6Addr, frame: Vec<u8>, now: Instant, out: &mut Vec<Action>) {
        if !self.entries.contains_key(&ip) {
            if self.entries.len() >= MAX_ENTRIES {
                self.evict(out);
            }
            self.entries.insert(
                ip,
                Entry {
                    mac: None,
                    state: State::Incomplete,
                    deadline: None,
                    probes: 1,
                    queue: VecDeque::new(),
                    last_used: now,
                },
            );
            self.arm(ip, now + RETRANS_TIMER);
            out.push(Action::SolicitMulticast(ip));
        }
        let e = self.entries.get_mut(&ip).expect("present");
        e.last_used = now;
        if e.state == State::Reachable && e.deadline.is_some_and(|d| now >= d) {
            e.state = State::Stale;
            e.deadline = None;
        }
        match e.state {
            State::Incomplete => self.enqueue(ip, frame, out),
            State::Stale => {
                // First use of a stale entry: send, and give upper layers DELAY_FIRST_PROBE
                // to confirm reachability before probing (RFC 4861 §7.3.3).
                let mac = e.mac.expect("stale entries have an address");
                e.state = State::Delay;
                self.arm(ip, now + DELAY_FIRST_PROBE_TIME);
                out.push(Action::Send(frame, mac));
            }
            State::Reachable | State::Delay | State::Probe | State::Static => {
                out.push(Action::Send(frame, e.mac.expect("resolved")));
            }
        }
    }

    fn enqueue(&mut self, ip: Ipv6Addr, frame: Vec<u8>, out: &mut Vec<Action>) {
        // Over either bound the oldest waiting packet makes room (RFC 4861 §7.2.2).
        let e = self.entries.get_mut(&ip).expect("present");
        self.queued_bytes += frame.len();
        e.queue.push_back(frame);
        while e.queue.len() > MAX_QUEUE_PER_NEIGHBOR
            || (self.queued_bytes > MAX_QUEUED_BYTES && e.queue.len() > 1)
        {
            let old = e.queue.pop_front().expect("non-empty");
            self.queued_bytes -= old.len();
            out.push(Action::Overflow);
        }
        if self.queued_bytes > MAX_QUEUED_BYTES {
            // Other neighbours' queues hold the bytes: drop the newest packet instead.
            let f = e.queue.pop_back().expect("non-empty");
            self.queued_bytes -= f.len();
            out.push(Action::Overflow);
        }
    }

    /// Makes room for an entry: the least recently used one that is not static, preferring
    /// entries not in use (STALE) over those being resolved or probed.
    /// The table is full: the [`EVICT_BATCH`] entries least worth keeping go at once —
    /// stale ones first, then the least recently used; static ones never. One scan of the
    /// table pays for that many new entries: a flood of new addresses (SYN-ACKs of cookies
    /// to spoofed sources, each needing resolution) would otherwise scan the whole table
    /// for every one of them.
    fn evict(&mut self, out: &mut Vec<Action>) {
        let mut worth: Vec<((bool, Instant), Ipv6Addr)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state != State::Static)
            .map(|(ip, e)| ((e.state != State::Stale, e.last_used), *ip))
            .collect();
        let k = EVICT_BATCH.min(worth.len());
        if k == 0 {
            return;
        }
        worth.select_nth_unstable(k - 1);
        for (_, ip) in worth.drain(..k) {
            self.remove(ip, out);
        }
    }

    fn remove(&mut self, ip: Ipv6Addr, out: &mut Vec<Action>) {
        if let Some(e) = self.entries.remove(&ip) {
            let bytes: usize = e.queue.iter().map(Vec::len).sum();
            self.queued_bytes -= bytes;
            if !e.queue.is_empty() {
                out.push(Action::Failed(ip, e.queue.len()));
            }
        }
    }

    /// Moves an entry that just learned its address out of INCOMPLETE: its waiting packets go.
    fn flush(&mut self, ip: Ipv6Addr, out: &mut Vec<Action>) {
        let e = self.entries.get_mut(&ip).expect("present");
        let mac = e.mac.expect("resolved");
        for f in e.queue.drain(..) {
            self.queued_bytes -= f.len();
            out.push(Action::Send(f, mac));
        }
    }

    /// A solicitation (or another message with a source link-layer address option) from
    /// `ip` (RFC 4861 §7.2.3).
    pub fn on_solicitation(&mut self, ip: Ipv6Addr, mac: Mac, now: Instant, out: &mut Vec<Action>) {
        match self.entries.get_mut(&ip) {
            None => {
                if self.entries.len() >= MAX_ENTRIES {
                    self.evict(out);
                }
                self.entries.insert(
                    ip,
                    Entry {
                        mac: Some(mac),
                        state: State::Stale,
                        deadline: None,
                        probes: 0,
                        queue: VecDeque::new(),
                        last_used: now,
                    },
                );
            }
            Some(e) if e.state == State::Static => {}
            Some(e) => {
                let was_incomplete = e.state == State::Incomplete;
                if e.mac != Some(mac) {
                    e.mac = Some(mac);
                    e.state = State::Stale;
                    e.deadline = None;
                }
                if was_incomplete {
                    e.state = State::Stale;
                    e.deadline = None;
                    self.flush(ip, out);
                }
            }
        }
    }

    /// A neighbour advertisement for `ip` (RFC 4861 §7.2.5).
    pub fn on_advertisement(
        &mut self,
        ip: Ipv6Addr,
        tll: Option<Mac>,
        solicited: bool,
        override_: bool,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let reachable = self.reachable_time();
        let Some(e) = self.entries.get_mut(&ip) else {
            return; // unsolicited and unknown: nothing to update
        };
        match e.state {
            State::Static => {}
            State::Incomplete => {
                let Some(mac) = tll else {
                    return;
                };
                e.mac = Some(mac);
                if solicited {
                    e.state = State::Reachable;
                    e.deadline = Some(now + reachable);
                } else {
                    e.state = State::Stale;
                    e.deadline = None;
                }
                self.flush(ip, out);
            }
            _ => {
                let differs = tll.is_some_and(|m| Some(m) != e.mac);
                if !override_ && differs {
                    // Keep the address we know, but stop trusting it.
                    if e.state == State::Reachable {
                        e.state = State::Stale;
                        e.deadline = None;
                    }
                    return;
                }
                if let Some(m) = tll {
                    e.mac = Some(m);
                }
                if solicited {
                    e.state = State::Reachable;
                    e.deadline = Some(now + reachable);
                    e.probes = 0;
                } else if differs {
                    e.state = State::Stale;
                    e.deadline = None;
                }
            }
        }
    }

    /// Reachability confirmed by an upper layer (e.g. TCP saw new data acknowledged).
    pub fn confirm(&mut self, ip: &Ipv6Addr, now: Instant) {
        let reachable = self.reachable_time();
        if let Some(e) = self.entries.get_mut(ip) {
            if e.mac.is_some() && e.state != State::Static {
                e.state = State::Reachable;
                e.deadline = Some(now + reachable);
                e.probes = 0;
            }
        }
    }

    /// Runs the timers that are due.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Action>) {
        while let Some(&Reverse((at, ip))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.entries.get_mut(&ip) else {
                continue;
            };
            if e.deadline != Some(at) {
                continue; // re-armed or disarmed since
            }
            match e.state {
                State::Incomplete if e.probes < self.max_multicast_solicit => {
                    e.probes += 1;
                    self.arm(ip, now + RETRANS_TIMER);
                    out.push(Action::SolicitMulticast(ip));
                }
                State::Delay => {
                    e.state = State::Probe;
                    e.probes = 1;
                    let mac = e.mac.expect("resolved");
                    self.arm(ip, now + RETRANS_TIMER);
                    out.push(Action::SolicitUnicast(ip, mac));
                }
                State::Probe if e.probes < MAX_UNICAST_SOLICIT => {
                    e.probes += 1;
                    let mac = e.mac.expect("resolved");
                    self.arm(ip, now + RETRANS_TIMER);
                    out.push(Action::SolicitUnicast(ip, mac));
                }
                State::Incomplete | State::Probe => self.remove(ip, out),
                State::Reachable | State::Stale | State::Static => {}
            }
        }
    }

    /// When [`NeighborCache::poll`] next has something to do.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        // Drop stale heap entries so the answer is a timer that will really fire.
        while let Some(&Reverse((at, ip))) = self.timers.peek() {
            let live = self.entries.get(&ip).is_some_and(|e| {
                e.deadline == Some(at)
                    && matches!(e.state, State::Incomplete | State::Delay | State::Probe)
            });
            if live {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 0, 1);
    const M1: Mac = [2, 0, 0, 0, 0, 1];
    const M2: Mac = [2, 0, 0, 0, 0, 2];

    fn run(
        c: &mut NeighborCache,
        f: impl FnOnce(&mut NeighborCache, &mut Vec<Action>),
    ) -> Vec<Action> {
        let mut out = Vec::new();
        f(c, &mut out);
        out
    }

    #[test]
    fn resolution_queues_then_flushes() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        let out = run(&mut c, |c, o| c.resolve(A, vec![1], t0, o));
        assert_eq!(out, vec![Action::SolicitMulticast(A)]);
        let out = run(&mut c, |c, o| c.resolve(A, vec![2], t0, o));
        assert!(out.is_empty());
        assert_eq!(c.queued(), 2);
        assert_eq!(c.next_deadline(), Some(t0 + RETRANS_TIMER));
        let out = run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M1), true, true, t0, o)
        });
        assert_eq!(
            out,
            vec![Action::Send(vec![1], M1), Action::Send(vec![2], M1)]
        );
        assert_eq!(c.get(&A), Some((State::Reachable, Some(M1))));
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn resolution_gives_up_after_three_solicitations() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        run(&mut c, |c, o| c.resolve(A, vec![1], t0, o));
        let mut t = t0;
        for _ in 0..2 {
            t += RETRANS_TIMER;
            assert_eq!(
                run(&mut c, |c, o| c.poll(t, o)),
                vec![Action::SolicitMulticast(A)]
            );
        }
        t += RETRANS_TIMER;
        assert_eq!(run(&mut c, |c, o| c.poll(t, o)), vec![Action::Failed(A, 1)]);
        assert!(c.get(&A).is_none());
        assert_eq!(c.queued_bytes, 0);
    }

    #[test]
    fn resolution_solicits_as_often_as_set() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        c.set_max_multicast_solicit(30);
        run(&mut c, |c, o| c.resolve(A, vec![1], t0, o));
        let mut t = t0;
        for _ in 0..29 {
            t += RETRANS_TIMER;
            assert_eq!(
                run(&mut c, |c, o| c.poll(t, o)),
                vec![Action::SolicitMulticast(A)]
            );
        }
        // Answered late, after 30 s: the waiting packet goes out.
        t += RETRANS_TIMER / 2;
        assert_eq!(
            run(&mut c, |c, o| c.on_advertisement(
                A,
                Some(M1),
                true,
                false,
                t,
                o
            )),
            vec![Action::Send(vec![1], M1)]
        );
        assert_eq!(c.get(&A), Some((State::Reachable, Some(M1))));
        // Unanswered, it still gives up, after the last solicitation's timer.
        let mut c = NeighborCache::new(1);
        c.set_max_multicast_solicit(5);
        run(&mut c, |c, o| c.resolve(A, vec![1], t0, o));
        let mut sent = 1;
        let mut t = t0;
        loop {
            t += RETRANS_TIMER;
            match run(&mut c, |c, o| c.poll(t, o)).as_slice() {
                [Action::SolicitMulticast(a)] if *a == A => sent += 1,
                [Action::Failed(a, 1)] if *a == A => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(sent, 5);
    }

    #[test]
    fn nud_stale_delay_probe_then_gone() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        run(&mut c, |c, o| c.on_solicitation(A, M1, t0, o));
        assert_eq!(c.get(&A), Some((State::Stale, Some(M1))));
        let out = run(&mut c, |c, o| c.resolve(A, vec![9], t0, o));
        assert_eq!(out, vec![Action::Send(vec![9], M1)]);
        assert_eq!(c.get(&A).unwrap().0, State::Delay);
        let t = t0 + DELAY_FIRST_PROBE_TIME;
        assert_eq!(
            run(&mut c, |c, o| c.poll(t, o)),
            vec![Action::SolicitUnicast(A, M1)]
        );
        assert_eq!(c.get(&A).unwrap().0, State::Probe);
        // While probing, packets still go to the known address.
        assert_eq!(
            run(&mut c, |c, o| c.resolve(A, vec![3], t, o)),
            vec![Action::Send(vec![3], M1)]
        );
        let t2 = t + RETRANS_TIMER;
        assert_eq!(
            run(&mut c, |c, o| c.poll(t2, o)),
            vec![Action::SolicitUnicast(A, M1)]
        );
        let t3 = t2 + RETRANS_TIMER;
        assert_eq!(
            run(&mut c, |c, o| c.poll(t3, o)),
            vec![Action::SolicitUnicast(A, M1)]
        );
        let t4 = t3 + RETRANS_TIMER;
        run(&mut c, |c, o| c.poll(t4, o));
        assert!(c.get(&A).is_none());
    }

    #[test]
    fn probe_answered_makes_reachable_which_expires_to_stale() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        run(&mut c, |c, o| c.on_solicitation(A, M1, t0, o));
        run(&mut c, |c, o| c.resolve(A, vec![], t0, o));
        let t = t0 + DELAY_FIRST_PROBE_TIME;
        run(&mut c, |c, o| c.poll(t, o));
        run(&mut c, |c, o| {
            c.on_advertisement(A, None, true, false, t, o)
        });
        assert_eq!(c.get(&A).unwrap().0, State::Reachable);
        // ReachableTime is at most 45 s; after that a use finds it stale and delays.
        let later = t + Duration::from_secs(46);
        run(&mut c, |c, o| c.resolve(A, vec![], later, o));
        assert_eq!(c.get(&A).unwrap().0, State::Delay);
        c.confirm(&A, later);
        assert_eq!(c.get(&A).unwrap().0, State::Reachable);
        // The DELAY timer still in the heap no longer fires.
        assert!(run(&mut c, |c, o| c.poll(later + DELAY_FIRST_PROBE_TIME, o)).is_empty());
    }

    #[test]
    fn advertisement_override_rules() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        run(&mut c, |c, o| c.resolve(A, vec![], t0, o));
        run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M1), true, false, t0, o)
        });
        // Without override a different address only makes the entry stale.
        run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M2), true, false, t0, o)
        });
        assert_eq!(c.get(&A), Some((State::Stale, Some(M1))));
        // With override it is taken.
        run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M2), false, true, t0, o)
        });
        assert_eq!(c.get(&A), Some((State::Stale, Some(M2))));
        run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M2), true, true, t0, o)
        });
        assert_eq!(c.get(&A), Some((State::Reachable, Some(M2))));
        // An advertisement for an unknown address creates nothing.
        let b: Ipv6Addr = "fd51:5050::9".parse().unwrap();
        run(&mut c, |c, o| {
            c.on_advertisement(b, Some(M2), false, true, t0, o)
        });
        assert!(c.get(&b).is_none());
        // An incomplete entry ignores an advertisement without an address.
        run(&mut c, |c, o| c.resolve(b, vec![], t0, o));
        run(&mut c, |c, o| {
            c.on_advertisement(b, None, true, true, t0, o)
        });
        assert_eq!(c.get(&b).unwrap().0, State::Incomplete);
    }

    #[test]
    fn static_entries_never_change() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        run(&mut c, |c, o| c.add_static(A, M1, t0, o));
        run(&mut c, |c, o| c.on_solicitation(A, M2, t0, o));
        run(&mut c, |c, o| {
            c.on_advertisement(A, Some(M2), true, true, t0, o)
        });
        assert_eq!(c.get(&A), Some((State::Static, Some(M1))));
        let out = run(&mut c, |c, o| {
            c.resolve(A, vec![7], t0 + Duration::from_secs(3600), o)
        });
        assert_eq!(out, vec![Action::Send(vec![7], M1)]);
    }

    /// A static entry takes over from resolution under way (the waiting packets go to its
    /// address), and once removed the address is resolved again from the start.
    #[test]
    fn static_entries_replace_resolution_and_give_it_back() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        let out = run(&mut c, |c, o| c.resolve(A, vec![1], t0, o));
        assert_eq!(out, vec![Action::SolicitMulticast(A)]);
        let out = run(&mut c, |c, o| c.add_static(A, M1, t0, o));
        assert_eq!(out, vec![Action::Send(vec![1], M1)]);
        assert_eq!(c.queued(), 0);
        assert_eq!(c.queued_bytes, 0);
        // Its own timer, armed while it was INCOMPLETE, no longer fires.
        let out = run(&mut c, |c, o| c.poll(t0 + Duration::from_secs(10), o));
        assert_eq!(out, vec![]);
        assert_eq!(c.get(&A), Some((State::Static, Some(M1))));
        let out = run(&mut c, |c, o| c.add_static(A, M2, t0, o));
        assert_eq!(out, vec![]);
        assert_eq!(c.get(&A), Some((State::Static, Some(M2))));

        assert!(c.remove_static(&A));
        assert!(!c.remove_static(&A));
        assert_eq!(c.get(&A), None);
        let out = run(&mut c, |c, o| c.resolve(A, vec![2], t0, o));
        assert_eq!(out, vec![Action::SolicitMulticast(A)]);
        // A learned entry is not removed as a static one.
        assert!(!c.remove_static(&A));
        assert_eq!(c.get(&A).map(|e| e.0), Some(State::Incomplete));
    }

    #[test]
    fn bounded_queue_and_table() {
        let t0 = Instant::now();
        let mut c = NeighborCache::new(1);
        let mut overflow = 0;
        for i in 0..MAX_QUEUE_PER_NEIGHBOR + 10 {
            let out = run(&mut c, |c, o| c.resolve(A, vec![i as u8; 100], t0, o));
            overflow += out.iter().filter(|a| **a == Action::Overflow).count();
        }
        assert_eq!(overflow, 10);
        assert_eq!(c.queued(), MAX_QUEUE_PER_NEIGHBOR);
        for i in 0..MAX_ENTRIES as u16 + 5 {
            let ip = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 1, i);
            run(&mut c, |c, o| c.on_solicitation(ip, M1, t0, o));
        }
        // Full, a batch went; the table never holds more than its bound.
        assert!(
            c.len() <= MAX_ENTRIES && c.len() > MAX_ENTRIES - EVICT_BATCH,
            "{}",
            c.len()
        );
        // Byte bound: big packets to many neighbours stop at MAX_QUEUED_BYTES.
        let mut c = NeighborCache::new(1);
        for i in 0..200u16 {
            let ip = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 2, i);
            run(&mut c, |c, o| c.resolve(ip, vec![0; 65536], t0, o));
        }
        assert!(c.queued_bytes <= MAX_QUEUED_BYTES);
    }
}
