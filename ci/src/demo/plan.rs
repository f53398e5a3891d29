//! What the demo and the bench run: the plan (counts, sizes, rounds) and the steps of
//! guest a's script it makes.

use super::{human, scripts};
use crate::netns;
use std::time::Duration;

/// The smallest TCP bandwidth message whose test moves [`Plan::bw_large_factor`] times
/// [`Plan::bw_bytes`].
pub const LARGE_MSG: usize = 64 << 10;

/// The TCP bandwidth message size the bench compares the qpipd layouts at.
pub const LAYOUT_BW_MSG: usize = 8 << 10;

/// The name the RDMA Write ping-pong on tripwires is reported by (beside `rdmalat-qp`).
pub const RDMA_LAT_TRIPWIRE: &str = "rdmalattw-qp";

/// Bytes of each RDMA Write of the bench's RDMA ping-pong.
pub const RDMA_LAT_SIZE: usize = 64;
/// Bytes of each RDMA Write of the bench's RDMA bandwidth test.
pub const RDMA_BW_SIZE: usize = 64 << 10;

/// A measurement the run makes on both nets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// UDP ping-pong (`qpip-perf --udp --test latency`).
    UdpPing,
    /// TCP ping-pong.
    TcpPing,
    /// TCP bandwidth by message size.
    TcpBw,
    /// UDP bandwidth by datagram size, with its loss.
    UdpBw,
    /// A bulk transfer a→b checked by SHA-256.
    Bulk,
    /// RDMA Write ping-pong on iWARP QPs: qpip's device ("QP" side, `qpip-perf --rdma
    /// write`) against the guest kernel's soft-iWARP over virtio-net ("sockets" side,
    /// perftest's `ib_write_lat`), and against its soft-RoCE ([`Net::Rxe`], the same
    /// perftest). The QP side runs twice: spinning on the landing byte as
    /// `ib_write_lat` does, then asleep on a tripwire on it (`--tripwire`, reported as
    /// [`RDMA_LAT_TRIPWIRE`]).
    RdmaLat,
    /// RDMA Write bandwidth, the same two ways (`ib_write_bw` on siw).
    RdmaBw,
    /// RDMA Reads one at a time, post to completion: qpip (`qpip-perf --rdma read`, which
    /// sleeps until the completion) against siw (`ib_read_lat`, which polls its CQ).
    RdmaReadLat,
    /// RDMA Reads back to back, at most 16 outstanding on both (qpip's ORD; perftest's
    /// `-o 16`).
    RdmaReadBw,
    /// Sends one at a time each way, a ping-pong of two-sided messages (perftest's
    /// `ib_send_lat`): perftest only, on qpip's ib_device ([`Net::Verbs`]), siw and rxe
    /// (qpip-perf has no Send test).
    RdmaSendLat,
    /// Sends back to back into posted receives (`ib_send_bw`), perftest only as above.
    RdmaSendBw,
}

impl Test {
    /// One of the RDMA measurements (qpip's iWARP QPs against siw).
    pub fn is_rdma(self) -> bool {
        matches!(
            self,
            Test::RdmaLat
                | Test::RdmaBw
                | Test::RdmaReadLat
                | Test::RdmaReadBw
                | Test::RdmaSendLat
                | Test::RdmaSendBw
        )
    }

    /// qpip's own library (`qpip-perf --rdma`, [`Net::Qp`]) has this RDMA test: the Writes
    /// and Reads, not the Sends.
    pub fn has_own_library(self) -> bool {
        self.is_rdma() && !matches!(self, Test::RdmaSendLat | Test::RdmaSendBw)
    }

    /// The perftest program of an RDMA test (`ib_write_lat`).
    pub fn perftest_program(self) -> Option<&'static str> {
        Some(match self {
            Test::RdmaLat => "ib_write_lat",
            Test::RdmaBw => "ib_write_bw",
            Test::RdmaReadLat => "ib_read_lat",
            Test::RdmaReadBw => "ib_read_bw",
            Test::RdmaSendLat => "ib_send_lat",
            Test::RdmaSendBw => "ib_send_bw",
            _ => return None,
        })
    }

    /// The first half of its step id and `@perf` name (`udp` in `udp-qp`).
    pub fn id(self) -> &'static str {
        match self {
            Test::UdpPing => "udp",
            Test::TcpPing => "tcp",
            Test::TcpBw => "bw",
            Test::UdpBw => "udpbw",
            Test::Bulk => "bulk",
            Test::RdmaLat => "rdmalat",
            Test::RdmaBw => "rdmabw",
            Test::RdmaReadLat => "rdmareadlat",
            Test::RdmaReadBw => "rdmareadbw",
            Test::RdmaSendLat => "rdmasendlat",
            Test::RdmaSendBw => "rdmasendbw",
        }
    }
}

/// Which net a measurement uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// QPs between the guests' qpip devices (IPv6).
    Qp,
    /// Kernel sockets through the guests' virtio-net NICs.
    Sockets,
    /// Kernel sockets through the guests' qpip netdevs (the driver's network interface on
    /// the qpip device): the guest kernel's own TCP/IP on the same adapter as the QPs.
    Netdev,
    /// QPs between the guests' qpip devices over IPv4.
    Qp4,
    /// The RDMA measurements' second software anchor: perftest on the guest kernel's
    /// soft-RoCE (rxe, RoCEv2) over the virtio-net NICs, beside soft-iWARP's
    /// ([`Net::Sockets`] for an RDMA test).
    Rxe,
    /// The RDMA measurements on qpip's ib_device: perftest, unmodified, on `qpip0`
    /// (`qpip_ib.ko` and the rdma-core provider) in both guests, connected by rdma_cm
    /// (`-R`) over IPv4 to guest b's qpip device address, routed through the qpip netdevs
    /// (so the plan brings them up, [`Action::NetdevUp`]). The headline beside siw's and
    /// rxe's perftest, and beside qpip's own library ([`Net::Qp`]).
    Verbs,
}

impl Net {
    /// The second half of a step id (`qp` in `udp-qp`), and the name of a bulk report.
    pub fn id(self) -> &'static str {
        match self {
            Net::Qp => "qp",
            Net::Sockets => "sk",
            Net::Netdev => "nd",
            Net::Qp4 => "qp4",
            Net::Rxe => "rx",
            Net::Verbs => "vb",
        }
    }

    /// Over the guest kernel's sockets (virtio-net or the qpip netdev).
    pub fn is_sockets(self) -> bool {
        matches!(self, Net::Sockets | Net::Netdev)
    }
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Guest b starts its servers, guest a makes the test data.
    Ready,
    /// One measurement in one round (from 1).
    Measure { test: Test, net: Net, round: u32 },
    /// Both guests bring their qpip netdevs up and route each other's device addresses
    /// through them (before the first [`Net::Netdev`] measurement).
    NetdevUp,
    /// Guest a's TCP QP to the lab host's echo server.
    HostOut,
    /// The lab host's client to a TCP QP listener in guest a.
    HostIn,
    /// UDP datagrams from a QP in guest a, echoed by the lab host.
    HostUdp,
    /// `qpip-overhead` in guest a, in one round (from 1).
    Overhead { round: u32 },
    /// A network disk over QPs: `qpip-nbd connect` in guest a to `qpip-nbd serve` in guest
    /// b, an ext2 file written, remounted and read back (the demo; the bench measures it in
    /// its storage part).
    Nbd,
}

/// One step of guest a's script.
#[derive(Debug, Clone)]
pub struct Step {
    /// What guest a reports it by (`@step=ID`), unique in the run: `udp-qp`, or `udp-qp.2`
    /// for round 2 of a run of several rounds.
    pub id: String,
    /// What it does, for the progress lines.
    pub what: String,
    pub action: Action,
}

/// How much the run measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Round trips of each ping-pong.
    pub latency_iters: u64,
    /// TCP bandwidth message sizes.
    pub tcp_sizes: Vec<usize>,
    /// UDP bandwidth datagram sizes (none: no UDP bandwidth test).
    pub udp_sizes: Vec<usize>,
    /// Bytes per bandwidth test and size (TCP messages from [`LARGE_MSG`] on: times
    /// [`Plan::bw_large_factor`]).
    pub bw_bytes: u64,
    /// How many times [`Plan::bw_bytes`] a TCP bandwidth test with messages of
    /// [`LARGE_MSG`] or more moves, so that it has enough messages for a steady state.
    pub bw_large_factor: u64,
    /// Bytes of each bulk transfer a→b.
    pub bulk_bytes: u64,
    /// Bytes each way between guest a and the lab host (0: no host steps).
    pub host_bytes: u64,
    /// How many times every measurement runs (1..=[`super::results::MAX_ROUNDS`]); the table
    /// shows each figure's median and spread.
    pub rounds: u32,
    /// Each measurement over QPs right next to the same over sockets, the two taking turns
    /// to go first round by round, so a change in the host's load hits both sides alike
    /// (the bench). Else every QP step, then the host steps, then every sockets step (the
    /// demo: it reads as a story).
    pub interleave: bool,
    /// Limit for one round (the first includes the boot); the run's limit is
    /// [`Plan::limit`].
    pub round_timeout: Duration,
    /// Messages of each `qpip-overhead` transport at the end of every round (0: none).
    pub overhead_messages: u64,
    /// Each ping-pong and TCP bandwidth test (one message size at a time) is a CPU window:
    /// both guests' `/proc/stat` and the host's CPU of QEMU and qpipd at its edges.
    pub cpu_marks: bool,
    /// RDMA Write latency and bandwidth, qpip's iWARP QPs against siw's and rxe's (both
    /// guests bring up soft-iWARP and soft-RoCE; no RDMA steps in a run over QPs only).
    pub rdma: bool,
    /// Bytes of each RDMA Write of the ping-pong.
    pub rdma_lat_size: usize,
    /// Bytes of each RDMA Write of the bandwidth test, and how many bytes it moves.
    pub rdma_bw_size: usize,
    pub rdma_bw_bytes: u64,
    /// Where the guests' qpip devices live (one adapter qpipd by default).
    pub layout: crate::QpipdLayout,
    /// Only the ping-pongs and TCP bandwidth over QPs: no sockets, UDP bandwidth, bulk,
    /// host steps or overhead (the bench's pass in the other layout, see
    /// [`Plan::layout_pass`]).
    pub qp_only: bool,
    /// Extra arguments for every qpipd of the run (the bench's `--qpipd-arg`), to measure
    /// the device as configured otherwise; recorded with the results.
    pub qpipd_args: Vec<String>,
    /// Bytes of the file of the network disk step ([`Action::Nbd`]; 0: no such step).
    pub nbd_bytes: u64,
    /// Kernel sockets over the guests' qpip netdevs too ([`Net::Netdev`]): the ping-pongs,
    /// TCP bandwidth and bulk, after a step that brings the netdevs up
    /// ([`Action::NetdevUp`]); skipped in a guest without one.
    pub netdev: bool,
    /// The ping-pongs and TCP bandwidth over QPs on IPv4 too ([`Net::Qp4`]).
    pub qp_ipv4: bool,
    /// Only the RDMA measurements (the bench's `--rdma-only`): no ping-pongs, TCP or UDP
    /// bandwidth, bulk, host steps or overhead; the qpip netdevs still come up (perftest on
    /// qpip0 is routed through them).
    pub rdma_only: bool,
}

impl Plan {
    /// The demo: modest counts (TCG guests), everything once, in about a minute.
    pub fn demo() -> Plan {
        Plan {
            latency_iters: 300,
            tcp_sizes: vec![65536],
            udp_sizes: Vec::new(),
            bw_bytes: 4 << 20,
            bw_large_factor: 1,
            bulk_bytes: 8 << 20,
            host_bytes: 1 << 20,
            rounds: 1,
            interleave: false,
            round_timeout: Duration::from_secs(280),
            overhead_messages: 0,
            cpu_marks: false,
            layout: crate::QpipdLayout::Adapter,
            qp_only: false,
            rdma: false,
            rdma_lat_size: RDMA_LAT_SIZE,
            rdma_bw_size: RDMA_BW_SIZE,
            rdma_bw_bytes: 16 << 20,
            qpipd_args: Vec::new(),
            nbd_bytes: 8 << 20,
            netdev: false,
            qp_ipv4: false,
            rdma_only: false,
        }
    }

    /// The bench: more round trips, every message size, UDP bandwidth, three rounds with
    /// QPs and sockets interleaved (sockets over virtio-net and over the qpip netdev, QPs
    /// on IPv6 and IPv4), each ending with `qpip-overhead`; CPU windows; no host
    /// steps. TCP bandwidth moves 16 MiB of 1 KiB and 8 KiB messages and 64 MiB of 64 KiB
    /// and 256 KiB messages (1024 and 256 messages: with 16 MiB, 256 and 64 were over in a
    /// fraction of a second, too few for a steady state or for `/proc/stat`'s 10 ms ticks).
    /// RDMA Writes: a ping-pong of [`RDMA_LAT_SIZE`] bytes as many round trips, and
    /// 16 MiB of [`RDMA_BW_SIZE`] Writes (256: siw over virtio-net moves about 5 MB/s
    /// under TCG, so that takes some seconds), qpip against siw and rxe.
    pub fn bench() -> Plan {
        Plan {
            latency_iters: 2000,
            tcp_sizes: vec![1024, 8192, 65536, 262144],
            udp_sizes: vec![1024, 8192],
            bw_bytes: 16 << 20,
            bw_large_factor: 4,
            bulk_bytes: 32 << 20,
            host_bytes: 0,
            rounds: 3,
            interleave: true,
            round_timeout: Duration::from_secs(1200),
            overhead_messages: 1000,
            cpu_marks: true,
            layout: crate::QpipdLayout::Adapter,
            qp_only: false,
            rdma: true,
            rdma_lat_size: RDMA_LAT_SIZE,
            rdma_bw_size: RDMA_BW_SIZE,
            rdma_bw_bytes: 16 << 20,
            qpipd_args: Vec::new(),
            nbd_bytes: 0,
            netdev: true,
            qp_ipv4: true,
            rdma_only: false,
        }
    }

    /// The bench's RDMA rows alone (`--rdma-only`): the same RDMA tests, counts and
    /// rounds as [`Plan::bench`], nothing else but the netdev step they need.
    pub fn rdma_only(&self) -> Plan {
        Plan {
            udp_sizes: Vec::new(),
            bulk_bytes: 0,
            host_bytes: 0,
            overhead_messages: 0,
            qp_only: false,
            rdma: true,
            nbd_bytes: 0,
            netdev: true,
            rdma_only: true,
            ..self.clone()
        }
    }

    /// The bench's second, shorter pass: the same ping-pongs and the TCP bandwidth of
    /// [`LAYOUT_BW_MSG`] messages, over QPs only, as many rounds, with the guests' devices
    /// in the other layout (`layout`), so the two layouts compare within one bench.
    pub fn layout_pass(&self, layout: crate::QpipdLayout) -> Plan {
        Plan {
            tcp_sizes: vec![LAYOUT_BW_MSG],
            udp_sizes: Vec::new(),
            bulk_bytes: 0,
            host_bytes: 0,
            overhead_messages: 0,
            // The host's CPU per message in this layout too, for the comparison.
            cpu_marks: true,
            layout,
            qp_only: true,
            rdma: false,
            nbd_bytes: 0,
            netdev: false,
            qp_ipv4: false,
            rdma_only: false,
            ..self.clone()
        }
    }

    /// Bytes of a TCP bandwidth test with messages of `size`.
    pub fn tcp_bw_bytes(&self, size: usize) -> u64 {
        if size >= LARGE_MSG {
            self.bw_bytes.saturating_mul(self.bw_large_factor.max(1))
        } else {
            self.bw_bytes
        }
    }

    /// Limit for the whole run, boot to power-off.
    pub fn limit(&self) -> Duration {
        self.round_timeout * self.rounds.max(1)
    }

    /// The nets `test` runs over in a round, in the order of an odd round (an even round
    /// reverses it): QPs on IPv4 next to QPs on IPv6, which are next to sockets over
    /// virtio-net, next to sockets over the qpip netdev, so each pair compared saw the same
    /// host load. An RDMA test: qpip's own library (where it has the test), perftest on
    /// qpip's ib_device, perftest on siw (the sockets side), on rxe: each ratio the table
    /// shows (qpip0 against the own library, siw and rxe) has qpip0 next to or one step
    /// from its other side in both orders.
    fn nets(&self, test: Test) -> Vec<Net> {
        if test.is_rdma() {
            let mut v = Vec::new();
            if test.has_own_library() {
                v.push(Net::Qp);
            }
            // Perftest on qpip0 is routed through the qpip netdevs: with them only.
            if self.netdev {
                v.push(Net::Verbs);
            }
            v.extend([Net::Sockets, Net::Rxe]);
            return v;
        }
        let pingpong_or_bw = matches!(test, Test::UdpPing | Test::TcpPing | Test::TcpBw);
        let mut v = Vec::new();
        if self.qp_ipv4 && pingpong_or_bw {
            v.push(Net::Qp4);
        }
        v.push(Net::Qp);
        if self.qp_only {
            return v;
        }
        v.push(Net::Sockets);
        if self.netdev && (pingpong_or_bw || test == Test::Bulk) {
            v.push(Net::Netdev);
        }
        v
    }

    /// The measurements of one round on one net, in order.
    fn tests(&self) -> Vec<Test> {
        const RDMA: [Test; 6] = [
            Test::RdmaLat,
            Test::RdmaBw,
            Test::RdmaReadLat,
            Test::RdmaReadBw,
            Test::RdmaSendLat,
            Test::RdmaSendBw,
        ];
        if self.rdma_only {
            return RDMA.to_vec();
        }
        let mut t = vec![Test::UdpPing, Test::TcpPing, Test::TcpBw];
        if self.qp_only {
            return t;
        }
        if !self.udp_sizes.is_empty() {
            t.push(Test::UdpBw);
        }
        t.push(Test::Bulk);
        if self.rdma {
            t.extend(RDMA);
        }
        t
    }

    /// Messages of the RDMA Write bandwidth test.
    pub fn rdma_bw_count(&self) -> u64 {
        (self.rdma_bw_bytes / self.rdma_bw_size.max(1) as u64).max(1)
    }

    /// The name round `round`'s measurement `base` is reported by: `base` itself in a run
    /// of one round, else `base.ROUND` (see [`super::results::Measurements::take_line`]).
    pub fn tag(&self, base: &str, round: u32) -> String {
        if self.rounds > 1 {
            format!("{base}.{round}")
        } else {
            base.to_string()
        }
    }

    /// What a step's description starts with in a run of several rounds: `round 2/3: `.
    fn round_note(&self, round: u32) -> String {
        if self.rounds > 1 {
            format!("round {round}/{}: ", self.rounds)
        } else {
            String::new()
        }
    }

    fn measure(&self, test: Test, net: Net, round: u32) -> Step {
        let iters = self.latency_iters;
        let sizes = |v: &[usize]| {
            v.iter()
                .map(|s| human(*s as u64))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rdma = test.is_rdma();
        let over = match net {
            Net::Qp if rdma => "on qpip's iWARP QPs (qpip-perf --rdma)",
            Net::Verbs => "on qpip's ib_device qpip0 (perftest)",
            Net::Sockets if rdma => "on the guest kernel's soft-iWARP over virtio-net (perftest)",
            Net::Rxe => "on the guest kernel's soft-RoCE over virtio-net (perftest)",
            Net::Qp => "over QPs",
            Net::Sockets => "over kernel sockets",
            Net::Netdev => "over kernel sockets on the qpip netdev",
            Net::Qp4 => "over QPs on IPv4",
        };
        let bytes = human(self.bw_bytes);
        // TCP: the sizes grouped by the bytes each moves, "16 MiB per size, messages of
        // 1 KiB, 8 KiB; 64 MiB per size, messages of 64 KiB, 256 KiB".
        let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
        for s in &self.tcp_sizes {
            let b = self.tcp_bw_bytes(*s);
            match groups.iter_mut().find(|g| g.0 == b) {
                Some(g) => g.1.push(*s),
                None => groups.push((b, vec![*s])),
            }
        }
        let tcp_detail = groups
            .iter()
            .map(|(b, v)| format!("{} per size, messages of {}", human(*b), sizes(v)))
            .collect::<Vec<_>>()
            .join("; ");
        let mut what = match test {
            Test::UdpPing => format!("UDP ping-pong a⇄b {over}"),
            Test::TcpPing if !net.is_sockets() => format!("TCP message ping-pong a⇄b {over}"),
            Test::TcpPing => format!("TCP ping-pong a⇄b {over}"),
            Test::TcpBw => format!("TCP bandwidth a→b {over}"),
            Test::UdpBw => format!("UDP bandwidth a→b {over}"),
            Test::Bulk => format!("TCP bulk transfer a→b {over}"),
            Test::RdmaLat => format!("RDMA Write ping-pong a⇄b {over}"),
            Test::RdmaBw => format!("RDMA Write bandwidth a→b {over}"),
            Test::RdmaReadLat => format!("RDMA Read round trips a←b {over}"),
            Test::RdmaReadBw => format!("RDMA Read bandwidth a←b {over}"),
            Test::RdmaSendLat => format!("Send ping-pong a⇄b {over}"),
            Test::RdmaSendBw => format!("Send bandwidth a→b {over}"),
        };
        if net == Net::Sockets && matches!(test, Test::UdpPing | Test::TcpPing) {
            what += ", virtio-net";
        }
        let detail = match test {
            Test::UdpPing | Test::TcpPing => format!("{iters} round trips"),
            Test::TcpBw => tcp_detail,
            Test::UdpBw => format!("{bytes} per size, datagrams of {}", sizes(&self.udp_sizes)),
            Test::Bulk => format!(
                "{}, {}, SHA-256 compared",
                if net.is_sockets() {
                    "busybox nc"
                } else {
                    "qpip-cat"
                },
                human(self.bulk_bytes)
            ),
            Test::RdmaLat if net == Net::Qp => format!(
                "{iters} round trips, {} Writes, spinning then asleep on tripwires",
                human(self.rdma_lat_size as u64)
            ),
            Test::RdmaLat => format!(
                "{iters} round trips, {} Writes",
                human(self.rdma_lat_size as u64)
            ),
            Test::RdmaSendLat => format!(
                "{iters} round trips, {} Sends",
                human(self.rdma_lat_size as u64)
            ),
            Test::RdmaSendBw => format!(
                "{} Sends of {}",
                self.rdma_bw_count(),
                human(self.rdma_bw_size as u64)
            ),
            Test::RdmaBw => format!(
                "{} Writes of {}",
                self.rdma_bw_count(),
                human(self.rdma_bw_size as u64)
            ),
            Test::RdmaReadLat => format!(
                "{iters} Reads of {}, one at a time",
                human(self.rdma_lat_size as u64)
            ),
            Test::RdmaReadBw => format!(
                "{} Reads of {}",
                self.rdma_bw_count(),
                human(self.rdma_bw_size as u64)
            ),
        };
        let round_note = self.round_note(round);
        Step {
            id: self.tag(&format!("{}-{}", test.id(), net.id()), round),
            what: format!("{round_note}{what} ({detail})"),
            action: Action::Measure { test, net, round },
        }
    }

    /// The steps guest a runs, in order, with what each does.
    pub fn steps(&self) -> Vec<Step> {
        let step = |id: &str, what: String, action| Step {
            id: id.to_string(),
            what,
            action,
        };
        let mut s = vec![step(
            "ready",
            "guest b starts its servers (qpip-perf, qpip-cat, nc); guest a makes the test data"
                .to_string(),
            Action::Ready,
        )];
        let tests = self.tests();
        if self.netdev && !self.qp_only {
            s.push(step(
                "netdev",
                "both guests bring their qpip netdevs up and route each other's qpip device \
                 addresses through them"
                    .to_string(),
                Action::NetdevUp,
            ));
        }
        let host_steps = || {
            if self.host_bytes == 0 {
                return Vec::new();
            }
            let hb = human(self.host_bytes);
            let host = netns::HOST_ADDR;
            vec![
                step(
                    "host-out",
                    format!("guest a's TCP QP to a Python echo server on the lab host {host} ({hb} out and back)"),
                    Action::HostOut,
                ),
                step(
                    "host-in",
                    format!("a Python client on the lab host to a TCP QP listener in guest a ({hb} each way)"),
                    Action::HostIn,
                ),
                step(
                    "host-udp",
                    "UDP datagrams from a QP in guest a, echoed by a Python socket on the lab host"
                        .to_string(),
                    Action::HostUdp,
                ),
            ]
        };
        for round in 1..=self.rounds.max(1) {
            if self.interleave {
                // Odd rounds in the order of `nets` (QPs before sockets); even rounds the
                // other way round.
                for t in &tests {
                    let mut order = self.nets(*t);
                    if round % 2 == 0 {
                        order.reverse();
                    }
                    s.extend(order.into_iter().map(|net| self.measure(*t, net, round)));
                }
                if round == 1 {
                    s.extend(host_steps());
                }
            } else {
                s.extend(
                    tests
                        .iter()
                        .filter(|t| self.nets(**t).contains(&Net::Qp))
                        .map(|t| self.measure(*t, Net::Qp, round)),
                );
                if round == 1 && self.nbd_bytes > 0 {
                    s.push(step(
                        "nbd-qp",
                        format!(
                            "a network disk over QPs: qpip-nbd connect (a ublk device) to \
                             qpip-nbd serve in guest b, ext2, {} written, remounted and read \
                             back, SHA-256 compared",
                            human(self.nbd_bytes)
                        ),
                        Action::Nbd,
                    ));
                }
                if round == 1 {
                    s.extend(host_steps());
                }
                // Sockets over virtio-net, then (when the plan has them) over the qpip
                // netdev, then QPs on IPv4, then RDMA's perftest on qpip0 and on rxe.
                for net in [Net::Sockets, Net::Netdev, Net::Qp4, Net::Verbs, Net::Rxe] {
                    s.extend(
                        tests
                            .iter()
                            .filter(|t| self.nets(**t).contains(&net))
                            .map(|t| self.measure(*t, net, round)),
                    );
                }
            }
            if self.overhead_messages > 0 {
                let round_note = self.round_note(round);
                s.push(step(
                    &self.tag("overhead", round),
                    format!(
                        "{round_note}host overhead per message in guest a, QPs vs kernel sockets on \
                         loopback (qpip-overhead, {} messages each, 1 ms apart, then {} µs)",
                        self.overhead_messages,
                        scripts::OVERHEAD_SPIN_US
                    ),
                    Action::Overhead { round },
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests;
