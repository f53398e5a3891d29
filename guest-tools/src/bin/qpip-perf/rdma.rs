//! `--rdma write|read`: latency and bandwidth of RDMA Writes (or Reads) on iWARP QPs, in
//! the manner of perftest's `ib_write_lat` / `ib_write_bw`, so that the two compare.
//!
//! One connection per test. Each end registers a region the other may write into (and
//! read from) and names it in the MPA private data, the client's together with the test
//! ([`Hello`]), the server's in its reply ([`Region`]); no other control message exists.
//!
//! - **latency**, Write: a ping-pong by RDMA Writes. The client writes SIZE bytes into the
//!   server's region, the last byte a tag that changes every round trip; the server spins
//!   on that byte of its own region and, once the tag is there, writes SIZE bytes with the
//!   same tag back into the client's region, where the client spins for it. Nothing
//!   completes on the side that is written to: memory is the only signal, as with
//!   `ib_write_lat` (which reports half of this round trip). With `--tripwire` neither end
//!   spins: each watches the last byte of its region with a tripwire, armed before the
//!   peer may write it, and sleeps on the tripwire's CQ until the device posts the event
//!   (an interrupt wakes it), the way a qpip application waits without burning a CPU.
//!   Read: one RDMA Read of SIZE bytes at a time, round trip = post to completion.
//! - **bandwidth**: RDMA Writes (Reads) of SIZE bytes back to back into (from) the same
//!   place in the server's region, `--depth` in flight (Reads: at most the ORD), every
//!   one completed; the rate is the bytes over the time from the first post to the last
//!   completion (a Write completes once the peer has every byte).
//!
//! Warm-up round trips (a tenth of `--iters`) come first and are not measured. The server
//! takes no part in a bandwidth test beyond its region: it waits for the client to close.
//! The client's counters (the library's kicks and blocking waits, its device's
//! interrupts, engine sleeps and the rest, `counters.rs`) are taken over the measured
//! messages; the server's are not (it sends no report).

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use qpip::{
    Access, Completion, Context, Cq, EventKind, Framing, MemoryRegion, Mpa, Qp, QpInit, QpKind,
    RemoteAddr, SendWr, Tripwire,
};

use crate::counters::{self, Counters};
use crate::link::{ring, PATTERN};
use crate::proto::{cpu_ns, Row};
use crate::{resolve, Args, Fail, MAX_TCP, T};

/// What `--rdma` moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Write,
    Read,
}

/// How long a server waits for a client to end its test.
const SERVER_WAIT: Duration = Duration::from_secs(3600);
/// The first bytes of both ends' private data.
const MAGIC: &[u8; 4] = b"QPRW";
const VERSION: u8 = 1;
/// RDMA Reads each end keeps outstanding and serves at once.
const IRD_ORD: u8 = 16;

/// A registered region the peer may write into and read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub at: RemoteAddr,
    pub len: u32,
}

/// The client's private data: the test and its own region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub verb: Verb,
    pub lat: bool,
    /// Latency of Writes: both ends sleep on tripwires instead of spinning.
    pub tripwire: bool,
    pub size: u32,
    /// Operations in the test, warm-up included.
    pub count: u64,
    pub region: Region,
}

const HELLO_LEN: usize = 32;
const REPLY_LEN: usize = 24;

impl Hello {
    /// `QPRW`, version, verb (0 Write, 1 Read), test (0 latency, 1 bandwidth), wake (0
    /// spin, 1 tripwire), then big-endian size (4), count (8), address (8), rkey (4).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = (self.verb == Verb::Read) as u8;
        b[6] = (!self.lat) as u8;
        b[7] = self.tripwire as u8;
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..20].copy_from_slice(&self.count.to_be_bytes());
        b[20..28].copy_from_slice(&self.region.at.addr.to_be_bytes());
        b[28..32].copy_from_slice(&self.region.at.rkey.to_be_bytes());
        b
    }

    /// The peer's private data, checked (it came from the network).
    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        let b: &[u8; HELLO_LEN] = b
            .get(..HELLO_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| format!("private data of {} bytes, not {HELLO_LEN}", b.len()))?;
        if &b[..4] != MAGIC || b[4] != VERSION {
            return Err("private data is not a qpip-perf RDMA hello".into());
        }
        let verb = match b[5] {
            0 => Verb::Write,
            1 => Verb::Read,
            v => return Err(format!("unknown verb {v}")),
        };
        let lat = match b[6] {
            0 => true,
            1 => false,
            t => return Err(format!("unknown test {t}")),
        };
        let tripwire = match b[7] {
            0 => false,
            1 => true,
            w => return Err(format!("unknown way of waiting {w}")),
        };
        let size = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        if !(1..=MAX_TCP as u32).contains(&size) {
            return Err(format!("size {size}: from 1 to {MAX_TCP}"));
        }
        let mut count = [0u8; 8];
        count.copy_from_slice(&b[12..20]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[20..28]);
        Ok(Hello {
            verb,
            lat,
            tripwire,
            size,
            count: u64::from_be_bytes(count),
            region: Region {
                at: RemoteAddr {
                    addr: u64::from_be_bytes(addr),
                    rkey: u32::from_be_bytes([b[28], b[29], b[30], b[31]]),
                },
                len: size,
            },
        })
    }
}

impl Region {
    fn of(mr: &MemoryRegion) -> Region {
        Region {
            at: mr.remote(0),
            len: mr.len() as u32,
        }
    }

    /// `QPRW`, version, three zero bytes, then big-endian length (4), address (8), rkey (4).
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[8..12].copy_from_slice(&self.len.to_be_bytes());
        b[12..20].copy_from_slice(&self.at.addr.to_be_bytes());
        b[20..24].copy_from_slice(&self.at.rkey.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Region, String> {
        let b: &[u8; REPLY_LEN] = b
            .get(..REPLY_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| format!("the server's private data has {} bytes", b.len()))?;
        if &b[..4] != MAGIC || b[4] != VERSION {
            return Err("the server's private data is not a qpip-perf RDMA reply".into());
        }
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[12..20]);
        Ok(Region {
            len: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            at: RemoteAddr {
                addr: u64::from_be_bytes(addr),
                rkey: u32::from_be_bytes([b[20], b[21], b[22], b[23]]),
            },
        })
    }
}

/// The tag of round trip `i`: never 0, the byte a fresh region holds.
fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

fn q<T>(r: qpip::Result<T>, what: &str) -> Result<T, Fail> {
    r.map_err(|e| Fail(1, format!("{what}: {e}")))
}

/// One end of a test: its QP and CQ, its region (`land`, which the peer writes into and
/// reads from) and the region its own Writes come from (`src`).
struct End {
    ctx: Context,
    qp: Qp,
    cq: Cq,
    land: MemoryRegion,
    src: MemoryRegion,
    depth: usize,
    /// Work requests posted and not completed.
    in_flight: usize,
    /// With `--tripwire`: how this end waits for the peer's Writes.
    wake: Option<Wake>,
    /// Waits for a completion that blocked (each ends in a wake-up or the time running
    /// out); a tripwire's are its `sleeps`.
    waits: u64,
}

/// A tripwire on the byte an end waits for, and the CQ its events come to.
struct Wake {
    tripwire: Tripwire,
    events: Cq,
    /// Events taken, and waits that slept for one (the byte was not there yet).
    events_seen: u64,
    sleeps: u64,
}

impl End {
    fn new(ctx: &Context, len: usize, depth: usize) -> Result<End, Fail> {
        let cq = q(ctx.create_cq(ring(depth)), "create CQ")?;
        let qp = q(
            ctx.create_qp(&QpInit::new(QpKind::Tcp(Framing::Iwarp), &cq).depth(ring(depth), 2)),
            "create QP",
        )?;
        let land = q(ctx.alloc_with(len, Access::READ_WRITE), "register")?;
        let mut src = q(ctx.alloc(len), "register")?;
        src.fill(PATTERN);
        Ok(End {
            ctx: ctx.clone(),
            qp,
            cq,
            land,
            src,
            depth,
            in_flight: 0,
            wake: None,
            waits: 0,
        })
    }

    /// Watches byte `at` of `land` with a tripwire (armed by [`End::arm`]).
    fn watch(&mut self, at: usize) -> Result<(), Fail> {
        let events = q(self.ctx.create_cq(16), "create the tripwire's CQ")?;
        let tripwire = q(
            self.ctx.create_tripwire(&self.land, at, 1, &events, 0),
            "create a tripwire",
        )?;
        self.wake = Some(Wake {
            tripwire,
            events,
            events_seen: 0,
            sleeps: 0,
        });
        Ok(())
    }

    /// Arms the tripwire, if any: before the peer may write the byte again.
    fn arm(&self) {
        if let Some(w) = &self.wake {
            w.tripwire.arm();
        }
    }

    /// Waits until byte `at` of `land` holds `want`: spinning, or asleep on the
    /// tripwire's CQ (armed before; an event from an earlier arm only makes it look
    /// again).
    fn wait_for(&mut self, at: usize, want: u8) -> Result<(), Fail> {
        if self.wake.is_none() {
            return self.spin_for(at, want);
        }
        let p = self.land[at..].as_ptr();
        loop {
            // SAFETY: as in `spin_for`.
            if unsafe { std::ptr::read_volatile(p) } == want {
                return Ok(());
            }
            let w = self.wake.as_mut().expect("checked");
            let c = match w.events.poll_one() {
                Some(c) => c,
                None => {
                    w.sleeps += 1;
                    q(w.events.wait_one(Some(T)), "wait for a tripwire")?.ok_or_else(|| {
                        Fail(1, format!("the peer's write did not come within {T:?}"))
                    })?
                }
            };
            w.events_seen += 1;
            if !c.is_ok() {
                return Err(Fail(1, format!("tripwire event {:?}", c.status)));
            }
            // Our own Writes' completions (and a failed connection's flushes).
            self.reap()?;
        }
    }

    /// Takes a completion, failing on an error one.
    fn took(&mut self, c: &Completion) -> Result<(), Fail> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if c.is_ok() {
            Ok(())
        } else {
            Err(Fail(
                1,
                format!("{:?} completed {} ({:?})", c.opcode, c.status, c.detail),
            ))
        }
    }

    /// Reaps what completed, without waiting.
    fn reap(&mut self) -> Result<(), Fail> {
        while let Some(c) = self.cq.poll_one() {
            self.took(&c)?;
        }
        Ok(())
    }

    /// Waits for at least one completion.
    fn wait(&mut self) -> Result<(), Fail> {
        let c = match self.cq.poll_one() {
            Some(c) => c,
            None => {
                self.waits += 1;
                q(self.cq.wait_one(Some(T)), "wait for a completion")?
                    .ok_or_else(|| Fail(1, format!("no completion within {T:?}")))?
            }
        };
        self.took(&c)?;
        self.reap()
    }

    /// Posts one Write (of `src`) or Read (into `land`) of `len` bytes at `to`, waiting
    /// for room in the queue first.
    fn post(&mut self, verb: Verb, len: usize, to: RemoteAddr, id: u64) -> Result<(), Fail> {
        while self.in_flight >= self.depth {
            self.wait()?;
        }
        let r = match verb {
            Verb::Write => self
                .qp
                .post_send(&SendWr::rdma_write(id, &[self.src.sge(0, len)], to)),
            Verb::Read => self
                .qp
                .post_send(&SendWr::rdma_read(id, &[self.land.sge(0, len)], to)),
        };
        q(r, "post")?;
        self.in_flight += 1;
        Ok(())
    }

    /// Spins until byte `at` of `land` holds `want` (the peer's Write placed it).
    fn spin_for(&mut self, at: usize, want: u8) -> Result<(), Fail> {
        let p = self.land[at..].as_ptr();
        let deadline = Instant::now() + T;
        let mut n = 0u32;
        // SAFETY: `p` points into `land`, registered memory this end owns for as long as
        // `self` lives; the device writes it behind the compiler's back, hence volatile.
        while unsafe { std::ptr::read_volatile(p) } != want {
            n = n.wrapping_add(1);
            if n.is_multiple_of(4096) {
                // Our own Writes' completions, and a failed connection's flushes.
                self.reap()?;
                if Instant::now() > deadline {
                    return Err(Fail(
                        1,
                        format!("the peer's write did not come within {T:?}"),
                    ));
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The counters now (see [`counters::take`]), this end's blocking waits among them.
    fn counters(&self) -> Counters {
        let sleeps = self.wake.as_ref().map_or(0, |w| w.sleeps);
        counters::take(&self.ctx, self.waits + sleeps)
    }

    /// Waits until the peer closes (or the connection fails), then closes.
    fn linger(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.ctx.wait_event(Some(left)) {
                Ok(Some(ev))
                    if ev.qp == self.qp.id()
                        && matches!(ev.kind, EventKind::PeerClosed | EventKind::QpError) =>
                {
                    break
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        let _ = self.qp.close_wait(T);
    }
}

fn mpa(private: &[u8]) -> Mpa {
    Mpa::new().ird_ord(IRD_ORD, IRD_ORD).private_data(private)
}

fn open() -> Result<Context, Fail> {
    // iWARP needs the device: the software provider has no iWARP QPs.
    Context::open().map_err(|e| Fail(1, e.to_string()))
}

// ---- server ------------------------------------------------------------------------------

pub fn serve(a: &Args) -> Result<(), Fail> {
    let ctx = open()?;
    let local = match &a.bind {
        Some(b) => resolve(b, a.port)?,
        None => SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port, 0, 0),
    };
    let listener = q(ctx.listen(local, 8), &format!("listen on {local}"))?;
    println!("qpip-perf: serving RDMA on iWARP QPs at {local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        let mut end = End::new(&ctx, MAX_TCP, a.depth)?;
        let reply = Region::of(&end.land).encode();
        let peer = match listener.accept_mpa_wait(&end.qp, &mpa(&reply), SERVER_WAIT) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("qpip-perf: accept: {e}");
                continue;
            }
        };
        if let Err(Fail(_, e)) = serve_one(&mut end) {
            eprintln!("qpip-perf: RDMA client {peer}: {e}");
        }
        end.linger(SERVER_WAIT);
    }
}

fn serve_one(end: &mut End) -> Result<(), Fail> {
    let info = q(end.qp.conn_info(), "connection")?;
    let h = Hello::decode(&info.private_data).map_err(|e| Fail(1, e))?;
    if h.lat && h.verb == Verb::Write {
        let last = h.size as usize - 1;
        if h.tripwire {
            end.watch(last)?;
            end.arm();
        }
        for i in 0..h.count {
            end.wait_for(last, tag(i))?;
            // The client's next Write comes after this one's answer.
            end.arm();
            end.src[last] = tag(i);
            end.post(Verb::Write, h.size as usize, h.region.at, i)?;
            end.reap()?;
        }
        while end.in_flight > 0 {
            end.wait()?;
        }
    }
    Ok(())
}

// ---- client ------------------------------------------------------------------------------

pub fn client(a: &Args, verb: Verb) -> Result<Vec<Row>, Fail> {
    let ctx = open()?;
    let server = resolve(a.addr.as_deref().unwrap_or_default(), a.port)?;
    if !a.json {
        println!(
            "qpip-perf: RDMA {verb:?}s on iWARP QPs (device provider, depth {}) to {server}",
            a.depth
        );
    }
    let mut rows = Vec::new();
    if a.latency {
        for &size in a.sizes.as_deref().unwrap_or(&[64]) {
            rows.push(test(&ctx, a, verb, server, true, size)?);
        }
    }
    if a.bandwidth {
        for &size in a.sizes.as_deref().unwrap_or(&[65536]) {
            rows.push(test(&ctx, a, verb, server, false, size)?);
        }
    }
    Ok(rows)
}

fn test(
    ctx: &Context,
    a: &Args,
    verb: Verb,
    server: SocketAddrV6,
    lat: bool,
    size: usize,
) -> Result<Row, Fail> {
    let warm = if lat {
        (a.iters / 10).clamp(1, 1000)
    } else {
        0
    };
    let count = if lat {
        a.iters + warm
    } else {
        (a.bytes / size as u64).max(1)
    };
    // Reads in flight are bounded by what both ends agreed (ORD).
    let depth = if lat { 2 } else { a.depth };
    let mut end = End::new(ctx, size, depth)?;
    let tripwire = a.tripwire && lat && verb == Verb::Write;
    if tripwire {
        end.watch(size - 1)?;
    }
    let hello = Hello {
        verb,
        lat,
        tripwire,
        size: size as u32,
        count,
        region: Region::of(&end.land),
    };
    q(
        end.qp.connect_mpa_wait(server, &mpa(&hello.encode()), T),
        &format!("connect to {server}"),
    )?;
    let info = q(end.qp.conn_info(), "connection")?;
    let theirs = Region::decode(&info.private_data).map_err(|e| Fail(1, e))?;
    if (theirs.len as usize) < size {
        return Err(Fail(
            1,
            format!(
                "the server's region has {} bytes, fewer than {size}",
                theirs.len
            ),
        ));
    }
    if verb == Verb::Read {
        end.depth = end.depth.min(info.ord.max(1) as usize);
    }
    let transport = match (verb, tripwire) {
        (Verb::Write, false) => "rdma-write",
        (Verb::Write, true) => "rdma-write-tripwire",
        (Verb::Read, _) => "rdma-read",
    };
    let mut row = Row {
        transport,
        test: if lat { "latency" } else { "bandwidth" },
        size,
        ..Row::default()
    };
    let cpu0 = cpu_ns();
    let mut start = Instant::now();
    let mut before = end.counters();
    if lat {
        let last = size - 1;
        for i in 0..count {
            if i == warm {
                start = Instant::now();
                before = end.counters();
            }
            let t0 = Instant::now();
            match verb {
                Verb::Write => {
                    end.src[last] = tag(i);
                    // The answer can only come after this Write.
                    end.arm();
                    end.post(verb, size, theirs.at, i)?;
                    end.wait_for(last, tag(i))?;
                    end.reap()?;
                }
                Verb::Read => {
                    end.post(verb, size, theirs.at, i)?;
                    while end.in_flight > 0 {
                        end.wait()?;
                    }
                }
            }
            if i >= warm {
                row.rtt_ns.push(t0.elapsed().as_nanos() as u64);
            }
        }
        row.msgs = a.iters;
        row.bytes_sent = a.iters * size as u64;
    } else {
        for i in 0..count {
            end.post(verb, size, theirs.at, i)?;
            end.reap()?;
        }
        row.msgs = count;
        row.bytes_sent = count * size as u64;
        row.bytes_received = row.bytes_sent;
        row.msgs_received = count;
    }
    while end.in_flight > 0 {
        end.wait()?;
    }
    row.elapsed = start.elapsed();
    row.client_cpu_ns = cpu_ns() - cpu0;
    row.client_counters = Some(end.counters().since(&before));
    row.rtt_ns.sort_unstable();
    if let Some(w) = &end.wake {
        if !a.json {
            println!(
                "qpip-perf: {} tripwire events, {} sleeps over {} round trips",
                w.events_seen, w.sleeps, count
            );
        }
    }
    let _ = end.qp.close_wait(T);
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_reply_round_trip_and_bad_ones_are_errors() {
        let h = Hello {
            verb: Verb::Write,
            lat: false,
            tripwire: true,
            size: 65536,
            count: 1024,
            region: Region {
                at: RemoteAddr {
                    addr: 0x1234_5678_9abc,
                    rkey: 0xdead_beef,
                },
                len: 65536,
            },
        };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let r = h.region;
        assert_eq!(Region::decode(&r.encode()), Ok(r));
        // Short, foreign, or out of range: errors, never a panic.
        for n in 0..HELLO_LEN {
            assert!(Hello::decode(&h.encode()[..n]).is_err());
        }
        for n in 0..REPLY_LEN {
            assert!(Region::decode(&r.encode()[..n]).is_err());
        }
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).is_err());
        let mut bad = h.encode();
        bad[5] = 7;
        assert!(Hello::decode(&bad).is_err());
        let mut bad = h.encode();
        bad[7] = 2;
        assert!(Hello::decode(&bad).is_err());
        let mut bad = h.encode();
        bad[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert!(Hello::decode(&bad).is_err());
        bad[8..12].copy_from_slice(&(MAX_TCP as u32 + 1).to_be_bytes());
        assert!(Hello::decode(&bad).is_err());
        // Tags never repeat from one round trip to the next, and are never 0.
        assert!((0..1000).all(|i| tag(i) != 0 && tag(i) != tag(i + 1)));
    }
}
