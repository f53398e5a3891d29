//! Connections through `ConnectionTable`s, driven the way the engine drives them: every
//! received segment demultiplexed by the table (to a connection, to a listener, or
//! answered with a reset), timers taken from the table's heap, closed connections
//! removed. Many transfers at once over a bad link; a SYN flood against a small backlog
//! with SYN cookies.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use crate::common::*;
use qpip_device::net::tcp::listener::Listener;
use qpip_device::net::tcp::{
    self, wire, ConnId, ConnectionTable, Event, Input, IsnGenerator, State,
};
use sha2::{Digest, Sha256};

/// What one connection's application does: send `out`, read into `app`, close when done.
struct Flow {
    out: Vec<u8>,
    queued: usize,
    acked: u64,
    app: App,
    established: bool,
    closed: bool,
    reset: bool,
}

impl Flow {
    fn new(out: Vec<u8>) -> Flow {
        Flow {
            out,
            queued: 0,
            acked: 0,
            app: App::new(128 * 1024, false),
            established: false,
            closed: false,
            reset: false,
        }
    }
}

struct Host {
    table: ConnectionTable<usize>,
    flows: Vec<Flow>,
    /// Data a server flow sends back: its size by arrival order.
    reply_sizes: Vec<usize>,
}

impl Host {
    fn new(seed: u8, now: Instant) -> Host {
        Host {
            table: ConnectionTable::new(IsnGenerator::new([seed; 16], now)),
            flows: Vec::new(),
            reply_sizes: Vec::new(),
        }
    }

    /// Events, buffers and sends of one connection, after anything happened to it.
    fn service(&mut self, id: ConnId, now: Instant, wire: &mut Wire, to: usize) {
        let Some(e) = self.table.get_mut(id) else {
            return;
        };
        let Some(tag) = e.tag else {
            // Half-open: nothing of ours yet, but its segments go out.
            while let Some(o) = e.conn.poll_transmit(now, &mut tcp::NoData) {
                wire.send(to, o, now);
            }
            self.table.update(id);
            return;
        };
        let f = &mut self.flows[tag];
        let mut gone = false;
        while let Some(ev) = e.conn.pop_event() {
            match ev {
                Event::Established => f.established = true,
                Event::Acked { upto } => {
                    assert!(upto > f.acked && upto as usize <= f.queued);
                    f.acked = upto;
                }
                // The sink may have more already (events are read after the fact).
                Event::DataArrived { upto, .. } => assert!(upto as usize <= f.app.data.len()),
                Event::PeerClosed => {}
                Event::Closed => {
                    f.closed = true;
                    gone = true;
                }
                Event::Reset | Event::TimedOut | Event::Unreachable => {
                    f.reset = true;
                    gone = true;
                }
            }
        }
        // The application keeps 128 KiB posted.
        let posted = f.app.data.len() + f.app.room;
        if f.app.data.len() + 128 * 1024 > posted + 16 * 1024 {
            f.app.room += f.app.data.len() + 128 * 1024 - posted;
            e.conn.recv_space_changed(now, &mut f.app);
        }
        if f.established && !gone && f.queued < f.out.len() {
            let n = f.out.len() - f.queued;
            if e.conn.queue_send(n as u64).is_ok() {
                f.queued += n;
                e.conn.close();
            }
        }
        let mut src = Source(&f.out[..f.queued]);
        while let Some(o) = e.conn.poll_transmit(now, &mut src) {
            wire.send(to, o, now);
        }
        if gone || e.conn.is_closed() {
            self.table.remove(id).expect("present");
        } else {
            self.table.update(id);
        }
    }

    fn input(&mut self, seg: &wire::Segment, now: Instant, wire_: &mut Wire, to: usize) {
        match self.table.input(seg, now, 0) {
            Input::Connection(id) => {
                let e = self.table.get_mut(id).expect("demultiplexed");
                if e.tag.is_none() {
                    // Completed from a cookie: the engine gives it a QP now.
                    self.adopt(id);
                }
                let e = self.table.get_mut(id).expect("demultiplexed");
                let tag = e.tag.expect("adopted");
                e.conn.on_segment(seg, now, &mut self.flows[tag].app);
                self.service(id, now, wire_, to);
            }
            Input::HalfOpen(id) => {
                self.adopt(id);
                self.service(id, now, wire_, to);
            }
            Input::Reply(o) => wire_.send(to, o, now),
            Input::Dropped => {}
        }
    }

    /// An accepted QP for a connection a listener made: it answers with data of the size
    /// next in line.
    fn adopt(&mut self, id: ConnId) {
        let n = self.flows.len();
        let size = self.reply_sizes.get(n).copied().unwrap_or(1000);
        self.flows.push(Flow::new(pattern(1000 + n as u64, size)));
        self.table.get_mut(id).expect("present").tag = Some(n);
    }

    fn timers(&mut self, now: Instant, wire: &mut Wire, to: usize) {
        while let Some(id) = self.table.pop_expired(now) {
            self.table.get_mut(id).expect("due").conn.poll(now);
            self.service(id, now, wire, to);
        }
    }
}

fn deliver(hosts: &mut [Host; 2], wire: &mut Wire, now: Instant) {
    while let Some((to, src, dst, bytes)) = wire.pop_due(now) {
        match wire::parse(src, dst, &bytes) {
            Ok(seg) => hosts[to].input(&seg, now, wire, 1 - to),
            Err(_) => wire.stats.checksum_drops += 1,
        }
    }
}

#[test]
fn many_connections_through_tables_over_a_bad_link() {
    let t0 = Instant::now();
    let cfg = test_config();
    let mut wire = Wire::new(
        Impair {
            loss: 0.01,
            dup: 0.01,
            reorder: 0.05,
            corrupt: 0.005,
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(3),
            rate: 20_000_000,
            queue: 300_000,
        },
        77,
    );
    let mut hosts = [Host::new(1, t0), Host::new(2, t0)];
    hosts[1]
        .table
        .listen(Listener::new(Ipv6Addr::UNSPECIFIED, 80, cfg, 64, true, t0))
        .unwrap();
    const N: usize = 12;
    hosts[1].reply_sizes = (0..N).map(|i| 50_000 * (i + 1)).collect();
    let mut ids = Vec::new();
    for i in 0..N {
        let size = 300_000 - 20_000 * i;
        hosts[0].flows.push(Flow::new(pattern(i as u64, size)));
        let id = hosts[0]
            .table
            .connect(tuple(A, 40_000 + i as u16, B, 80), t0, &cfg, i)
            .unwrap();
        ids.push(id);
    }
    for id in ids {
        hosts[0].service(id, t0, &mut wire, 1);
    }
    let mut now = t0;
    while !(hosts[0].table.is_empty() && hosts[1].table.is_empty() && wire.is_empty()) {
        let next = [
            wire.next_at(),
            hosts[0].table.next_deadline(),
            hosts[1].table.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("something pending");
        now = now.max(next);
        assert!(now - t0 < Duration::from_secs(600), "no end");
        deliver(&mut hosts, &mut wire, now);
        hosts[0].timers(now, &mut wire, 1);
        hosts[1].timers(now, &mut wire, 0);
    }
    // Every flow, both ways, complete and intact.
    assert_eq!(hosts[1].flows.len(), N);
    let mut seen = [false; N];
    for c in &hosts[0].flows {
        assert!(c.closed && !c.reset);
        assert_eq!(c.acked as usize, c.out.len());
        // The server flow that received this client's bytes.
        let s = hosts[1]
            .flows
            .iter()
            .position(|s| Sha256::digest(&s.app.data) == Sha256::digest(&c.out))
            .expect("a server received exactly these bytes");
        assert!(!seen[s]);
        seen[s] = true;
        let sf = &hosts[1].flows[s];
        assert!(sf.closed && !sf.reset);
        assert_eq!(sf.acked as usize, sf.out.len());
        assert_eq!(Sha256::digest(&c.app.data), Sha256::digest(&sf.out));
    }
    let l = hosts[1].table.listener(Ipv6Addr::UNSPECIFIED, 80).unwrap();
    assert_eq!(l.half_open(), 0, "backlog accounting returns to zero");
    assert!(wire.stats.lost > 0 && wire.stats.corrupted > 0);
}

#[test]
fn syn_flood_fills_no_more_than_the_backlog_and_cookies_still_connect() {
    let t0 = Instant::now();
    let cfg = test_config();
    let mut server: ConnectionTable<usize> = ConnectionTable::new(IsnGenerator::new([5; 16], t0));
    server
        .listen(Listener::new(Ipv6Addr::UNSPECIFIED, 80, cfg, 32, true, t0))
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(99);
    let mut cookies = 0;
    for i in 0..20_000u32 {
        // Spoofed sources: random addresses and ports.
        let src = Ipv6Addr::new(
            0xfd51,
            0x5050,
            0,
            0,
            rng.u16(..),
            rng.u16(..),
            0,
            rng.u16(1..),
        );
        let h = wire::Header {
            src_port: rng.u16(1024..),
            dst_port: 80,
            seq: rng.u32(..),
            flags: wire::flags::SYN,
            window: 65535,
            options: wire::Options {
                mss: Some(1460),
                ..wire::Options::default()
            },
            ..wire::Header::default()
        };
        let bytes = wire::build(&src, &B, &h, &[]);
        let seg = wire::parse(src, B, &bytes).unwrap();
        let at = t0 + Duration::from_micros(i as u64);
        match server.input(&seg, at, 0) {
            Input::HalfOpen(id) => {
                // Its SYN-ACK goes to the spoofed address, never to be answered.
                let e = server.get_mut(id).unwrap();
                assert_eq!(e.conn.transmit_all(at, &mut tcp::NoData).len(), 1);
                server.update(id);
            }
            Input::Reply(o) => {
                let s = wire::parse(o.src, o.dst, &o.segment).unwrap();
                assert_eq!(s.header.flags, wire::flags::SYN | wire::flags::ACK);
                cookies += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(server.len(), 32, "state only for the backlog");
    assert_eq!(cookies, 20_000 - 32);
    // A real client gets through on a cookie while the backlog is full.
    let mut wire = Wire::new(Impair::clean(), 1);
    let now = t0 + Duration::from_secs(1);
    let ct = tuple(A, 5555, B, 80);
    let mut client =
        tcp::Connection::connect(ct, IsnGenerator::new([6; 16], t0).isn(&ct, now), now, &cfg);
    let mut sink = App::new(1 << 16, false);
    let mut server_app = App::new(1 << 16, false);
    let mut server_id = None;
    let mut t = now;
    for _ in 0..10 {
        while let Some(o) = client.poll_transmit(t, &mut tcp::NoData) {
            wire.send(1, o, t);
        }
        if let Some(id) = server_id {
            let e = server.get_mut(id).unwrap();
            while let Some(o) = e.conn.poll_transmit(t, &mut tcp::NoData) {
                wire.send(0, o, t);
            }
        }
        let Some(next) = wire.next_at() else { break };
        t = next;
        while let Some((to, src, dst, bytes)) = wire.pop_due(t) {
            let seg = wire::parse(src, dst, &bytes).unwrap();
            if to == 0 {
                client.on_segment(&seg, t, &mut sink);
            } else {
                match server.input(&seg, t, 0) {
                    Input::Reply(o) => wire.send(0, o, t),
                    Input::Connection(id) => {
                        server
                            .get_mut(id)
                            .unwrap()
                            .conn
                            .on_segment(&seg, t, &mut server_app);
                        server_id = Some(id);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }
    assert_eq!(client.state(), State::Established);
    let id = server_id.expect("connection from the cookie");
    assert_eq!(server.get(id).unwrap().conn.state(), State::Established);
    assert_eq!(
        server
            .listener(Ipv6Addr::UNSPECIFIED, 80)
            .unwrap()
            .stats()
            .cookies_accepted,
        1
    );
    // The half-open entries time out after their SYN-ACK retransmissions and leave.
    let mut t = now;
    for _ in 0..100_000 {
        let Some(d) = server.next_deadline() else {
            break;
        };
        t = t.max(d);
        while let Some(i) = server.pop_expired(t) {
            let e = server.get_mut(i).unwrap();
            e.conn.poll(t);
            e.conn.transmit_all(t, &mut tcp::NoData);
            let dead = e.conn.is_closed();
            if dead {
                server.remove(i);
            } else {
                server.update(i);
            }
        }
        if server.len() == 1 {
            break;
        }
    }
    assert_eq!(server.len(), 1, "only the real connection is left");
    assert_eq!(
        server
            .listener(Ipv6Addr::UNSPECIFIED, 80)
            .unwrap()
            .half_open(),
        0
    );
}
