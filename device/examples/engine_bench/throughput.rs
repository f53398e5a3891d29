//! Engine-to-engine TCP throughput on one core, beside the host kernel's TCP over loopback
//! and a memcpy of the same bytes; and the per-stage cost of the data path.
//!
//! qpip: two engines in this process, each with the test kit's guest around it
//! ([`SyncGuest`]: the engine runs only when the guest polls it), joined by the
//! in-process frame queues of `backend::memory` (the engines' own cost), by the same
//! queues carrying TCP super-frames whole (`memory::pair_gso`, as veth with TSO/GRO), by a
//! `cable` (unix datagram sockets: the backend two qpipd use without a TAP), or by two
//! TAPs with offloads on a Linux bridge ([`Bridge`]: root only, else skipped; the kernel's
//! bridging runs on the same CPU, inside the engines' writes). One thread
//! runs everything in turn — engine A's pass, engine B's pass, then both guests post
//! work and take completions — so the figure is what one core does for both ends of the
//! connection, the guests' share included. A message-framed TCP QP sends messages from a
//! registered buffer; the other end keeps receive WRs posted and reposts each one as it
//! completes; every completion's length is checked, and every 64th message's bytes.
//!
//! Kernel: a std TcpStream pair over [::1], the writer and the reader on two threads pinned
//! to the same CPU as the qpip run, writing and reading the same message size and total.
//!
//! memcpy: the same bytes copied message by message from a buffer the size of qpip's send
//! buffer into one the size of its receive buffers (the copy limit: qpip copies each
//! payload byte out of the sender's memory and into the receiver's).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use qpip_abi::cqe::*;
use qpip_device::backend::memory::MemoryLink;
use qpip_device::backend::NetSpec;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::EngineConfig;
use qpip_device::stages::{self, Counts, Stage, STAGES};
use qpip_testkit::{sync_connect, Ram, SyncEngine, SyncGuest, RAM_BASE};

use super::fail;

/// Send WRs (and receive WRs) outstanding at once.
const DEPTH: u32 = 64;
const PORT: u16 = 5001;
const ADDR_A: &str = "fd51:5050::1:1";
const ADDR_B: &str = "fd51:5050::1:2";

/// What one qpip transfer measured.
pub struct QpipRun {
    pub wall: Duration,
    /// Time inside each engine's passes.
    pub engine_a: Duration,
    pub engine_b: Duration,
    pub messages: u64,
    pub bytes: u64,
    /// Stage tables of the sender (A) and the receiver (B), when timing was on.
    pub stages: Option<(Counts, Counts)>,
}

impl QpipRun {
    pub fn gbps(&self) -> f64 {
        gbps(self.bytes, self.wall)
    }
}

pub fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / d.as_secs_f64() / 1e9
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(131) >> 3) as u8
}

/// The wire between the two engines.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// In-process frame queues (`backend::memory`): the engines' own cost.
    Memory,
    /// Unix datagram sockets (`--net cable:PATH`), as between two qpipd.
    Cable,
    /// In-process frame queues that carry TCP super-frames whole (`memory::pair_gso`).
    MemoryGso,
    /// Two TAPs (with offloads) on a Linux bridge in a network namespace of the bench's.
    Taps,
}

/// A network namespace with a bridge and two TAPs on it, removed when dropped.
pub struct Bridge {
    ns: String,
}

pub const TAP_A: &str = "qbench-a";
pub const TAP_B: &str = "qbench-b";

impl Bridge {
    /// None (with the reason printed) unless running as root with `ip`.
    pub fn new() -> Option<Bridge> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("    (two TAPs on a bridge: skipped, needs root for a network namespace)");
            return None;
        }
        let ns = format!("qpip-bench-{}", std::process::id());
        let b = Bridge { ns };
        b.remove_stale();
        let ok = b.ip(&["netns", "add", &b.ns])
            && b.nsip(&["link", "set", "lo", "up"])
            && b.nsip(&["link", "add", "qbench-br", "type", "bridge"])
            && b.nsip(&["link", "set", "qbench-br", "up"])
            && [TAP_A, TAP_B].iter().all(|t| {
                b.nsip(&["tuntap", "add", "dev", t, "mode", "tap"])
                    && b.nsip(&["link", "set", t, "master", "qbench-br"])
                    && b.nsip(&["link", "set", t, "up"])
            });
        if !ok {
            println!(
                "    (two TAPs on a bridge: skipped, could not set up namespace {})",
                b.ns
            );
            return None;
        }
        Some(b)
    }

    /// Removes the namespaces of bench processes that are gone (one that failed exits
    /// without running its destructors).
    fn remove_stale(&self) {
        let Ok(out) = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
        else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let Some(pid) = name.strip_prefix("qpip-bench-") else {
                continue;
            };
            if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = self.ip(&["netns", "del", name]);
            }
        }
    }

    fn ip(&self, args: &[&str]) -> bool {
        std::process::Command::new("ip")
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn nsip(&self, args: &[&str]) -> bool {
        let mut v = vec!["-n", self.ns.as_str()];
        v.extend_from_slice(args);
        self.ip(&v)
    }

    /// Runs `f` on this thread inside the namespace (TAPs opened there belong to it).
    pub fn within<T>(&self, f: impl FnOnce() -> T) -> T {
        let own = std::fs::File::open("/proc/thread-self/ns/net")
            .unwrap_or_else(|e| fail(format!("own namespace: {e}")));
        let theirs = std::fs::File::open(format!("/run/netns/{}", self.ns))
            .unwrap_or_else(|e| fail(format!("namespace {}: {e}", self.ns)));
        use std::os::fd::AsRawFd;
        // SAFETY: setns with namespace fds we hold open.
        if unsafe { libc::setns(theirs.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            fail(format!("setns: {}", std::io::Error::last_os_error()));
        }
        let r = f();
        // SAFETY: as above, back to the thread's own namespace.
        if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            fail(format!("setns back: {}", std::io::Error::last_os_error()));
        }
        r
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.ip(&["netns", "del", &self.ns]);
    }
}

/// Sends `total` bytes in messages of `msg` bytes from engine A to engine B.
pub fn qpip(msg: usize, total: u64, mtu: usize, wire: Wire, timing: bool) -> QpipRun {
    qpip_on(msg, total, mtu, wire, timing, None)
}

/// An engine with `ram_mib` MiB of guest RAM and its guest, on `link` (else the link `spec`
/// names) with `mtu`.
fn guest(
    mac: [u8; 6],
    addr: &str,
    spec: NetSpec,
    link: Option<MemoryLink>,
    mtu: usize,
    ram_mib: u64,
) -> SyncGuest {
    let ram = Ram::new(c"bench-guest", RAM_BASE, ram_mib << 20);
    let network = NetworkConfig {
        mtu,
        ..NetworkConfig::new(spec)
    };
    let config = EngineConfig {
        mac,
        addrs: vec![(addr.parse().expect("address"), 64)],
        network: Some(network.clone()),
        ..EngineConfig::default()
    };
    let mut e = SyncEngine::new(ram, config);
    match link {
        Some(l) => e.engine.attach_link(&network, Box::new(l)),
        None => e
            .engine
            .attach_network(&network)
            .unwrap_or_else(|err| fail(format!("network: {err}"))),
    }
    SyncGuest::new(e)
}

/// As [`qpip`]; `bridge` is where the TAPs are for [`Wire::Taps`].
pub fn qpip_on(
    msg: usize,
    total: u64,
    mtu: usize,
    wire: Wire,
    timing: bool,
    bridge: Option<&Bridge>,
) -> QpipRun {
    let dir = std::env::temp_dir().join(format!("qpip-bench-tp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    let cable = dir.join("cable");
    let slot = (msg as u64).div_ceil(4096) * 4096;
    let buf_len = slot * DEPTH as u64;
    let ram_mib = ((2 * buf_len) >> 20) + 8;
    let (la, lb) = match wire {
        Wire::Memory => {
            let (x, y) = qpip_device::backend::memory::pair().unwrap_or_else(|e| fail(e));
            (Some(x), Some(y))
        }
        Wire::MemoryGso => {
            let (x, y) = qpip_device::backend::memory::pair_gso().unwrap_or_else(|e| fail(e));
            (Some(x), Some(y))
        }
        Wire::Cable | Wire::Taps => (None, None),
    };
    let (spec_a, spec_b) = match wire {
        Wire::Taps => (NetSpec::Tap(TAP_A.into()), NetSpec::Tap(TAP_B.into())),
        _ => (NetSpec::Cable(cable.clone()), NetSpec::Cable(cable.clone())),
    };
    let make = || {
        (
            guest([2, 0, 0, 0, 0, 0xa1], ADDR_A, spec_a, la, mtu, ram_mib),
            guest([2, 0, 0, 0, 0, 0xb2], ADDR_B, spec_b, lb, mtu, ram_mib),
        )
    };
    let (mut a, mut b) = match (wire, bridge) {
        (Wire::Taps, Some(br)) => br.within(make),
        (Wire::Taps, None) => fail("two TAPs need their bridge"),
        _ => make(),
    };
    let mut ea = a.tcp_end(DEPTH, buf_len);
    let mut eb = b.tcp_end(DEPTH, buf_len);
    // The payload: a pattern, so received bytes can be checked.
    let src: Vec<u8> = (0..buf_len).map(pattern).collect();
    a.write(ea.buf.gpa(0), &src);
    // Receives posted before the connection exists become its first window.
    let recvs: Vec<_> = (0..DEPTH as u64)
        .map(|i| (i * slot, slot as u32, i))
        .collect();
    b.post_recvs(&mut eb, &recvs);
    sync_connect(&mut b, &eb, &mut a, &ea, qpip_testkit::ip(ADDR_B), PORT);

    let messages = total / msg as u64;
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    let mut cqes = Vec::with_capacity(2 * DEPTH as usize);
    let mut batch = Vec::with_capacity(DEPTH as usize);
    let (mut in_a, mut in_b) = (Duration::ZERO, Duration::ZERO);
    if timing {
        stages::take(0);
        stages::take(1);
        stages::enable(true);
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(120);
    while received < messages {
        // The sender's guest: completions, then new sends up to the ring's depth.
        a.reap(&mut ea.scq, &mut cqes);
        for c in cqes.drain(..) {
            if c.status != CQE_STATUS_SUCCESS || c.byte_len as usize != msg {
                fail(format!("send completion: {c:?}"));
            }
            sent += 1;
        }
        batch.clear();
        while posted < messages && posted - sent < DEPTH as u64 - 1 && batch.len() < 16 {
            batch.push(((posted % DEPTH as u64) * slot, msg as u32, posted));
            posted += 1;
        }
        if !batch.is_empty() {
            a.post_sends(&mut ea, &batch);
        }
        // The receiver's guest: completions are checked and their WRs posted again.
        b.reap(&mut eb.rcq, &mut cqes);
        batch.clear();
        for c in cqes.drain(..) {
            if c.status != CQE_STATUS_SUCCESS || c.byte_len as usize != msg {
                fail(format!("receive completion: {c:?}"));
            }
            let at = c.wr_id % DEPTH as u64 * slot;
            if received % 64 == 0 {
                let want = &src[((received % DEPTH as u64) * slot) as usize..][..msg];
                if b.slice(eb.buf.gpa(at), msg) != want {
                    fail(format!(
                        "message {received}: the bytes differ from those sent"
                    ));
                }
            }
            received += 1;
            batch.push((at, slot as u32, c.wr_id));
        }
        if !batch.is_empty() {
            b.post_recvs(&mut eb, &batch);
        }
        // The engines.
        stages::select(0);
        let t = Instant::now();
        a.poll();
        let t1 = Instant::now();
        stages::select(1);
        b.poll();
        let t2 = Instant::now();
        in_a += t1 - t;
        in_b += t2 - t1;
        if t2 > deadline {
            fail(format!(
                "qpip transfer stalled: {received} of {messages} messages after 120 s"
            ));
        }
    }
    let wall = t0.elapsed();
    let stage_counts = timing.then(|| {
        stages::enable(false);
        (stages::take(0), stages::take(1))
    });
    drop(a);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    QpipRun {
        wall,
        engine_a: in_a,
        engine_b: in_b,
        messages,
        bytes: messages * msg as u64,
        stages: stage_counts,
    }
}

/// The host kernel's TCP over [::1]: `total` bytes written `msg` at a time; the time from
/// the first write until the reader has the last byte. Both threads are pinned to `cpu`.
pub fn kernel(msg: usize, total: u64, cpu: Option<usize>) -> Duration {
    let listener =
        TcpListener::bind("[::1]:0").unwrap_or_else(|e| fail(format!("bind [::1]: {e}")));
    let port = listener.local_addr().expect("bound").port();
    let reader = std::thread::spawn(move || {
        if let Some(c) = cpu {
            pin(c);
        }
        let (mut s, _) = listener.accept().unwrap_or_else(|e| fail(e));
        let mut buf = vec![0u8; msg];
        let mut got = 0u64;
        while got < total {
            match s.read(&mut buf) {
                Ok(0) => fail("kernel TCP: early EOF"),
                Ok(n) => got += n as u64,
                Err(e) => fail(format!("kernel TCP read: {e}")),
            }
        }
        Instant::now()
    });
    let mut s = TcpStream::connect(("::1", port)).unwrap_or_else(|e| fail(e));
    let data: Vec<u8> = (0..msg as u64).map(pattern).collect();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        s.write_all(&data)
            .unwrap_or_else(|e| fail(format!("kernel TCP write: {e}")));
        sent += msg as u64;
    }
    let done = reader
        .join()
        .unwrap_or_else(|_| fail("kernel TCP reader failed"));
    done - t0
}

/// Copies `total` bytes in `msg`-byte pieces from a source of `DEPTH` message slots into
/// a destination of as many (qpip's buffer sizes), round robin.
pub fn memcpy(msg: usize, total: u64) -> Duration {
    let slot = (msg as u64).div_ceil(4096) * 4096;
    let src: Vec<u8> = (0..slot * DEPTH as u64).map(pattern).collect();
    // Written and copied once before the clock starts, so no page is faulted in and the
    // caches are warm while timing (qpip's buffers are warm too: its guests wrote them
    // before the transfer).
    let mut dst = vec![1u8; src.len()];
    dst.copy_from_slice(&src);
    let n = total / msg as u64;
    let t0 = Instant::now();
    for i in 0..n {
        let at = ((i % DEPTH as u64) * slot) as usize;
        dst[at..at + msg].copy_from_slice(&src[at..at + msg]);
        std::hint::black_box(&mut dst);
    }
    let d = t0.elapsed();
    std::hint::black_box(&dst);
    d
}

/// Pins the calling thread (and threads it starts later) to `cpu`.
pub fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity are given it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            fail(format!(
                "sched_setaffinity(CPU {cpu}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
}

/// The calling thread's allowed CPUs.
pub fn affinity() -> Vec<usize> {
    // SAFETY: as in pin.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Restores an affinity taken with [`affinity`].
pub fn restore(cpus: &[usize]) {
    // SAFETY: as in pin.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One row of a stage table: the stage, ns per message on the sender and on the receiver.
pub struct StageRow {
    pub stage: Stage,
    pub sender_ns: f64,
    pub receiver_ns: f64,
}

/// Stage figures per message of one run, with the engine time no stage accounts for.
pub struct StageTable {
    pub msg: usize,
    pub messages: u64,
    pub rows: Vec<StageRow>,
    /// Engine time per message (all passes), sender and receiver.
    pub engine_ns: (f64, f64),
    pub gbps: f64,
}

pub fn stage_table(msg: usize, r: &QpipRun) -> StageTable {
    let (sa, sb) = r.stages.expect("timed run");
    let per = |ns: u64| ns as f64 / r.messages as f64;
    StageTable {
        msg,
        messages: r.messages,
        rows: STAGES
            .iter()
            .map(|&s| StageRow {
                stage: s,
                sender_ns: per(sa.ns[s as usize]),
                receiver_ns: per(sb.ns[s as usize]),
            })
            .collect(),
        engine_ns: (
            per(r.engine_a.as_nanos() as u64),
            per(r.engine_b.as_nanos() as u64),
        ),
        gbps: r.gbps(),
    }
}
