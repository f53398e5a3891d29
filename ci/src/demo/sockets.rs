//! The bench's sockets part: unmodified socket programs between guests a (the server) and
//! b (the client), with their TCP sockets on the qpip device through the preload library
//! (`qpip-run`, docs/sockets.md) against the same programs on kernel sockets through
//! virtio-net. Guest a serves with nginx (`lab-nginx`: two workers, epoll, open-file cache, files from
//! `/tmp/www`), `iperf3 -s` and `sockperf sr`; guest b runs against them, each for
//! [`SocketsFacts::secs`]: wrk with keep-alive at each of [`SocketsFacts::wrk_sizes`]
//! (`--latency`: its percentiles), `iperf3 -J` (one TCP stream) and `sockperf pp` (a TCP
//! ping-pong, IPv4: Debian's sockperf has no IPv6).
//!
//! Four ways to connect them ([`Variant`]), all in every round, taking turns to go first:
//! - `kernel`: both ends on kernel sockets, to guest a's virtio-net address (the baseline);
//! - `server`: the servers under `qpip-run`, the client on kernel sockets to guest a's
//!   qpip device address: guest b's kernel TCP goes out through its qpip netdev
//!   (`lab-qpip-net` routes the lab's device addresses through `qpip0`), and guest a's
//!   device takes the connections on its QP listeners;
//! - `client`: the client under `qpip-run`, its connections the device's, to the servers on
//!   guest a's kernel sockets, which get them through guest a's qpip netdev;
//! - `both`: both ends under `qpip-run`.
//!
//! Guest a drives (its output is what the watcher reads): for each program run it starts
//! the server afresh (so that the server's counters are the run's), asks guest b to run the
//! client
//! (`/lab/run.K`: the command; guest b answers with `/lab/ran.K`, its exit status, after
//! copying its output to `/lab/out.K`). Each run is a CPU window of [`super::scripts::STEPS_A`]
//! (both guests' `/proc/stat` and the host's CPU of QEMU and qpipd at its edges: guest b
//! answers the marks in the same loop that runs the clients, so a mark never falls inside
//! a run), and guest a reports it as `@sock.NAME=T0 T1|IRQA0|IRQA1|IRQB0|IRQB1` (its uptime
//! at the edges; the interrupts of each guest's qpip device and virtio-net NIC, `QPIP
//! VIRTIO`), then the client's output line by line as `@out.NAME=LINE` and, when the client
//! ran under `qpip-run`, its preload counters as `@pre.NAME=LINE`; then the server stops
//! and its counters follow as `@pre.srv-NAME=LINE`.
//! NAME is `wrk1k-kernel`, `iperf3-both`, ..., with `.ROUND` in a run of several rounds
//! (see [`super::results::sockets`]).
//!
//! A variant whose preloaded end carried none of its connections on the device (the
//! preload's `connect_qpip` of the client, `accept_qpip` of each server) fails its step:
//! its figures would be the kernel's under another name.

use super::pass::{run_pass, PassSpec};
use super::results::sockets::{SocketsFacts, SocketsRun};
use super::scripts::{COMMON, STEPS_A};
use super::storage::IRQS;
use super::{DemoError, Step};
use crate::netns;
use std::time::Duration;

/// Guest a's server ports: nginx's (lab-nginx's configuration), iperf3's and sockperf's.
pub const NGINX_PORT: u16 = 8080;
pub const IPERF3_PORT: u16 = 5201;
pub const SOCKPERF_PORT: u16 = 11111;

/// Which ends of the connections are on the qpip device (under `qpip-run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Both on kernel sockets through virtio-net: the baseline.
    Kernel,
    /// The server under `qpip-run`; the client's kernel TCP through its qpip netdev.
    Server,
    /// The client under `qpip-run`; the server's kernel TCP through its qpip netdev.
    Client,
    /// Both under `qpip-run`.
    Both,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Kernel,
        Variant::Server,
        Variant::Client,
        Variant::Both,
    ];

    /// Its name in measurement names and tables.
    pub fn id(self) -> &'static str {
        match self {
            Variant::Kernel => "kernel",
            Variant::Server => "server",
            Variant::Client => "client",
            Variant::Both => "both",
        }
    }

    pub fn server_preloaded(self) -> bool {
        matches!(self, Variant::Server | Variant::Both)
    }

    pub fn client_preloaded(self) -> bool {
        matches!(self, Variant::Client | Variant::Both)
    }

    /// What it is, for the progress lines and the report.
    pub fn what(self) -> &'static str {
        match self {
            Variant::Kernel => "both ends on kernel sockets through virtio-net",
            Variant::Server => {
                "the servers on QPs (qpip-run), the client on kernel sockets through its qpip netdev"
            }
            Variant::Client => {
                "the client on QPs (qpip-run), the servers on kernel sockets through their qpip netdev"
            }
            Variant::Both => "both ends on QPs (qpip-run)",
        }
    }

    /// Guest a's addresses the client connects to, IPv6 and IPv4: its virtio-net NIC's
    /// for the baseline, its qpip device's for the others.
    fn server_addrs(self) -> (String, String) {
        if self == Variant::Kernel {
            (netns::virtio_addr(1), netns::virtio_addr4(1))
        } else {
            (netns::device_addr(1), netns::device_addr4(1))
        }
    }
}

/// A program run of guest b against guest a's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// wrk against nginx, fetching a file of this many bytes with keep-alive.
    Wrk(u64),
    /// iperf3, one TCP stream from guest b to guest a.
    Iperf3,
    /// sockperf's TCP ping-pong.
    Sockperf,
}

impl Workload {
    /// Guest a's server of it.
    pub fn server(self) -> &'static str {
        match self {
            Workload::Wrk(_) => "nginx",
            Workload::Iperf3 => "iperf3",
            Workload::Sockperf => "sockperf",
        }
    }

    /// The first half of its measurement names (`wrk1k` in `wrk1k-both`), and for wrk the
    /// name of the file it fetches.
    pub fn id(self) -> String {
        match self {
            Workload::Wrk(size) => format!("wrk{}", size_name(size)),
            Workload::Iperf3 => "iperf3".into(),
            Workload::Sockperf => "sockperf".into(),
        }
    }
}

/// `1k` for 1024 bytes, `64k`, `1m`; else the bytes.
pub fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}m", bytes >> 20)
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{}k", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

/// How much the sockets part measures.
#[derive(Debug, Clone)]
pub struct SocketsPlan {
    /// What it measures, which its report states.
    pub facts: SocketsFacts,
    /// Limit for one round (the first includes the boot).
    pub round_timeout: Duration,
    pub layout: crate::QpipdLayout,
    pub qpipd_args: Vec<String>,
}

impl SocketsPlan {
    /// The bench's: 10 s per run, wrk with 2 threads and 8 connections at 1 KiB and
    /// 64 KiB, three rounds.
    pub fn bench() -> SocketsPlan {
        SocketsPlan {
            facts: SocketsFacts {
                rounds: 3,
                secs: 10,
                wrk_threads: 2,
                wrk_connections: 8,
                wrk_sizes: vec![1 << 10, 64 << 10],
                memory_mib: 512,
            },
            round_timeout: Duration::from_secs(900),
            layout: crate::QpipdLayout::Adapter,
            qpipd_args: Vec::new(),
        }
    }

    /// Limit for the whole run, boot to power-off.
    pub fn limit(&self) -> Duration {
        self.round_timeout * self.facts.rounds.max(1)
    }

    /// The most one client run may take, s, before guest b stops it (a stalled program
    /// must not hold the run to its limit).
    pub fn run_limit_s(&self) -> u64 {
        u64::from(self.facts.secs) * 3 + 60
    }

    /// `base` in round `round`: `base.ROUND` in a run of several rounds.
    pub fn tag(&self, base: &str, round: u32) -> String {
        if self.facts.rounds > 1 {
            format!("{base}.{round}")
        } else {
            base.to_string()
        }
    }

    /// The program runs of a variant, in order.
    pub fn workloads(&self) -> Vec<Workload> {
        let mut v: Vec<Workload> = self
            .facts
            .wrk_sizes
            .iter()
            .map(|s| Workload::Wrk(*s))
            .collect();
        v.extend([Workload::Iperf3, Workload::Sockperf]);
        v
    }

    /// The variants of round `round` in the order they run: each round starts one further
    /// on, so each variant goes first in turn.
    pub fn order(&self, round: u32) -> Vec<Variant> {
        let mut v = Variant::ALL.to_vec();
        let n = v.len();
        v.rotate_left((round.max(1) as usize - 1) % n);
        v
    }

    /// The id of the step of `variant` in round `round`: `sockets-both.2`.
    pub fn step_id(&self, variant: Variant, round: u32) -> String {
        self.tag(&format!("sockets-{}", variant.id()), round)
    }

    /// The steps guest a runs, in order: getting ready, then every variant in every round.
    pub fn steps(&self) -> Vec<Step> {
        let f = &self.facts;
        let mut s = vec![Step {
            id: "sockets-ready".into(),
            what: "both guests put the socket programs on the PATH (lab-extras) and route the \
                   lab's device addresses through qpip0 (lab-qpip-net); guest a makes the files \
                   nginx serves"
                .into(),
            action: super::Action::Ready,
        }];
        let sizes: Vec<String> = f.wrk_sizes.iter().map(|b| super::human(*b)).collect();
        for round in 1..=f.rounds.max(1) {
            let note = if f.rounds > 1 {
                format!("round {round}/{}: ", f.rounds)
            } else {
                String::new()
            };
            for variant in self.order(round) {
                s.push(Step {
                    id: self.step_id(variant, round),
                    what: format!(
                        "{note}{}: wrk against nginx ({}), iperf3, sockperf ping-pong, {} s each",
                        variant.what(),
                        sizes.join(" and "),
                        f.secs
                    ),
                    // (The watcher reads only a step's id and description.)
                    action: super::Action::Ready,
                });
            }
        }
        s
    }

    /// Guest b's command line of `workload` against the servers of `variant` (without
    /// `qpip-run`, which guest a's `client` helper adds).
    fn client_cmd(&self, workload: Workload, variant: Variant) -> String {
        let f = &self.facts;
        let (a6, a4) = variant.server_addrs();
        match workload {
            Workload::Wrk(size) => format!(
                "wrk -t {} -c {} -d {}s --latency http://[{a6}]:{NGINX_PORT}/{}",
                f.wrk_threads,
                f.wrk_connections,
                f.secs,
                size_name(size)
            ),
            Workload::Iperf3 => format!("iperf3 -c {a6} -p {IPERF3_PORT} -t {} -J", f.secs),
            Workload::Sockperf => {
                format!("sockperf pp --tcp -i {a4} -p {SOCKPERF_PORT} -t {}", f.secs)
            }
        }
    }
}

/// The preload counters KEY of the `qpip-preload[...]: stats ...` lines in FILE, summed:
/// `pre_sum FILE KEY` (0 when there is no file).
const PRE_SUM: &str = r#"
pre_sum() {
    awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) s += substr($i, length(k) + 2) }
        END { print s + 0 }' "$1" 2>/dev/null || echo 0
}
"#;

/// Guest b: ready, then the CPU marks' answers and the client runs guest a asks for, in
/// the order asked, until guest a is done.
pub fn guest_b(plan: &SocketsPlan) -> String {
    let wait = plan.limit().as_secs() * 10 + 600;
    let run_limit = plan.run_limit_s();
    format!(
        r#"{COMMON}{IRQS}
bfail() {{ s=$1; shift; echo "@fail=$s: $*"; touch /lab/b-failed; exit 1; }}
lab-extras > /tmp/extras 2>&1 || bfail sockets-ready "lab-extras: $(oneline /tmp/extras)"
lab-qpip-net > /tmp/net 2>&1 || bfail sockets-ready "lab-qpip-net: $(oneline /tmp/net)"
touch /lab/b-ready
# A CPU mark N (/lab/cpu-mark.N): the first line of /proc/stat and the interrupts so far,
# in /lab/cpu-mark.N.b. A run K (/lab/run.K, one line: the command): its output in
# /lab/out.K, then its exit status in /lab/ran.K; at most {run_limit} s.
n=1; k=1; t={wait}
until [ -e /lab/a-done ]; do
    if [ -e /lab/cpu-mark.$n ]; then
        read -r l < /proc/stat
        printf '%s\n%s\n' "$l" "$(irqs)" > /lab/.cpu-mark.$n.b
        mv /lab/.cpu-mark.$n.b /lab/cpu-mark.$n.b
        n=$((n + 1))
        continue
    fi
    if [ -e /lab/run.$k ]; then
        read -r cmd < /lab/run.$k
        timeout {run_limit} sh -c "$cmd" > /tmp/out 2>&1
        st=$?
        cp /tmp/out /lab/out.$k
        echo $st > /lab/.ran.$k
        mv /lab/.ran.$k /lab/ran.$k
        k=$((k + 1))
        continue
    fi
    t=$((t - 1)); [ "$t" -gt 0 ] || exit 1
    nap
done
"#
    )
}

/// Guest a: the servers and every step in order.
pub fn guest_a(plan: &SocketsPlan) -> String {
    let f = &plan.facts;
    let wait = plan.run_limit_s() + 30;
    let mut s = format!(
        r#"{COMMON}{IRQS}{PRE_SUM}
trap 'touch /lab/a-done' EXIT
{STEPS_A}
# listens PORT: something listens on TCP PORT, IPv6 or IPv4.
listens() {{ netstat -ltn 2>/dev/null | grep -q "[:.]$1 "; }}
# serve PROG PRE: starts server PROG (nginx, iperf3 or sockperf; under qpip-run, its
# preload counters to /tmp/pre.srv, when PRE is 1) and waits until it listens.
serve() {{
    p=$1; pre=$2; rm -f /tmp/pre.srv
    case $p in
        nginx) set -- lab-nginx; port={NGINX_PORT} ;;
        iperf3) set -- iperf3 -s -p {IPERF3_PORT}; port={IPERF3_PORT} ;;
        *) set -- sockperf sr --tcp -i 0.0.0.0 -p {SOCKPERF_PORT}; port={SOCKPERF_PORT} ;;
    esac
    if [ "$pre" = 1 ]; then
        QPIP_PRELOAD_STATS=/tmp/pre.srv qpip-run "$@" > /tmp/srv.out 2>&1 &
    else
        "$@" > /tmp/srv.out 2>&1 &
    fi
    SRV=$!
    until_true 60 listens $port || fail "$p does not listen on port $port: $(oneline /tmp/srv.out)"
}}
# unserve PROG NAME PRE: stops server PROG (from the signal it ends cleanly on) and reports
# its preload counters as @pre.srv-NAME; with PRE 1, it must have accepted connections on
# the device.
unserve() {{
    case $1 in nginx) sig=QUIT ;; iperf3) sig=TERM ;; *) sig=INT ;; esac
    kill -$sig $SRV 2> /dev/null; wait $SRV
    [ -e /tmp/pre.srv ] && sed "s/^/@pre.srv-$2=/" /tmp/pre.srv
    if [ "$3" = 1 ] && [ "$(pre_sum /tmp/pre.srv accept_qpip)" = 0 ]; then
        fail "$1 under qpip-run accepted no connection on the device: $(oneline /tmp/pre.srv 2>/dev/null)"
    fi
}}
# client NAME PRE CMD: guest b runs CMD (under qpip-run when PRE is 1) in the CPU window
# NAME; @sock.NAME=T0 T1|IRQA0|IRQA1|IRQB0|IRQB1, then its output as @out.NAME lines and
# its preload counters as @pre.NAME lines.
K=0
client() {{
    name=$1; pre=$2; shift 2
    K=$((K + 1))
    cmd="$*"
    [ "$pre" = 1 ] && cmd="QPIP_PRELOAD_STATS=/lab/pre.$K qpip-run $cmd"
    cpu_start
    IRQ_B0=$(sed -n 2p /lab/cpu-mark.$MARK.b)
    IRQ_A0=$(irqs); T0=$(now)
    echo "$cmd" > /lab/.run.$K
    mv /lab/.run.$K /lab/run.$K
    await ran.$K {wait}
    T1=$(now); IRQ_A1=$(irqs)
    cpu_end $name
    IRQ_B1=$(sed -n 2p /lab/cpu-mark.$MARK.b)
    echo "@sock.$name=$T0 $T1|$IRQ_A0|$IRQ_A1|$IRQ_B0|$IRQ_B1"
    sed "s/^/@out.$name=/" /lab/out.$K
    [ -e /lab/pre.$K ] && sed "s/^/@pre.$name=/" /lab/pre.$K
    st=$(cat /lab/ran.$K)
    [ "$st" = 0 ] || fail "guest b: $* ended with status $st: $(tail -n 3 /lab/out.$K | tr '\n' ' ')"
    if [ "$pre" = 1 ] && [ "$(pre_sum /lab/pre.$K connect_qpip)" = 0 ]; then
        fail "guest b: $* under qpip-run made no connection on the device: $(oneline /lab/pre.$K 2>/dev/null)"
    fi
}}
"#
    );
    let mut files = String::new();
    for size in &f.wrk_sizes {
        files += &format!(
            "head -c {size} /dev/urandom > /tmp/www/{} || fail \"cannot make /tmp/www/{}\"\n",
            size_name(*size),
            size_name(*size)
        );
    }
    s += &format!(
        r#"
step sockets-ready
lab-extras > /tmp/extras 2>&1 || fail "lab-extras: $(oneline /tmp/extras)"
command -v qpip-run > /dev/null || fail "no qpip-run in the guest image"
for p in nginx wrk iperf3 sockperf; do
    command -v $p > /dev/null || fail "no $p in the extras share (images/sockets-extras.sh adds it)"
done
lab-qpip-net > /tmp/net 2>&1 || fail "lab-qpip-net: $(oneline /tmp/net)"
mkdir -p /tmp/www
{files}await b-ready 300
ok
"#
    );
    for round in 1..=f.rounds.max(1) {
        for variant in plan.order(round) {
            let (sp, cp) = (
                u8::from(variant.server_preloaded()),
                u8::from(variant.client_preloaded()),
            );
            let mut body = String::new();
            for w in plan.workloads() {
                let name = plan.tag(&format!("{}-{}", w.id(), variant.id()), round);
                let server = w.server();
                body += &format!(
                    "serve {server} {sp}\nclient {name} {cp} {}\nunserve {server} {name} {sp}\n",
                    plan.client_cmd(w, variant)
                );
            }
            s += &format!("\nstep {}\n{body}ok\n", plan.step_id(variant, round));
        }
    }
    s
}

/// Boots guests a and b in namespace `netns` and runs the sockets part; its figures, every
/// round's, and its wall time.
pub fn run(
    plan: &SocketsPlan,
    netns: &str,
    verbose: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(SocketsRun, Duration), DemoError> {
    let spec = PassSpec {
        guests: "guests a (servers) and b (clients)",
        guest_a: guest_a(plan),
        guest_b: guest_b(plan),
        steps: plan.steps(),
        rounds: plan.facts.rounds,
        memory_mib: plan.facts.memory_mib,
        limit: plan.limit(),
        layout: plan.layout,
        qpipd_args: &plan.qpipd_args,
    };
    let out = run_pass(spec, netns, verbose, progress)?;
    let run = SocketsRun::from_lines(&plan.facts, &out.lines_a, &out.measurements)
        .map_err(|e| out.fail(e))?;
    Ok((run, out.elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_take_turns_to_go_first_and_run_every_program() {
        let plan = SocketsPlan::bench();
        let ids: Vec<String> = plan.steps().into_iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), 1 + 4 * 3);
        assert_eq!(
            ids[..6],
            [
                "sockets-ready",
                "sockets-kernel.1",
                "sockets-server.1",
                "sockets-client.1",
                "sockets-both.1",
                "sockets-server.2"
            ]
        );
        let a = guest_a(&plan);
        for (i, id) in ids.iter().enumerate() {
            let at = a.find(&format!("\nstep {id}\n")).expect(id);
            if i > 0 {
                assert!(at > a.find(&format!("\nstep {}\n", ids[i - 1])).unwrap());
            }
        }
        assert!(
            a.contains(
                "\nstep sockets-kernel.1\nserve nginx 0\n\
                 client wrk1k-kernel.1 0 wrk -t 2 -c 8 -d 10s --latency http://[fd51:5050::2:1]:8080/1k\n\
                 unserve nginx wrk1k-kernel.1 0\nserve nginx 0\n\
                 client wrk64k-kernel.1 0 wrk -t 2 -c 8 -d 10s --latency http://[fd51:5050::2:1]:8080/64k\n\
                 unserve nginx wrk64k-kernel.1 0\nserve iperf3 0\n\
                 client iperf3-kernel.1 0 iperf3 -c fd51:5050::2:1 -p 5201 -t 10 -J\n\
                 unserve iperf3 iperf3-kernel.1 0\nserve sockperf 0\n\
                 client sockperf-kernel.1 0 sockperf pp --tcp -i 198.18.0.201 -p 11111 -t 10\n\
                 unserve sockperf sockperf-kernel.1 0\nok\n"
            ),
            "{a}"
        );
        // The server on QPs: the client on kernel sockets to the device's address.
        assert!(a.contains("\nstep sockets-server.2\nserve nginx 1\nclient wrk1k-server.2 0 wrk -t 2 -c 8 -d 10s --latency http://[fd51:5050::1:1]:8080/1k\n"), "{a}");
        assert!(
            a.contains("client sockperf-client.3 1 sockperf pp --tcp -i 198.18.0.101 "),
            "{a}"
        );
        assert!(
            a.contains("\nunserve sockperf sockperf-both.3 1\nok\n"),
            "{a}"
        );
        assert!(
            a.contains("head -c 65536 /dev/urandom > /tmp/www/64k"),
            "{a}"
        );
        // One round: names without round numbers.
        let mut one = SocketsPlan::bench();
        one.facts.rounds = 1;
        assert!(guest_a(&one).contains("\nclient iperf3-both 1 iperf3 "));
    }

    #[test]
    fn the_sockets_scripts_are_valid_shell() {
        let plan = SocketsPlan::bench();
        for script in [guest_a(&plan), guest_b(&plan)] {
            crate::demo::assert_valid_shell(&script);
        }
    }

    #[test]
    fn sizes_are_named_as_the_files() {
        assert_eq!(size_name(1024), "1k");
        assert_eq!(size_name(65536), "64k");
        assert_eq!(size_name(1 << 20), "1m");
        assert_eq!(size_name(1000), "1000");
        assert_eq!(Workload::Wrk(65536).id(), "wrk64k");
    }
}
