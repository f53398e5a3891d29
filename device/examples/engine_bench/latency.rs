//! Sections (a), (b) and (c): doorbell-to-completion latency of a qpipd process with its
//! engine polling and asleep, and its CPU use while idle. The guest is the test kit's
//! [`FakeGuest`], attached to the process's socket.

use std::time::{Duration, Instant};

use qpip_testkit::{
    admin_status_name, inline_wqe, recv_wqe, Cqe, FakeGuest, Udp, CQE_OP_RECV, CQE_OP_SEND,
    CQE_STATUS_SUCCESS, IDENT_MAGIC, LOOPBACK, PAGE, REG_IDENT, STAT_DOORBELLS, STAT_KICKS,
    STAT_SEND_WQES, STAT_SLEEPS, STAT_UDP_RX, TIMEOUT, UNSPECIFIED,
};
use vfio_user::Client;

use super::daemon::Daemon;
use super::report::Report;
use super::{fail, Options};

/// Admin queue depth of the bench's driver.
const ADMIN_DEPTH: u32 = 16;
/// Depth of the QP's rings and CQs: enough that the bench never waits for room.
const DEPTH: u32 = 64;
const PORT: u16 = 7;
/// Payload of each datagram (inline in the WQE).
const PAYLOAD: usize = 32;

/// The guest of the qpipd process behind `client`, brought up as a driver does it: identity,
/// enable, admin queue.
fn guest(client: Client) -> FakeGuest {
    let mut g = FakeGuest::attach(client);
    let ident = g.reg_read(REG_IDENT);
    if ident != IDENT_MAGIC {
        fail(format!("REG_IDENT reads {ident:#x}, not a qpip function"));
    }
    g.enable();
    g.setup_admin(ADMIN_DEPTH);
    g
}

/// A context with one UDP QP bound to [::]:PORT, its send and receive CQs, and a registered
/// page of receive buffer.
fn endpoint(g: &mut FakeGuest) -> Udp {
    let ctx = g
        .create_ctx()
        .unwrap_or_else(|s| fail(format!("CREATE_CTX: {}", admin_status_name(s))));
    g.udp_endpoint_in(ctx, UNSPECIFIED, PORT, DEPTH, DEPTH, PAGE)
}

/// One sample: the time from the send doorbell to the send CQE and to the receive CQE.
struct Sample {
    send: Duration,
    recv: Duration,
    kicked: bool,
    kick: Duration,
}

/// One datagram to ourselves: post a receive, post an inline send to ::1 port PORT, time the
/// completions. `want_asleep`: wait until the engine sleeps before ringing.
fn round_trip(g: &mut FakeGuest, e: &mut Udp, seq: u64, want_asleep: bool) -> Sample {
    let recv = recv_wqe(seq, &[e.buf.sge(0, PAGE as u32, e.mr.lkey)]);
    g.post_recv(&mut e.qp, &[recv]);
    if want_asleep {
        // The receive doorbell and the CQ head updates woke the engine; wait until it has
        // published that it sleeps again.
        let deadline = Instant::now() + TIMEOUT;
        while !g.engine_sleeping(e.qp.ctx) {
            if Instant::now() > deadline {
                fail("the engine did not go to sleep within 5 s of the last doorbell");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let send = inline_wqe(seq, LOOPBACK, PORT, &[0xa5; PAYLOAD]);

    let kicks = g.kicks;
    let t0 = Instant::now();
    g.post_send(&mut e.qp, &[send]);
    let kick = t0.elapsed();
    let kicked = g.kicks != kicks;
    let deadline = t0 + TIMEOUT;
    // The CQEs are taken without publishing the CQ heads, which happens once both are in:
    // a consumer publishing on every CQE would put its doorbell writes (and the engine's
    // work on them) inside the measured time.
    let (mut send_done, mut recv_done) = (None, None);
    while send_done.is_none() || recv_done.is_none() {
        if send_done.is_none() {
            if let Some(c) = g.take_cqe(&mut e.scq) {
                send_done = Some(t0.elapsed());
                check(&c, CQE_OP_SEND, seq);
            }
        }
        if recv_done.is_none() {
            if let Some(c) = g.take_cqe(&mut e.rcq) {
                recv_done = Some(t0.elapsed());
                check(&c, CQE_OP_RECV, seq);
                if c.byte_len as usize != PAYLOAD {
                    fail(format!("received {} bytes, sent {PAYLOAD}", c.byte_len));
                }
            }
        }
        if Instant::now() > deadline {
            fail(format!(
                "no completion within {TIMEOUT:?} (send done: {}, receive done: {})",
                send_done.is_some(),
                recv_done.is_some()
            ));
        }
        std::hint::spin_loop();
    }
    g.publish_cq_head(&e.scq);
    g.publish_cq_head(&e.rcq);
    Sample {
        send: send_done.unwrap(),
        recv: recv_done.unwrap(),
        kicked,
        kick,
    }
}

fn check(c: &Cqe, op: u8, seq: u64) {
    if c.opcode != op || c.status != CQE_STATUS_SUCCESS || c.wr_id != seq {
        fail(format!(
            "unexpected completion (wanted op {op}, wr_id {seq}): {c:?}"
        ));
    }
}

struct Summary {
    n: usize,
    min: Duration,
    median: Duration,
    p99: Duration,
    max: Duration,
}

fn summary(mut v: Vec<Duration>) -> Summary {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Summary {
        n: v.len(),
        min: v[0],
        median: at(0.5),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn print_row(what: &str, s: &Summary) {
    println!(
        "    {what:<38} median {:>10}   p99 {:>10}   min {:>9}   max {:>10}   (n = {})",
        us(s.median),
        us(s.p99),
        us(s.min),
        us(s.max),
        s.n
    );
}

fn latency(g: &mut FakeGuest, e: &mut Udp, n: usize, asleep: bool, seq: &mut u64) -> Vec<Sample> {
    // A few unmeasured rounds first: page faults, caches.
    for _ in 0..20.min(n) {
        *seq += 1;
        round_trip(g, e, *seq, asleep);
    }
    (0..n)
        .map(|_| {
            *seq += 1;
            round_trip(g, e, *seq, asleep)
        })
        .collect()
}

fn idle_cpu(d: &Daemon, seconds: u64, what: &str) -> f64 {
    let (cpu0, w0, t0) = (d.cpu_time(), d.wakeups(), Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let (cpu1, w1, wall) = (d.cpu_time(), d.wakeups(), t0.elapsed());
    let share = (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64() * 100.0;
    println!(
        "    {what:<38} {share:.2} % of one core ({:.0} ms of CPU in {:.1} s; {} thread wake-ups, {:.1}/s)   goal <= 1 %: {}",
        (cpu1 - cpu0).as_secs_f64() * 1e3,
        wall.as_secs_f64(),
        w1 - w0,
        (w1 - w0) as f64 / wall.as_secs_f64(),
        if share <= 1.0 { "met" } else { "NOT MET" }
    );
    share
}

/// (a), (b) and (c), against a qpipd process.
pub fn latency_section(o: &Options, r: &mut Report) {
    let (mut daemon, client) = Daemon::start(o);
    let mut g = guest(client);
    let mut e = endpoint(&mut g);
    let idle_poll = o
        .idle_poll_us
        .map_or("qpipd's default".to_string(), |u| format!("{u} µs"));
    println!(
        "qpipd {} (pid {}), idle poll {idle_poll}",
        o.qpipd.display(),
        daemon.pid()
    );
    println!(
        "each round: post a receive, then a {PAYLOAD}-byte inline UDP send from a QP to ::1 port {PORT}, \
         which is bound by the same QP (device loopback); times from the send doorbell store"
    );

    println!("(c) idle CPU of qpipd (set up: context, 2 CQs, UDP QP, MR; nothing posted)");
    let idle_before = idle_cpu(&daemon, o.idle_seconds, "after set-up:");

    let mut seq = 0;
    let s0 = g.query_stats();
    println!(
        "(a) engine polling (rounds back to back, {} of them)",
        o.iterations
    );
    let all = latency(&mut g, &mut e, o.iterations, false, &mut seq);
    // Rounds where the engine had fallen asleep after all (preempted client) belong to (b).
    let awake: Vec<&Sample> = all.iter().filter(|s| !s.kicked).collect();
    let polled_send = summary(awake.iter().map(|s| s.send).collect());
    let polled_recv = summary(awake.iter().map(|s| s.recv).collect());
    print_row("doorbell -> send CQE", &polled_send);
    print_row("doorbell -> receive CQE", &polled_recv);
    if awake.len() != all.len() {
        println!(
            "    ({} of {} rounds found the engine asleep and are left out)",
            all.len() - awake.len(),
            all.len()
        );
    }

    println!("(b) engine asleep (waits for engine_sleeping before each round; the producer kicks)");
    let all = latency(&mut g, &mut e, o.sleeping_iterations, true, &mut seq);
    // The engine may wake between the check and the doorbell (a kick by an earlier round's
    // doorbell, a spurious wake-up); only rounds that really kicked count.
    let asleep: Vec<&Sample> = all.iter().filter(|s| s.kicked).collect();
    let kicked_send = summary(asleep.iter().map(|s| s.send).collect());
    let kicked_recv = summary(asleep.iter().map(|s| s.recv).collect());
    print_row("doorbell + kick -> send CQE", &kicked_send);
    print_row("doorbell + kick -> receive CQE", &kicked_recv);
    // This client's register write waits for qpipd's reply (vfio_user's region_write), so
    // it is a round trip through the control thread; QEMU posts a guest's kick instead.
    print_row(
        "  the kick write, answered",
        &summary(asleep.iter().map(|s| s.kick).collect()),
    );
    print_row(
        "  kick written -> send CQE (wake-up)",
        &summary(asleep.iter().map(|s| s.send - s.kick).collect()),
    );
    if asleep.len() != all.len() {
        println!(
            "    ({} of {} rounds found the engine awake at the doorbell and are left out)",
            all.len() - asleep.len(),
            all.len()
        );
    }
    let s1 = g.query_stats();
    let d = |i: u32| s1.counters[i as usize] - s0.counters[i as usize];
    println!(
        "    device counters over (a)+(b): {} doorbell pages seen, {} kicks, {} sleeps, {} send WQEs, {} UDP datagrams delivered",
        d(STAT_DOORBELLS),
        d(STAT_KICKS),
        d(STAT_SLEEPS),
        d(STAT_SEND_WQES),
        d(STAT_UDP_RX)
    );

    println!("(c) idle CPU of qpipd again, after the load");
    let idle_after = idle_cpu(&daemon, o.idle_seconds, "after the latency runs:");

    // Disconnects, as QEMU quitting; qpipd then exits.
    drop(g);
    daemon.stop();
    if idle_before > 1.0 || idle_after > 1.0 {
        println!("idle CPU goal (<= 1 % of a core) NOT met");
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    r.latency(&[
        ("polling_send_cqe_median_us", us(polled_send.median)),
        ("polling_send_cqe_p99_us", us(polled_send.p99)),
        ("polling_recv_cqe_median_us", us(polled_recv.median)),
        ("polling_recv_cqe_p99_us", us(polled_recv.p99)),
        ("asleep_send_cqe_median_us", us(kicked_send.median)),
        ("asleep_recv_cqe_median_us", us(kicked_recv.median)),
        ("idle_cpu_percent_after_setup", idle_before),
        ("idle_cpu_percent_after_load", idle_after),
    ]);
}
