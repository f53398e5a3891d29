//! A device-side TCP driven through a `ConnectionTable` the way the engine drives it
//! (every segment demultiplexed by the table, connections serviced after anything happened
//! to them, timers from the table's heap, closed connections removed), with the test
//! playing the remote end segment by segment. Included with `#[path]` (with
//! `tcp_common/mod.rs` as `common`) by the segment-exact tests of the table.

#![allow(dead_code)]

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::net::tcp::wire::{self, Header, Options};
use qpip_device::net::tcp::{self, Config, ConnId, ConnectionTable, Event, Input, IsnGenerator};

use super::common::{oracle, pattern, tuple, App, Source, A, B};

pub const LOCAL: Ipv6Addr = A;
pub const REMOTE: Ipv6Addr = B;
/// The device's listening port and its connecting port.
pub const LPORT: u16 = 80;
pub const CPORT: u16 = 1000;
/// The remote end's port.
pub const RPORT: u16 = 5000;
pub const IRS: u32 = 5000;
pub const MSS: u16 = 1000;
pub const STAGING: usize = 10_000;
pub const ROOM: usize = 20_000;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Plain options (no window scaling, no timestamps), SACK on; small sizes.
pub fn cfg() -> Config {
    Config {
        mss: MSS,
        window_scale: None,
        timestamps: false,
        sack: true,
        staging: STAGING,
        msl: ms(500),
        initial_window: 4,
        delayed_ack: None,
        ..Config::default()
    }
}

/// The device's MSS on a 1500-byte link.
pub const LINK_MSS: u16 = 1440;

/// [`cfg`] with the MSS of a 1500-byte link, timestamps on or off.
pub fn link_cfg(timestamps: bool) -> Config {
    Config {
        mss: LINK_MSS,
        timestamps,
        ..cfg()
    }
}

/// A header from the remote end (its port `RPORT`) to `dport`.
pub fn hdr(dport: u16, fl: u8, seq: u32, ack: u32, window: u16) -> Header {
    Header {
        src_port: RPORT,
        dst_port: dport,
        seq,
        ack,
        flags: fl,
        window,
        urgent: 0,
        options: Options::default(),
    }
}

pub struct Dev {
    pub table: ConnectionTable<usize>,
    /// The application of each tagged connection (its tag is the index).
    pub apps: Vec<App>,
    /// What every connection sends: the first `queued()` bytes of this.
    pub data: Vec<u8>,
    pub now: Instant,
    pub events: Vec<(ConnId, Event)>,
}

impl Dev {
    pub fn new() -> Dev {
        let now = Instant::now();
        Dev {
            table: ConnectionTable::new(IsnGenerator::new([3; 16], now)),
            apps: Vec::new(),
            data: pattern(11, 300_000),
            now,
            events: Vec::new(),
        }
    }

    pub fn listen(&mut self, cfg: &Config, backlog: usize, cookies: bool) {
        self.table
            .listen(LOCAL, LPORT, *cfg, backlog, cookies, self.now)
            .expect("listen");
    }

    /// An active open from `CPORT` to the remote end; returns its handle and its SYN.
    pub fn connect(&mut self, cfg: &Config) -> (ConnId, Vec<(Header, Vec<u8>)>) {
        let tag = self.new_app();
        let id = self
            .table
            .connect(tuple(LOCAL, CPORT, REMOTE, RPORT), self.now, cfg, tag)
            .expect("connect");
        let mut out = Vec::new();
        self.service(id, &mut out);
        (id, out)
    }

    fn new_app(&mut self) -> usize {
        self.apps.push(App::new(ROOM, false));
        self.apps.len() - 1
    }

    /// The remote end sends a segment; returns what the device sends in answer.
    pub fn send(&mut self, h: Header, payload: &[u8]) -> Vec<(Header, Vec<u8>)> {
        let bytes = wire::build(&REMOTE, &LOCAL, &h, payload);
        let seg = wire::parse(REMOTE, LOCAL, &bytes).expect("our own segment parses");
        let mut out = Vec::new();
        match self.table.input(&seg, self.now, 0) {
            Input::Connection(id) => {
                let e = self.table.get(id).expect("demultiplexed");
                if e.tag.is_none() && !e.conn.is_orphan() {
                    // From a cookie: the application takes it at once.
                    let tag = self.new_app();
                    self.table.get_mut(id).expect("there").tag = Some(tag);
                }
                let e = self.table.get_mut(id).expect("demultiplexed");
                match e.tag {
                    Some(tag) => e.conn.on_segment(&seg, self.now, &mut self.apps[tag]),
                    // An orphan: its application is gone.
                    None => e.conn.on_segment(&seg, self.now, &mut tcp::NoSpace),
                }
                self.service(id, &mut out);
            }
            Input::HalfOpen(id) => {
                let tag = self.new_app();
                self.table.get_mut(id).expect("there").tag = Some(tag);
                self.service(id, &mut out);
            }
            Input::Reply(o) => out.push(Self::check(o)),
            Input::Dropped => {}
        }
        out
    }

    fn check(o: tcp::Outgoing) -> (Header, Vec<u8>) {
        assert_eq!((o.src, o.dst), (LOCAL, REMOTE));
        oracle(o.src, o.dst, &o.segment);
        let s = wire::parse(o.src, o.dst, &o.segment).expect("parses");
        (s.header, s.payload.to_vec())
    }

    /// After anything happened to a connection: its events, its segments, its timer.
    pub fn service(&mut self, id: ConnId, out: &mut Vec<(Header, Vec<u8>)>) {
        let Some(e) = self.table.get_mut(id) else {
            return;
        };
        while let Some(ev) = e.conn.pop_event() {
            self.events.push((id, ev));
        }
        if e.conn.is_orphan() {
            // Its data is gone with its application: reading it would panic.
            while let Some(o) = e.conn.poll_transmit(self.now, &mut tcp::NoData) {
                out.push(Self::check(o));
            }
        } else {
            let queued = e.conn.queued() as usize;
            let mut src = Source(&self.data[..queued]);
            while let Some(o) = e.conn.poll_transmit(self.now, &mut src) {
                out.push(Self::check(o));
            }
        }
        while let Some(ev) = e.conn.pop_event() {
            self.events.push((id, ev));
        }
        if e.conn.is_closed() {
            self.table.remove(id).expect("present");
        } else {
            self.table.update(id);
        }
    }

    /// Queues `n` more bytes on a connection and sends what is due.
    pub fn queue(&mut self, id: ConnId, n: u64) -> Vec<(Header, Vec<u8>)> {
        self.table
            .get_mut(id)
            .expect("there")
            .conn
            .queue_send(n)
            .expect("queue");
        let mut out = Vec::new();
        self.service(id, &mut out);
        out
    }

    /// Moves the clock by `d` and runs the timers due.
    pub fn wait(&mut self, d: Duration) -> Vec<(Header, Vec<u8>)> {
        self.now += d;
        let mut out = Vec::new();
        while let Some(id) = self.table.pop_expired(self.now) {
            self.table.get_mut(id).expect("due").conn.poll(self.now);
            self.service(id, &mut out);
        }
        out
    }

    /// Moves the clock to the next timer that does something (heap entries of deadlines
    /// that moved later do nothing) and runs it.
    pub fn wait_deadline(&mut self) -> Vec<(Header, Vec<u8>)> {
        for _ in 0..64 {
            let t = self.table.next_deadline().expect("a timer");
            let n = self.events.len();
            let out = self.wait(t.saturating_duration_since(self.now));
            if !out.is_empty() || self.events.len() > n {
                return out;
            }
        }
        panic!("timers run without effect");
    }

    /// The connection's ISS.
    pub fn iss(&self, id: ConnId) -> u32 {
        self.table.get(id).expect("there").conn.iss()
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }
}

/// (flags, seq, ack, payload length) of each segment: the shape tests compare.
pub fn shape(v: &[(Header, Vec<u8>)]) -> Vec<(u8, u32, u32, usize)> {
    v.iter()
        .map(|(h, p)| (h.flags, h.seq, h.ack, p.len()))
        .collect()
}
