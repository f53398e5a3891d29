//! What the traffic tests share (`e2e.rs`, `ipv4.rs`): the shell helpers of their guest
//! scripts, a two-guest lab on the adapter, and the checks of what `qpip-e2e` and `qpip-cat`
//! report — the same bytes on both ends, complete ping-pongs — with the host side's
//! independent SHA-256 and its plain-socket accept.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qpip_lab::{unique_netns, GuestSpec, LabHost, LabOutcome, LabSpec, Network, QpipdLayout};

use qpip_lab::payload::pattern;

use super::Report;

/// Bytes sent and their SHA-256, or why not.
pub type SentOrWhy = Result<(usize, String), String>;

/// The shell helpers of this file's guest scripts (after common's `kv`, `await`, `run`).
///  serve TAG CMD...    starts a server CMD in the background, waits until it says it
///                      listens, then touches /lab/TAG (the client side waits for that)
///  finish TAG          waits for TAG's server, reports like `run`
///  cat_listen TAG CMD  starts a `qpip-cat -v ... -l` in the background (stdout to
///                      /tmp/TAG.out), waits until it listens, touches /lab/TAG
///  cat_wait TAG [KEY]  waits for it (up to 300 s): `@KEY.status` and `@KEY.err` (the end
///                      of its stderr), KEY being TAG unless given; one still running
///                      then is reported (`@KEY.hang`: its threads' kernel stacks) and
///                      killed, so a hang fails its step with evidence, not the guest's
///                      time limit
///  digest TAG FILE     `@TAG.sha` and `@TAG.bytes` of FILE
///  counters TAG        `@TAG.NAME` for the TCP and drop counters of /sys/class/qpip/qpip0
///  contexts            the driver's open contexts (sysfs `contexts`)
///  A, B                the qpip device addresses of guests a and b (BK: b's virtio-net)
///  host_exchange S ADDR PORT
///                      with the lab host's plain sockets, as its side expects: a stream
///                      in on PORT (h2gS), one out to ADDR PORT+1 (g2hS), a UDP echo on
///                      PORT+2 (hudpS)
pub const HELPERS: &str = r#"
A=fd51:5050::1:1; B=fd51:5050::1:2; BK=fd51:5050::2:2
serve() {
    t=$1; shift
    "$@" >/tmp/srv.$t 2>&1 &
    echo $! >/tmp/srv.$t.pid
    i=0; until grep -q listening /tmp/srv.$t; do i=$((i+1)); [ $i -lt 1200 ] || break; sleep 0.1; done
    touch /lab/$t
}
finish() { t=$1; wait "$(cat /tmp/srv.$t.pid)"; st=$?; sed "s/^@/@$t./" /tmp/srv.$t; kv $t.status $st; }
cat_listen() {
    t=$1; shift
    "$@" >/tmp/$t.out 2>/tmp/$t.err &
    echo $! >/tmp/$t.pid
    i=0; until grep -q listening /tmp/$t.err; do i=$((i+1)); [ $i -lt 1200 ] || break; sleep 0.1; done
    touch /lab/$t
}
cat_wait() {
    t=$1; k=${2:-$1}; pid=$(cat /tmp/$t.pid)
    (
        sleep 300
        kill -0 $pid 2>/dev/null || exit 0
        for th in /proc/$pid/task/*; do
            echo "thread ${th##*/} in $(cat $th/wchan 2>/dev/null): $(head -n 8 $th/stack 2>/dev/null | tr '\n' ' ')"
        done > /tmp/$t.hang
        kill $pid
    ) &
    wd=$!
    wait $pid; st=$?
    kill $wd 2>/dev/null
    kv $k.status $st
    kv $k.err "$(tail -n 3 /tmp/$t.err | tr '\n' ' ')"
    [ -s /tmp/$t.hang ] && kv $k.hang "$(tr '\n' ' ' < /tmp/$t.hang)"
}
digest() { kv "$1.sha" "$(sha256sum < "$2" | cut -d' ' -f1)"; kv "$1.bytes" "$(wc -c < "$2")"; }
counters() {
    for c in tcp_retrans_segs tcp_fast_retransmits tcp_rto_timeouts tcp_ooo_segs tcp_dup_segs \
             tcp_estab_resets net_drop_bad_checksum net_drop_malformed net_rx_dropped; do
        kv "$1.$c" "$(cat /sys/class/qpip/qpip0/counters/$c 2>/dev/null || echo missing)"
    done
}
contexts() { cat /sys/class/qpip/qpip0/contexts 2>/dev/null || echo missing; }
host_exchange() {
    hx=$1; hxp=$3
    cat_listen h2g$hx qpip-cat -v --stream -w 300 -l $hxp
    wait "$(cat /tmp/h2g$hx.pid)"; kv h2g$hx.status $?; digest h2g$hx /tmp/h2g$hx.out
    head -c 1000000 /dev/urandom > /tmp/g2h$hx; digest g2h$hx.in /tmp/g2h$hx
    await g2h$hx; qpip-cat --stream -w 60 $2 $((hxp + 1)) < /tmp/g2h$hx; kv g2h$hx.status $?
    serve hudp$hx qpip-e2e echo -u --port $((hxp + 2)) -w 300; finish hudp$hx
}
"#;

pub fn guest(name: &str, script: &str, timeout_s: u64, qpipd_args: &[&str]) -> GuestSpec {
    let mut g = super::lab_guest(
        name,
        super::script(HELPERS, script),
        Duration::from_secs(timeout_s),
    );
    g.vm.qpipd_args = vec![qpipd_args.iter().map(|s| s.to_string()).collect()];
    g
}

pub fn lab<R: Send>(
    guests: Vec<GuestSpec>,
    layout: QpipdLayout,
    host: impl FnOnce(&LabHost) -> R + Send,
) -> LabOutcome<R> {
    let spec = LabSpec {
        guests,
        network: Network::Lab(unique_netns("qpip-e2e")),
        layout,
    };
    super::lab(&spec, host)
}

/// `bytes=N msgs=M sha=H` of a report value, as (bytes, msgs, sha).
pub fn tally(v: &str) -> (u64, u64, String) {
    let field = |k: &str| {
        v.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {v:?}"))
            .to_string()
    };
    (
        field("bytes=").parse().unwrap(),
        field("msgs=").parse().unwrap(),
        field("sha="),
    )
}

/// The per-connection (bytes, msgs, sha) of a sink or sender report, with its state, sorted.
pub fn conns(rep: &Report, key: &str) -> Vec<(String, (u64, u64, String))> {
    let mut v: Vec<_> = rep
        .all(key)
        .into_iter()
        .map(|l| (l.split(' ').next().unwrap().to_string(), tally(l)))
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1));
    v
}

/// Asserts that sender `tx` (tag in report `a`) and sink `rx` (in report `b`) ended
/// cleanly with the same bytes on every connection. `msgs`: message framing, where the
/// message counts must match too (a stream's receives are cut anywhere).
pub fn assert_same_bytes(a: &Report, tx: &str, b: &Report, rx: &str, n: usize, msgs: bool) {
    let ctx = || format!("{}\n=== receiver:\n{}", a.context(), b.context());
    assert_eq!(
        a.get(&format!("{tx}.status")),
        "0",
        "{tx}: sender failed\n{}",
        ctx()
    );
    assert_eq!(
        b.get(&format!("{rx}.status")),
        "0",
        "{rx}: receiver failed\n{}",
        ctx()
    );
    let sent = conns(a, &format!("{tx}.send.conn"));
    let got = conns(b, &format!("{rx}.sink.conn"));
    assert_eq!(sent.len(), n, "{tx}: connections sent\n{}", ctx());
    assert_eq!(got.len(), n, "{rx}: connections received\n{}", ctx());
    let strip = |v: &[(String, (u64, u64, String))]| -> Vec<(String, u64, u64, String)> {
        let mut v: Vec<_> = v
            .iter()
            .map(|(st, (b, m, s))| (st.clone(), *b, if msgs { *m } else { 0 }, s.clone()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        strip(&sent),
        strip(&got),
        "{tx} → {rx}: the bytes differ\n{}",
        ctx()
    );
    assert!(sent.iter().all(|(st, _)| st == "clean"), "{}", ctx());
}

/// Asserts a ping run compared every echo and got each back intact.
pub fn assert_ping(a: &Report, tag: &str, iters: u64) {
    assert_eq!(
        a.get(&format!("{tag}.status")),
        "0",
        "{tag}\n{}",
        a.context()
    );
    assert_eq!(
        a.num(&format!("{tag}.ping.count")),
        iters,
        "{tag}\n{}",
        a.context()
    );
    assert_eq!(
        a.num(&format!("{tag}.ping.mismatch")),
        0,
        "{tag}\n{}",
        a.context()
    );
    let (sent, got) = (
        tally(a.get(&format!("{tag}.ping.sent"))),
        tally(a.get(&format!("{tag}.ping.got"))),
    );
    assert_eq!(
        sent,
        got,
        "{tag}: echoes differ from what was sent\n{}",
        a.context()
    );
}

pub fn ping_line(a: &Report, tag: &str) -> String {
    format!(
        "{} B, rtt µs {}, lost {}",
        a.get(&format!("{tag}.ping.size")),
        a.get(&format!("{tag}.ping.rtt_us")),
        a.get(&format!("{tag}.ping.lost"))
    )
}

/// SHA-256 by the host's `sha256sum`, an implementation independent of the guest tool's.
pub fn sha256(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let w = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().expect("sha256sum");
    w.join().unwrap().expect("feed sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

pub fn addr(s: &str, port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(s.parse::<Ipv6Addr>().unwrap(), port, 0, 0)
}

/// `qpip-cat` as built for the guest image: a static x86-64 binary, so it runs on the lab
/// host as well, where there is no device and it uses the software provider.
pub fn host_qpip_cat() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| qpip_lab::paths::root().join("target"));
    let p = target.join("x86_64-unknown-linux-gnu/guest/qpip-cat");
    assert!(
        p.exists(),
        "{} is missing: images/guest.sh builds it (./qpip setup)",
        p.display()
    );
    p
}

/// The first connection `l` accepts within `limit`, blocking.
pub fn accept_within(l: &TcpListener, limit: Duration) -> Result<TcpStream, String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + limit;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(300)))
                    .map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err("the guest never connected".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Guests a and b, each running its script (with [`HELPERS`]) for at most `timeout_s`, as
/// functions of the adapter on the lab network, while the lab host runs `host`.
pub fn pair_lab<R: Send>(
    a_script: &str,
    b_script: &str,
    timeout_s: u64,
    host: impl FnOnce(&LabHost) -> R + Send,
) -> LabOutcome<R> {
    lab(
        vec![
            guest("a", a_script, timeout_s, &[]),
            guest("b", b_script, timeout_s, &[]),
        ],
        QpipdLayout::Adapter,
        host,
    )
}

/// Guest a's and guest b's reports of a two-guest lab, once both ended well (a status
/// other than 0 fails the test with that guest's report).
pub fn pair_reports<R>(out: &LabOutcome<R>) -> (Report<'_>, Report<'_>) {
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    assert_eq!(ga.status, 0, "guest a failed\n{}", a.context());
    assert_eq!(gb.status, 0, "guest b failed\n{}", b.context());
    (a, b)
}

/// In the lab's namespace, a plain TCP socket connects to `to`, sends `data`, shuts its
/// sending side and reads until the guest closes too.
pub fn host_sends(host: &LabHost, to: SocketAddr, data: &[u8]) -> Result<(), String> {
    host.in_netns(|| -> std::io::Result<()> {
        let mut s = TcpStream::connect(to)?;
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        s.write_all(data)?;
        s.shutdown(std::net::Shutdown::Write)?;
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)?;
        // A receiver with nothing to send closes its side at once, so its FIN says nothing
        // of the data: done only once the peer acknowledged every byte and the FIN (what
        // the host does next, a route taken away, must not cut the stream's tail).
        all_acknowledged(&s, Duration::from_secs(300))
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("to {to}: {e}"))
}

/// Waits until `s` has nothing unacknowledged (its send queue, `SIOCOUTQ`, empty), up to
/// `limit`.
pub fn all_acknowledged(s: &TcpStream, limit: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let start = Instant::now();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: SIOCOUTQ on an open TCP socket writes one int to `queued`.
        if unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if queued == 0 {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{queued} bytes still unacknowledged after {limit:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// In the lab's namespace, a plain TCP listener on `bind`; `ready` is signalled to the
/// guests once it listens; the bytes of the first connection, to its end: their length
/// and SHA-256.
pub fn host_receives(host: &LabHost, bind: &str, ready: &str) -> SentOrWhy {
    host.in_netns(|| -> SentOrWhy {
        let l = TcpListener::bind(bind).map_err(|e| e.to_string())?;
        host.signal(ready).map_err(|e| e.to_string())?;
        let mut s = accept_within(&l, Duration::from_secs(300))?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|e| e.to_string())?;
        Ok((got.len(), sha256(&got)))
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r)
}

/// In the lab's namespace, a plain UDP socket bound to `bind` sends `count` datagrams of
/// 1000 bytes (patterns from `seed`) to an echo at `to`, one at a time: (echoed intact,
/// lost); a wrong echo is an error.
pub fn host_echoes(
    host: &LabHost,
    bind: &str,
    to: SocketAddr,
    count: u64,
    seed: u64,
) -> Result<(u32, u32), String> {
    host.in_netns(|| -> Result<(u32, u32), String> {
        let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let (mut ok, mut lost) = (0, 0);
        let mut buf = vec![0u8; 2048];
        for i in 0..count {
            let msg = pattern(1000, seed + i);
            s.send_to(&msg, to).map_err(|e| e.to_string())?;
            match s.recv_from(&mut buf) {
                Ok((n, _)) if buf[..n] == msg[..] => ok += 1,
                Ok((n, from)) => return Err(format!("datagram {i}: {n} bytes from {from} differ")),
                Err(_) => lost += 1,
            }
        }
        Ok((ok, lost))
    })
    .map_err(|e| e.to_string())?
}

/// What the host side of a guest's `host_exchange S ADDR PORT` saw ([`host_exchange_side`]).
#[derive(Debug)]
pub struct ExchangeView {
    /// The SHA-256 of the stream the host sent.
    pub h2g_sha: String,
    /// The stream host → guest (PORT).
    pub h2g: Result<(), String>,
    /// The stream guest → host (PORT+1): its length and SHA-256.
    pub g2h: SentOrWhy,
    /// The UDP echo (PORT+2): (echoed intact, lost) of 30.
    pub udp: Result<(u32, u32), String>,
}

/// The host side of a guest's `host_exchange S ADDR PORT` with the guest's device at
/// `dev`, run on `host` (the lab host, or [`LabHost::far`]): 700,000 bytes of pattern
/// `seed` to PORT, a listener on PORT+1, then 30 datagrams (patterns from `echo_seed`)
/// to the echo on PORT+2.
pub fn host_exchange_side(
    host: &LabHost,
    dev: IpAddr,
    port: u16,
    s: &str,
    (seed, echo_seed): (u64, u64),
) -> ExchangeView {
    let long = Duration::from_secs(600);
    let to = |p| SocketAddr::new(dev, p);
    let data = pattern(700_000, seed);
    let h2g_sha = sha256(&data);
    let h2g = host
        .wait_for(&format!("h2g{s}"), long)
        .and_then(|_| host_sends(host, to(port), &data));
    let any = if dev.is_ipv4() { "0.0.0.0" } else { "[::]" };
    let g2h = host_receives(host, &format!("{any}:{}", port + 1), &format!("g2h{s}"));
    let udp = host
        .wait_for(&format!("hudp{s}"), long)
        .and_then(|_| host_echoes(host, &format!("{any}:0"), to(port + 2), 30, echo_seed));
    ExchangeView {
        h2g_sha,
        h2g,
        g2h,
        udp,
    }
}

/// Guest report `a` of `host_exchange S ...` agrees with the host side `v`: both streams
/// whole with the same SHA-256, at least 27 of the 30 datagrams echoed. `what` names the
/// exchange in messages.
pub fn assert_exchange(a: &Report, s: &str, v: &ExchangeView, what: &str) {
    let ctx = a.context();
    assert_eq!(v.h2g, Ok(()), "{what}: host → guest\n{ctx}");
    assert_eq!(a.get(&format!("h2g{s}.status")), "0", "{ctx}");
    assert_eq!(
        a.get(&format!("h2g{s}.sha")),
        v.h2g_sha,
        "{what}: host → guest\n{ctx}"
    );
    assert_eq!(a.get(&format!("g2h{s}.status")), "0", "{ctx}");
    match &v.g2h {
        Ok((n, sha)) => {
            assert_eq!(n.to_string(), a.get(&format!("g2h{s}.in.bytes")), "{ctx}");
            assert_eq!(
                sha,
                a.get(&format!("g2h{s}.in.sha")),
                "{what}: guest → host\n{ctx}"
            );
        }
        Err(e) => panic!("{what}: guest → host: {e}\n{ctx}"),
    }
    match &v.udp {
        Ok((ok, lost)) => assert!(
            *ok >= 27 && *ok + *lost == 30,
            "{what}: UDP: {ok} echoed, {lost} lost"
        ),
        Err(e) => panic!("{what}: UDP: {e}\n{ctx}"),
    }
}
