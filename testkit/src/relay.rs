//! A man in the middle of two devices: each device's cable ends at the relay, which
//! forwards every frame to the other side — or drops everything (a peer that vanished
//! without a word), or A's next FINs (a lost FIN), records what device A sends, and
//! injects frames of its own toward A
//! (an ICMPv6 packet too big from a router on the path, an echo request whose reply marks
//! the point from which A has read everything injected before it).

use std::net::Ipv6Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qpip_device::backend::cable::Cable;
use qpip_device::backend::{Backend, MAX_FRAME};
use qpip_device::net::wire;

const ETH: usize = 14;
const IPV6: usize = 40;
const PROTO_TCP: u8 = 6;
const PROTO_ICMPV6: u8 = 58;
const PROTO_FRAGMENT: u8 = 44;
const ICMP_PACKET_TOO_BIG: u8 = 2;
const ICMP_ECHO_REQUEST: u8 = 128;
const ICMP_ECHO_REPLY: u8 = 129;
/// The FIN bit of the TCP flags byte (offset 13 of the header).
const TCP_FIN: u8 = 0x01;
/// The identifier of the relay's echo requests.
const ECHO_ID: u16 = 0x5150;

/// One IPv6 packet A sent toward B.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The IPv6 packet's length (header included): what must fit the path MTU.
    pub ip_len: usize,
    /// TCP payload bytes, if it is a TCP segment.
    pub tcp_payload: Option<usize>,
    /// A fragment (of a packet larger than the path MTU A knew).
    pub fragment: bool,
    /// How many echo replies to the relay A had sent before this packet.
    pub after_marks: u32,
}

/// A packet too big, and a mark after it, to give A once it has sent `after` TCP data
/// segments.
#[derive(Debug, Clone, Copy)]
pub struct PtbPlan {
    pub after: usize,
    pub mtu: u32,
    pub router: Ipv6Addr,
    pub a_mac: [u8; 6],
    pub a_addr: Ipv6Addr,
    pub b_mac: [u8; 6],
    pub b_addr: Ipv6Addr,
}

#[derive(Default)]
struct State {
    drop_all: bool,
    /// Frames to give A, in order, before anything else B sends.
    to_a: Vec<Vec<u8>>,
    sent_by_a: Vec<Sent>,
    /// A's last TCP data frame, whole: what a packet too big quotes.
    last_data_from_a: Option<Vec<u8>>,
    marks: u32,
    dropped: u64,
    /// Whether A's TCP segments with FIN are dropped, and how many were.
    drop_fins: bool,
    fins_dropped: u32,
    data_from_a: usize,
    plan: Option<PtbPlan>,
}

impl State {
    fn packet_too_big(&mut self, a_mac: [u8; 6], a_addr: Ipv6Addr, router: Ipv6Addr, mtu: u32) {
        let quoted = self.last_data_from_a.clone().expect("A sent data");
        let quoted = &quoted[ETH..quoted.len().min(ETH + 1280 - IPV6 - 8)];
        let mut body = mtu.to_be_bytes().to_vec();
        body.extend_from_slice(quoted);
        let ptb = wire::icmpv6(&router, &a_addr, ICMP_PACKET_TOO_BIG, 0, &body);
        let mut f = wire::ipv6_packet(&router, &a_addr, PROTO_ICMPV6, 64, &ptb);
        wire::write_ethernet(&mut f, &a_mac, &[0x02, 0, 0, 0, 0x70, 0x01]);
        self.to_a.push(f);
    }

    fn mark(&mut self, a_mac: [u8; 6], a_addr: Ipv6Addr, b_mac: [u8; 6], b_addr: Ipv6Addr) {
        let seq = self.marks as u16;
        let echo = wire::icmpv6(
            &b_addr,
            &a_addr,
            ICMP_ECHO_REQUEST,
            0,
            &wire::echo_body(ECHO_ID, seq, b"mark"),
        );
        let mut f = wire::ipv6_packet(&b_addr, &a_addr, PROTO_ICMPV6, 64, &echo);
        wire::write_ethernet(&mut f, &a_mac, &b_mac);
        self.to_a.push(f);
    }
}

pub struct Relay {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn ip_of(frame: &[u8]) -> Option<(u8, &[u8])> {
    if frame.len() < ETH + IPV6 || frame[12..14] != [0x86, 0xdd] {
        return None;
    }
    let ip = &frame[ETH..];
    let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    (ip.len() >= IPV6 + plen).then(|| (ip[6], &ip[..IPV6 + plen]))
}

impl Relay {
    /// Takes one end of each cable: start it before the devices, which then take the
    /// other ends.
    pub fn new(cable_a: &Path, cable_b: &Path) -> Relay {
        let mut a = Cable::open(cable_a).expect("relay end of cable A");
        let mut b = Cable::open(cable_b).expect("relay end of cable B");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_FRAME];
            while !halt.load(Ordering::Relaxed) {
                let mut idle = true;
                for f in std::mem::take(&mut st.lock().unwrap().to_a) {
                    let _ = a.send(&f);
                    idle = false;
                }
                while let Ok(Some(n)) = a.recv(&mut buf) {
                    idle = false;
                    let f = &buf[..n];
                    let mut s = st.lock().unwrap();
                    if let Some((next, ip)) = ip_of(f) {
                        if next == PROTO_ICMPV6
                            && ip.len() >= IPV6 + 8
                            && ip[IPV6] == ICMP_ECHO_REPLY
                            && ip[IPV6 + 4..IPV6 + 6] == ECHO_ID.to_be_bytes()
                        {
                            s.marks += 1;
                            continue; // the relay's own: B never asked for it
                        }
                        let tcp_payload = (next == PROTO_TCP && ip.len() >= IPV6 + 20)
                            .then(|| ip.len() - IPV6 - (ip[IPV6 + 12] >> 4) as usize * 4);
                        let after_marks = s.marks;
                        s.sent_by_a.push(Sent {
                            ip_len: ip.len(),
                            tcp_payload,
                            fragment: next == PROTO_FRAGMENT,
                            after_marks,
                        });
                        if next == PROTO_TCP
                            && ip.len() >= IPV6 + 20
                            && ip[IPV6 + 13] & TCP_FIN != 0
                            && s.drop_fins
                        {
                            s.fins_dropped += 1;
                            continue;
                        }
                        if tcp_payload.is_some_and(|p| p > 0) {
                            s.last_data_from_a = Some(f.to_vec());
                            s.data_from_a += 1;
                            if let Some(p) = s.plan.filter(|p| s.data_from_a >= p.after) {
                                s.plan = None;
                                s.packet_too_big(p.a_mac, p.a_addr, p.router, p.mtu);
                                s.mark(p.a_mac, p.a_addr, p.b_mac, p.b_addr);
                            }
                        }
                    }
                    if s.drop_all {
                        s.dropped += 1;
                        continue;
                    }
                    drop(s);
                    let _ = b.send(f);
                }
                while let Ok(Some(n)) = b.recv(&mut buf) {
                    idle = false;
                    let mut s = st.lock().unwrap();
                    if s.drop_all {
                        s.dropped += 1;
                        continue;
                    }
                    drop(s);
                    let _ = a.send(&buf[..n]);
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        });
        Relay {
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// From now on every frame, either way, is dropped (or forwarded again).
    pub fn set_drop_all(&self, on: bool) {
        self.state.lock().unwrap().drop_all = on;
    }

    /// Frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.state.lock().unwrap().dropped
    }

    /// From now on every TCP segment A sends with FIN set is dropped (with any data it
    /// carries), or none again; the rest of the traffic goes through.
    pub fn set_drop_fins_from_a(&self, on: bool) {
        self.state.lock().unwrap().drop_fins = on;
    }

    /// A's FIN segments dropped so far.
    pub fn fins_dropped(&self) -> u32 {
        self.state.lock().unwrap().fins_dropped
    }

    /// What A has sent toward B so far.
    pub fn sent_by_a(&self) -> Vec<Sent> {
        self.state.lock().unwrap().sent_by_a.clone()
    }

    /// Gives A, as if from a router at `router`, an ICMPv6 packet too big reporting `mtu`
    /// and quoting A's last TCP data segment (as much of it as fits the minimum MTU,
    /// RFC 4443 §3.2). Panics if A has sent no data yet.
    pub fn packet_too_big(&self, a_mac: [u8; 6], a_addr: Ipv6Addr, router: Ipv6Addr, mtu: u32) {
        self.state
            .lock()
            .unwrap()
            .packet_too_big(a_mac, a_addr, router, mtu);
    }

    /// Gives A an echo request from B (`b_mac`, `b_addr`: a neighbour A knows), whose reply
    /// the relay keeps: once it has come back ([`Relay::wait_marks`]), A has read every
    /// frame the relay gave it before.
    pub fn mark(&self, a_mac: [u8; 6], a_addr: Ipv6Addr, b_mac: [u8; 6], b_addr: Ipv6Addr) {
        self.state
            .lock()
            .unwrap()
            .mark(a_mac, a_addr, b_mac, b_addr);
    }

    /// [`Relay::packet_too_big`] then [`Relay::mark`], done by the relay itself as soon as
    /// A has sent `plan.after` TCP data segments (in the middle of a transfer).
    pub fn plan_packet_too_big(&self, plan: PtbPlan) {
        self.state.lock().unwrap().plan = Some(plan);
    }

    /// Waits until A has answered `n` echo requests of the relay in all.
    pub fn wait_marks(&self, n: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.state.lock().unwrap().marks < n {
            assert!(
                Instant::now() < deadline,
                "A did not answer the echo request"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
