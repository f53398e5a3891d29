//! The lines of the comparison: which figures the table has, each side's in every
//! round, and the QP counters and host CPU that go under the table.

use super::report::{Measurements, Round};
use super::spread::{spread, Better, Spread};
use super::verbs::{Goal, Syscalls};
use crate::demo::human;

/// One line of the comparison: each side's figure in every round (None: not measured).
#[derive(Debug, Clone)]
pub struct Line {
    pub what: String,
    pub unit: &'static str,
    /// QPs (IPv6).
    pub qp: Vec<Option<f64>>,
    /// Kernel sockets over virtio-net.
    pub sockets: Vec<Option<f64>>,
    /// Kernel sockets over the qpip netdev (empty or all None in a run without them: older
    /// results, the demo, a guest driver without the netdev).
    pub netdev: Vec<Option<f64>>,
    /// QPs over IPv4 (the same: empty or all None without them).
    pub qp4: Vec<Option<f64>>,
    pub better: Better,
    /// The QP side's counters per message of the measurement this line is the first
    /// figure of (the bench's ping-pong and bandwidth lines).
    pub counted: Option<Counted>,
    /// The kernel sockets' counters per message of the same measurement, over virtio-net
    /// and the qpip netdev (the ping-pong and bandwidth lines of a bench whose
    /// `qpip-perf --sockets` reports them).
    pub sockets_counted: Option<SocketsCounted>,
    /// The host's CPU per message over the same windows (guest-wide CPU lines).
    pub host_cpu: Option<HostCpu>,
    /// What the line aims at, and why it misses (perftest on qpip0's lines).
    pub goal: Option<Goal>,
    /// The perftest client's system calls per operation on both sides (perftest on
    /// qpip0's lines against siw and rxe).
    pub syscalls: Option<Syscalls>,
}

/// The host's CPU per message of one measurement over its CPU windows, in every round, µs.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCpu {
    /// The measurement (`UDP ping-pong`).
    pub what: String,
    /// QEMU of guests a and b: over QPs, over sockets.
    pub qemu: [Vec<Option<f64>>; 2],
    /// qpipd of guests a and b: over QPs, over sockets (there: what an idle qpipd burns).
    pub qpipd: [Vec<Option<f64>>; 2],
    /// Both guests' busy time over the same windows (whole runs): over QPs, over sockets.
    pub guests: [Vec<Option<f64>>; 2],
}

impl HostCpu {
    /// QEMU + qpipd of each round, over QPs (`side` 0) or sockets (1).
    pub fn sum(&self, side: usize) -> Vec<Option<f64>> {
        self.qemu[side]
            .iter()
            .zip(&self.qpipd[side])
            .map(|(q, d)| Some((*q)? + (*d)?))
            .collect()
    }

    /// How many times less host CPU QPs took than sockets, from the medians of the sums.
    pub fn gain(&self) -> Option<f64> {
        let m = |side| spread(&self.sum(side)).map(|s| s.median);
        Better::Lower.gain(m(0)?, m(1)?)
    }
}

/// The line of the RDMA Write ping-pong, qpip's iWARP QPs against siw's.
pub const RDMA_LAT_LINE: &str = "RDMA Write latency, round trip p50 (qpip vs siw)";
/// The line of RDMA Read round trips, qpip against siw.
pub const RDMA_READ_LAT_LINE: &str = "RDMA Read latency, round trip p50 (qpip vs siw)";
/// The same two against soft-RoCE, the RDMA lines' second anchor (perftest on rxe in the
/// sockets column).
pub const RDMA_LAT_RXE_LINE: &str = "RDMA Write latency, round trip p50 (qpip vs rxe)";
pub const RDMA_READ_LAT_RXE_LINE: &str = "RDMA Read latency, round trip p50 (qpip vs rxe)";
/// The line of qpip's RDMA Write ping-pong asleep on tripwires against siw's spinning.
pub const RDMA_LAT_TRIPWIRE_LINE: &str =
    "RDMA Write latency, round trip p50 (qpip on tripwires vs siw spinning)";

/// The counters shown per message of a QP measurement: (column, what it counts, the
/// name in `qpip-perf`'s `per_msg` of a TCP row, of a UDP row).
pub const COUNTERS: [(&str, &str, &str, &str); 4] = [
    (
        "kicks",
        "doorbells that found the device's engine asleep and woke it",
        "kicks",
        "kicks",
    ),
    (
        "interrupts",
        "completion interrupts the device raised",
        "interrupts",
        "interrupts",
    ),
    (
        "sleeps",
        "times the device's engine went to sleep",
        "sleeps",
        "sleeps",
    ),
    (
        "segs out",
        "TCP segments (UDP: datagrams) sent; in a bandwidth test b's are its ACKs",
        "tcp_segs_out",
        "udp_tx",
    ),
];

/// The counters shown per message of a kernel-socket measurement, as [`COUNTERS`] are.
/// Each guest's whole kernel's and NIC's: the test is all the guests do.
pub const SOCKET_COUNTERS: [(&str, &str, &str, &str); 2] = [
    (
        "NIC interrupts",
        "interrupts of the NIC that carries the test, all its queues' (virtio-net: the \
         virtio device's; netdev: the qpip device's PCI function's)",
        "nic_irqs",
        "nic_irqs",
    ),
    (
        "segs out",
        "TCP segments (UDP: datagrams) the guest's kernel sent; in a bandwidth test b's are \
         its ACKs",
        "tcp_segs_out",
        "udp_tx",
    ),
];

/// One counter per message in every round, on guest a (the client) and guest b (the
/// server).
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    pub name: &'static str,
    pub a: Vec<Option<f64>>,
    pub b: Vec<Option<f64>>,
}

/// The QP side's [`COUNTERS`] per message of one measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// The measurement (`TCP bandwidth, 1 KiB messages`).
    pub what: String,
    pub counters: Vec<Counter>,
}

/// The kernel sockets' [`SOCKET_COUNTERS`] per message of one measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct SocketsCounted {
    /// The measurement (`TCP bandwidth, 1 KiB messages`).
    pub what: String,
    /// Over virtio-net.
    pub virtio: Vec<Counter>,
    /// Over the qpip netdev (all `None` in a run without it).
    pub netdev: Vec<Counter>,
}

impl SocketsCounted {
    /// Some round has a counter over the qpip netdev.
    pub fn has_netdev(&self) -> bool {
        self.netdev.iter().any(Counter::measured)
    }

    /// Some round has a counter over either.
    fn measured(&self) -> bool {
        self.virtio
            .iter()
            .chain(&self.netdev)
            .any(Counter::measured)
    }
}

impl Counter {
    /// Some round has the counter on either guest.
    pub fn measured(&self) -> bool {
        spread(&self.a).is_some() || spread(&self.b).is_some()
    }
}

/// The ratio of `a` to `b` in each round that measured both (> 1: `a` better).
fn round_ratios(better: Better, a: &[Option<f64>], b: &[Option<f64>]) -> Vec<Option<f64>> {
    (0..a.len().max(b.len()))
        .map(|i| better.gain(a.get(i).copied().flatten()?, b.get(i).copied().flatten()?))
        .collect()
}

impl Line {
    pub fn qp(&self) -> Option<Spread> {
        spread(&self.qp)
    }

    pub fn sockets(&self) -> Option<Spread> {
        spread(&self.sockets)
    }

    pub fn netdev(&self) -> Option<Spread> {
        spread(&self.netdev)
    }

    pub fn qp4(&self) -> Option<Spread> {
        spread(&self.qp4)
    }

    /// The rounds of the run this line covers.
    pub fn rounds(&self) -> usize {
        self.qp
            .len()
            .max(self.sockets.len())
            .max(self.netdev.len())
            .max(self.qp4.len())
    }

    /// How many times better sockets over the qpip netdev do than over virtio-net, from
    /// the two medians (> 1: the netdev better).
    pub fn netdev_gain(&self) -> Option<f64> {
        self.better
            .gain(self.netdev()?.median, self.sockets()?.median)
    }

    /// The netdev's gain of each round that measured both.
    pub fn netdev_round_gains(&self) -> Vec<Option<f64>> {
        round_ratios(self.better, &self.netdev, &self.sockets)
    }

    /// How many times better QPs do over IPv4 than over IPv6, from the two medians (> 1:
    /// IPv4 better; about 1: within noise).
    pub fn ipv4_ratio(&self) -> Option<f64> {
        self.better.gain(self.qp4()?.median, self.qp()?.median)
    }

    /// The IPv4 ratio of each round that measured both.
    pub fn ipv4_round_ratios(&self) -> Vec<Option<f64>> {
        round_ratios(self.better, &self.qp4, &self.qp)
    }

    /// How many times better QPs do than sockets, from the two medians (> 1: QPs better).
    pub fn gain(&self) -> Option<f64> {
        self.better.gain(self.qp()?.median, self.sockets()?.median)
    }

    /// The gain of each round that measured both sides.
    pub fn round_gains(&self) -> Vec<Option<f64>> {
        (0..self.rounds())
            .map(|i| {
                let q = self.qp.get(i).copied().flatten()?;
                let s = self.sockets.get(i).copied().flatten()?;
                self.better.gain(q, s)
            })
            .collect()
    }

    /// One of perftest on qpip0's lines (against siw, rxe or qpip's own library).
    pub fn is_perftest(&self) -> bool {
        self.goal.is_some() || self.syscalls.is_some()
    }

    /// The line has sockets over the qpip netdev in some round.
    pub fn has_netdev(&self) -> bool {
        self.netdev.iter().any(Option::is_some)
    }

    /// The line has QPs over IPv4 in some round.
    pub fn has_qp4(&self) -> bool {
        self.qp4.iter().any(Option::is_some)
    }

    /// The median and range of the per-round gains.
    pub fn gain_spread(&self) -> Option<Spread> {
        spread(&self.round_gains())
    }

    /// Every round has a gain (both sides measured).
    pub fn complete(&self) -> bool {
        self.round_gains().iter().all(Option::is_some)
    }
}

/// Some line has sockets over the qpip netdev: the tables get its column and gain.
pub(super) fn any_netdev(lines: &[Line]) -> bool {
    lines.iter().any(Line::has_netdev)
}

/// The rounds of the run (the longest line's).
pub(super) fn rounds_of(lines: &[Line]) -> usize {
    lines.iter().map(Line::rounds).max().unwrap_or(0)
}

/// `lines`' adder of one line: (what, unit, measurement, its figure in a round, better)
/// to the line's index.
type AddLine<'a> = dyn FnMut(String, &'static str, &str, &dyn Fn(&Round, &str) -> Option<f64>, Better) -> usize
    + 'a;

/// The comparison. `detail`: percentiles beyond the median and every size (the bench);
/// else the demo's short table.
pub fn lines(m: &Measurements, detail: bool) -> Vec<Line> {
    let mut out = Vec::new();
    // (line, measurement, test, size, UDP?) of the lines the bench shows counters for.
    let mut counted: Vec<(usize, String, &str, Option<u64>, bool)> = Vec::new();
    // What the sockets column holds: kernel sockets over virtio-net (`sk`; siw on an RDMA
    // line), or soft-RoCE (`rx`) on an RDMA line against rxe.
    let sockets_net = std::cell::Cell::new("sk");
    let mut both =
        |what: String, unit, name: &str, f: &dyn Fn(&Round, &str) -> Option<f64>, better| {
            let side = |net: &str| -> Vec<Option<f64>> {
                let n = format!("{name}-{net}");
                m.rounds.iter().map(|r| f(r, &n)).collect()
            };
            out.push(Line {
                what,
                unit,
                qp: side("qp"),
                sockets: side(sockets_net.get()),
                netdev: side("nd"),
                qp4: side("qp4"),
                better,
                counted: None,
                sockets_counted: None,
                host_cpu: None,
                goal: None,
                syscalls: None,
            });
            out.len() - 1
        };
    let pcts: &[&str] = if detail {
        &["p50", "p90", "p99"]
    } else {
        &["p50"]
    };
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        for (i, p) in pcts.iter().enumerate() {
            let at = both(
                format!("{t} ping-pong, round trip {p}"),
                "µs",
                name,
                &|r, n| r.num(n, None, &["rtt_us", p]),
                Better::Lower,
            );
            if i == 0 {
                counted.push((at, format!("{t} ping-pong"), name, None, name == "udp"));
            }
        }
    }
    let tcp_sizes = m.sizes("bw");
    for s in &tcp_sizes {
        let what = format!("TCP bandwidth, {} messages", human(*s));
        let at = both(
            what.clone(),
            "MB/s",
            "bw",
            &|r, n| r.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
        counted.push((at, what, "bw", Some(*s), false));
    }
    let udp_sizes = m.sizes("udpbw");
    for s in &udp_sizes {
        let what = format!("UDP bandwidth, {} datagrams", human(*s));
        let at = both(
            what.clone(),
            "MB/s",
            "udpbw",
            &|r, n| r.num(n, Some(*s), &["mb_per_s"]),
            Better::Higher,
        );
        counted.push((at, what, "udpbw", Some(*s), true));
        // What was sent back to back and never arrived (the bandwidth counts what did).
        both(
            format!("UDP loss at that rate, {} datagrams", human(*s)),
            "%",
            "udpbw",
            &|r, n| r.num(n, Some(*s), &["loss"]).map(|l| l * 100.0),
            Better::Lower,
        );
    }
    let bulk_bytes = m.rounds.iter().find_map(|r| r.bulk.get("qp").map(|b| b.0));
    if let Some(bytes) = bulk_bytes {
        both(
            format!("bulk a→b, {}, SHA-256 checked", human(bytes)),
            "MB/s",
            "bulk",
            &|r, n| r.bulk_mb_s(n.rsplit('-').next().unwrap_or_default()),
            Better::Higher,
        );
    }
    // RDMA Writes: qpip's iWARP QPs in the QP column, the guest kernel's soft-iWARP (siw,
    // through perftest) in the sockets column; then, where the run measured it, the same
    // line against soft-RoCE (rxe, the same perftest) in the sockets column.
    // With perftest on qpip0 in the run, its lines are the RDMA lines (qpip's own library
    // is one of their sides), and of qpip-perf's own lines only the ping-pong on tripwires
    // stays, against siw spinning.
    // (They go in after the bulk line, once every other line has its place: see the end.)
    let verbs = super::verbs::measured(m);
    let measured_rdma = |name: &str| {
        !verbs
            && m.rounds.iter().any(|r| {
                ["qp", "sk"]
                    .iter()
                    .any(|n| r.perf.contains_key(&format!("{name}-{n}")))
            })
    };
    let measured_rxe = |name: &str| {
        m.rounds
            .iter()
            .any(|r| r.perf.contains_key(&format!("{name}-rx")))
    };
    // against_rxe(both, LINE, NAME, F, BETTER): the line LINE of measurement NAME with
    // rxe's figures in the sockets column, if the run has any.
    let against_rxe = |both: &mut AddLine,
                       what: String,
                       unit: &'static str,
                       name: &str,
                       f: &dyn Fn(&Round, &str) -> Option<f64>,
                       better: Better| {
        if measured_rxe(name) {
            sockets_net.set("rx");
            both(what, unit, name, f, better);
            sockets_net.set("sk");
        }
    };
    // The QP side's counters are the client's (guest a) only: qpip-perf's RDMA server
    // sends no report.
    if measured_rdma("rdmalat") {
        let at = both(
            RDMA_LAT_LINE.to_string(),
            "µs",
            "rdmalat",
            &|r, n| r.num(n, None, &["rtt_us", "p50"]),
            Better::Lower,
        );
        counted.push((
            at,
            "RDMA Write ping-pong, spinning".into(),
            "rdmalat",
            None,
            false,
        ));
        against_rxe(
            &mut both,
            RDMA_LAT_RXE_LINE.to_string(),
            "µs",
            "rdmalat",
            &|r, n| r.num(n, None, &["rtt_us", "p50"]),
            Better::Lower,
        );
    }
    if m.rounds
        .iter()
        .any(|r| r.perf.contains_key(crate::demo::RDMA_LAT_TRIPWIRE))
    {
        // The same siw figure against qpip's ping-pong asleep on tripwires.
        let at = both(
            RDMA_LAT_TRIPWIRE_LINE.to_string(),
            "µs",
            "rdmalat",
            &|r, n| {
                let n = if n.ends_with("-qp") {
                    crate::demo::RDMA_LAT_TRIPWIRE
                } else {
                    n
                };
                r.num(n, None, &["rtt_us", "p50"])
            },
            Better::Lower,
        );
        let test = crate::demo::RDMA_LAT_TRIPWIRE.trim_end_matches("-qp");
        counted.push((
            at,
            "RDMA Write ping-pong, on tripwires".into(),
            test,
            None,
            false,
        ));
    }
    if measured_rdma("rdmabw") {
        for s in m.sizes("rdmabw") {
            let what = format!("RDMA Write bandwidth, {} messages", human(s));
            let at = both(
                format!("{what} (qpip vs siw)"),
                "MB/s",
                "rdmabw",
                &|r, n| r.num(n, Some(s), &["mb_per_s"]),
                Better::Higher,
            );
            counted.push((at, what.clone(), "rdmabw", Some(s), false));
            against_rxe(
                &mut both,
                format!("{what} (qpip vs rxe)"),
                "MB/s",
                "rdmabw",
                &|r, n| r.num(n, Some(s), &["mb_per_s"]),
                Better::Higher,
            );
        }
    }
    if measured_rdma("rdmareadlat") {
        let at = both(
            RDMA_READ_LAT_LINE.to_string(),
            "µs",
            "rdmareadlat",
            &|r, n| r.num(n, None, &["rtt_us", "p50"]),
            Better::Lower,
        );
        counted.push((
            at,
            "RDMA Read, one at a time".into(),
            "rdmareadlat",
            None,
            false,
        ));
        against_rxe(
            &mut both,
            RDMA_READ_LAT_RXE_LINE.to_string(),
            "µs",
            "rdmareadlat",
            &|r, n| r.num(n, None, &["rtt_us", "p50"]),
            Better::Lower,
        );
    }
    if measured_rdma("rdmareadbw") {
        for s in m.sizes("rdmareadbw") {
            let what = format!("RDMA Read bandwidth, {} messages", human(s));
            let at = both(
                format!("{what} (qpip vs siw)"),
                "MB/s",
                "rdmareadbw",
                &|r, n| r.num(n, Some(s), &["mb_per_s"]),
                Better::Higher,
            );
            counted.push((at, what.clone(), "rdmareadbw", Some(s), false));
            against_rxe(
                &mut both,
                format!("{what} (qpip vs rxe)"),
                "MB/s",
                "rdmareadbw",
                &|r, n| r.num(n, Some(s), &["mb_per_s"]),
                Better::Higher,
            );
        }
    }
    for (t, name) in [("UDP", "udp"), ("TCP", "tcp")] {
        both(
            format!("guest CPU per {t} round trip (a+b)"),
            "µs",
            name,
            &|r, n| r.cpu(n, None),
            Better::Lower,
        );
    }
    let cpu_sizes: Vec<u64> = if detail {
        tcp_sizes.clone()
    } else {
        tcp_sizes.last().copied().into_iter().collect()
    };
    for s in cpu_sizes {
        both(
            format!("guest CPU per TCP {} message (a+b)", human(s)),
            "µs",
            "bw",
            &|r, n| r.cpu(n, Some(s)),
            Better::Lower,
        );
    }
    // Whole-system CPU, where qpip-perf measured it (the bench): both guests' busy time over
    // each test's measured interval, and beside it (under the table) the host's QEMU and
    // qpipd over the windows the run marked around each whole qpip-perf run.
    let measured = |name: &str, size: Option<u64>| {
        detail
            && m.rounds.iter().any(|r| {
                ["qp", "sk"]
                    .iter()
                    .any(|n| r.guest_wide(&format!("{name}-{n}"), size).is_some())
            })
    };
    let mut wide: Vec<(String, String, &str, Option<u64>)> = vec![
        ("UDP round trip".into(), "UDP ping-pong".into(), "udp", None),
        ("TCP round trip".into(), "TCP ping-pong".into(), "tcp", None),
    ];
    for s in &tcp_sizes {
        let h = human(*s);
        wide.push((
            format!("TCP {h} message"),
            format!("TCP bandwidth, {h} messages"),
            "bw",
            Some(*s),
        ));
    }
    let mut hosted = Vec::new();
    for (per, what, name, size) in wide {
        if !measured(name, size) {
            continue;
        }
        let at = both(
            format!("guest-wide CPU per {per}"),
            "µs",
            name,
            &|r, n| r.guest_wide(n, size),
            Better::Lower,
        );
        hosted.push((at, host_cpu_of(m, what, name, size)));
    }
    for (at, h) in hosted {
        if h.sum(0).iter().chain(&h.sum(1)).any(Option::is_some) {
            out[at].host_cpu = Some(h);
        }
    }
    // Host overhead per message (Table 1), where guest a ran qpip-overhead (the bench).
    // The per-message figure is the run that slept between messages (as qpip-overhead
    // measures by default); quiet posts are taken from the run that spun (the engine stays
    // awake), kicks from the one that slept, each against the sockets of the same run.
    if m.rounds.iter().any(|r| !r.overhead.is_empty()) {
        for (t, p) in [("UDP", "udp"), ("TCP", "tcp")] {
            for (what, spin, key) in [
                (
                    format!("host overhead per {t} message (Table 1)"),
                    false,
                    "ns_per_message",
                ),
                (
                    format!("{t} overhead, QP: device awake (quiet)"),
                    true,
                    "quiet_ns",
                ),
                (
                    format!("{t} overhead, QP: device woken (kick)"),
                    false,
                    "kicked_ns",
                ),
            ] {
                let (qp, sockets): (Vec<_>, Vec<_>) = m
                    .rounds
                    .iter()
                    .map(|r| {
                        if key == "ns_per_message" {
                            (
                                r.overhead_us(false, &format!("qp-{p}"), key),
                                r.overhead_us(false, &format!("sockets-{p}"), key),
                            )
                        } else {
                            r.overhead_pair(spin, p, key)
                        }
                    })
                    .unzip();
                // A kind of post no round saw (no kick at all, say) has no line.
                if key != "ns_per_message" && qp.iter().all(Option::is_none) {
                    continue;
                }
                out.push(Line {
                    what,
                    unit: "µs",
                    qp,
                    sockets,
                    netdev: Vec::new(),
                    qp4: Vec::new(),
                    better: Better::Lower,
                    counted: None,
                    sockets_counted: None,
                    host_cpu: None,
                    goal: None,
                    syscalls: None,
                });
            }
        }
    }
    if detail {
        for (at, what, test, size, udp) in counted {
            let k = sockets_counted_of(m, what.clone(), test, size, udp);
            if k.measured() {
                out[at].sockets_counted = Some(k);
            }
            let c = counted_of(m, what, test, size, udp);
            if c.counters.iter().any(|c| spread(&c.a).is_some()) {
                out[at].counted = Some(c);
            }
        }
    }
    if verbs {
        // Where the RDMA lines are: after the bulk line (before qpip-perf's ping-pong on
        // tripwires and the CPU lines).
        let at = out
            .iter()
            .position(|l| l.what == RDMA_LAT_TRIPWIRE_LINE || l.what.starts_with("guest CPU per"))
            .unwrap_or(out.len());
        out.splice(at..at, super::verbs::lines(m));
    }
    // A line no side measured in any round (a run of the RDMA rows alone) is left out.
    out.retain(|l| {
        [&l.qp, &l.sockets, &l.netdev, &l.qp4]
            .iter()
            .any(|v| v.iter().any(Option::is_some))
    });
    out
}

/// The host's CPU per message of measurement `test` (`udp`, `bw` ...) with this size.
fn host_cpu_of(m: &Measurements, what: String, test: &str, size: Option<u64>) -> HostCpu {
    let of = |net: &str, class: &str| -> Vec<Option<f64>> {
        let name = format!("{test}-{net}");
        m.rounds
            .iter()
            .map(|r| r.host_cpu(&name, size, class))
            .collect()
    };
    let guests = |net: &str| -> Vec<Option<f64>> {
        let name = format!("{test}-{net}");
        m.rounds
            .iter()
            .map(|r| r.guest_window(&name, size))
            .collect()
    };
    HostCpu {
        what,
        qemu: [of("qp", "qemu"), of("sk", "qemu")],
        qpipd: [of("qp", "qpipd"), of("sk", "qpipd")],
        guests: [guests("qp"), guests("sk")],
    }
}

/// Counter `key` per message of test `name` (`udp-qp`, `bw-sk` ...) with this size in
/// every round, as `name` on guests a and b.
fn counter_of(
    m: &Measurements,
    name: &'static str,
    test: &str,
    size: Option<u64>,
    key: &str,
) -> Counter {
    let side = |side: &str| -> Vec<Option<f64>> {
        m.rounds
            .iter()
            .map(|r| r.num(test, size, &["per_msg", side, key]))
            .collect()
    };
    Counter {
        name,
        a: side("client"),
        b: side("server"),
    }
}

/// The kernel sockets' [`SOCKET_COUNTERS`] of measurement `test` (`udp`, `bw` ...) with
/// this size, over virtio-net and the qpip netdev.
fn sockets_counted_of(
    m: &Measurements,
    what: String,
    test: &str,
    size: Option<u64>,
    udp: bool,
) -> SocketsCounted {
    SocketsCounted {
        what,
        virtio: counters_of(m, &SOCKET_COUNTERS, &format!("{test}-sk"), size, udp),
        netdev: counters_of(m, &SOCKET_COUNTERS, &format!("{test}-nd"), size, udp),
    }
}

/// The QP side's [`COUNTERS`] of measurement `test` (`udp`, `bw` ...) with this size.
fn counted_of(m: &Measurements, what: String, test: &str, size: Option<u64>, udp: bool) -> Counted {
    Counted {
        what,
        counters: counters_of(m, &COUNTERS, &format!("{test}-qp"), size, udp),
    }
}

/// Each counter of `table` ([`COUNTERS`], [`SOCKET_COUNTERS`]) per message of test `name`
/// with this size: its TCP key, or on a UDP test its UDP key.
fn counters_of(
    m: &Measurements,
    table: &[(&'static str, &str, &str, &str)],
    name: &str,
    size: Option<u64>,
    udp: bool,
) -> Vec<Counter> {
    table
        .iter()
        .map(|(col, _, tcp_key, udp_key)| {
            counter_of(m, col, name, size, if udp { udp_key } else { tcp_key })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{json_value, markdown_table, text_table};
    use super::*;

    #[test]
    fn lines_put_qps_and_sockets_side_by_side() {
        let m = sample();
        let short = lines(&m, false);
        let names: Vec<&str> = short.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(
            names,
            [
                "UDP ping-pong, round trip p50",
                "TCP ping-pong, round trip p50",
                "TCP bandwidth, 1 KiB messages",
                "TCP bandwidth, 64 KiB messages",
                "bulk a→b, 8 MiB, SHA-256 checked",
                "guest CPU per UDP round trip (a+b)",
                "guest CPU per TCP round trip (a+b)",
                "guest CPU per TCP 64 KiB message (a+b)",
            ]
        );
        assert_eq!(short[0].gain(), Some(2.0));
        assert_eq!(short[2].gain(), Some(0.5));
        assert_eq!(short[3].gain(), Some(2.0));
        let bulk = &short[4];
        assert!(close(bulk.qp().unwrap().median, 8.388608));
        assert_eq!(bulk.gain(), Some(2.0));
        assert_eq!(short[5].qp, [Some(5.0)]);
        assert_eq!(short[5].gain(), Some(10.0));
        assert_eq!(lines(&m, true).len(), short.len() + 4 + 1);
        let t = text_table(&short);
        assert!(t.contains("2.00x"), "{t}");
        assert!(
            !t.contains("min–max"),
            "one round keeps the short table: {t}"
        );
        assert!(markdown_table(&short).starts_with("| | QP (qpip device)"));
        let j = json_value(&m, &short);
        assert_eq!(j["rounds"][0]["bulk"]["sk"]["seconds"], 2.0);
        assert_eq!(j["comparison"][0]["qp_gain"], 2.0);
        assert_eq!(j["comparison"][0]["qp"]["median"], 100.0);
    }

    #[test]
    fn odd_rounds_give_medians_spreads_and_the_gain_of_the_medians() {
        // QP UDP round trips 100, 300, 200 µs against 200 µs of sockets each round.
        let m = rounds(&[1.0, 3.0, 2.0]);
        let l = lines(&m, true);
        let udp = &l[0];
        assert_eq!(udp.what, "UDP ping-pong, round trip p50");
        let q = udp.qp().unwrap();
        assert_eq!((q.median, q.min, q.max, q.n), (200.0, 100.0, 300.0, 3));
        assert_eq!(udp.sockets().unwrap().median, 200.0);
        // The gain of the medians is not the median of the round gains (2, 2/3, 1).
        assert_eq!(udp.gain(), Some(1.0));
        let g = udp.gain_spread().unwrap();
        assert!(close(g.min, 200.0 / 300.0) && close(g.max, 2.0), "{g:?}");
        assert!(udp.complete());
        // Bandwidth: higher is better, QP 40·k against 20 MB/s.
        let bw64 = l
            .iter()
            .find(|l| l.what == "TCP bandwidth, 64 KiB messages")
            .unwrap();
        assert_eq!(bw64.gain(), Some(4.0));
        let g = bw64.gain_spread().unwrap();
        assert_eq!((g.min, g.max), (2.0, 6.0));
    }
}
