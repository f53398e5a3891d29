//! A device-side TCP driven through a `ConnectionTable` the way the engine drives it
//! (every segment demultiplexed by the table, connections serviced after anything happened
//! to them, timers from the table's heap, closed connections removed), with the test
//! playing the remote end segment by segment; and what the segment-exact tests share
//! besides: the addresses, ports and sizes they use, the configurations they start from,
//! and the checks of what the device sent.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use qpip_device::net::tcp::listener::Listener;
use qpip_device::net::tcp::wire::{self, Header, Options};
use qpip_device::net::tcp::{
    self, record_segment_end, Config, ConnId, Connection, ConnectionTable, Event, Input,
    IsnGenerator, SendSource,
};

use crate::common::{oracle, pattern, tuple, App, Source, A, B};

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

/// Plain options (no window scaling, no timestamps) keep the expected headers short;
/// tests of those options turn them on. SACK on; small sizes; ACKs delayed as the device
/// delays them.
pub fn plain_cfg() -> Config {
    Config {
        mss: MSS,
        window_scale: None,
        timestamps: false,
        sack: true,
        staging: STAGING,
        msl: ms(500),
        initial_window: 4,
        ..Config::default()
    }
}

/// [`plain_cfg`] without delayed ACKs: what a segment calls for is in the answer to it.
pub fn cfg() -> Config {
    Config {
        delayed_ack: None,
        ..plain_cfg()
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

/// What a peer on a 1500-byte link offers in its SYN: `LINK_MSS`, SACK, and timestamps
/// when `ts`.
pub fn link_options(ts: bool) -> Options {
    Options {
        mss: Some(LINK_MSS),
        sack_permitted: true,
        timestamps: ts.then_some((1, 1)),
        ..Options::default()
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

/// A segment from the remote end as it comes off the wire (the bytes a [`wire::Segment`]
/// borrows).
pub fn from_remote(h: &Header, payload: &[u8]) -> Vec<u8> {
    wire::build(&REMOTE, &LOCAL, h, payload)
}

/// Parses what [`from_remote`] built.
pub fn parse_remote(bytes: &[u8]) -> wire::Segment<'_> {
    wire::parse(REMOTE, LOCAL, bytes).expect("our own segment parses")
}

/// A segment the device sent, checked (its addresses, and by smoltcp's parser) and
/// parsed: its header and payload.
pub fn sent(o: tcp::Outgoing) -> (Header, Vec<u8>) {
    assert_eq!((o.src, o.dst), (LOCAL, REMOTE));
    oracle(o.src, o.dst, &o.segment);
    let s = wire::parse(o.src, o.dst, &o.segment).expect("parses");
    (s.header, s.payload.to_vec())
}

/// Segments the device sent: header and payload.
pub type Segments = Vec<(Header, Vec<u8>)>;

/// (flags, seq, ack, payload length) of each segment: the shape tests compare.
pub fn shape(v: &[(Header, Vec<u8>)]) -> Vec<(u8, u32, u32, usize)> {
    v.iter()
        .map(|(h, p)| (h.flags, h.seq, h.ack, p.len()))
        .collect()
}

/// The shape of data segments of `sizes` bytes sent back to back from `seq`, each
/// acknowledging `ack`; with `push`, the last carries PSH (the end of what was queued).
pub fn data(seq: u32, ack: u32, sizes: &[usize], push: bool) -> Vec<(u8, u32, u32, usize)> {
    let mut at = seq;
    let mut v: Vec<_> = sizes
        .iter()
        .map(|&n| {
            let s = (wire::flags::ACK, at, ack, n);
            at += n as u32;
            s
        })
        .collect();
    if push {
        v.last_mut().expect("a segment").0 |= wire::flags::PSH;
    }
    v
}

/// Every segment fits an IPv6 packet of `mtu` bytes (40 of IPv6 header, the TCP header
/// with its options, the data).
pub fn fits(out: &[(Header, Vec<u8>)], mtu: usize) {
    for (h, p) in out {
        let len = 40 + 20 + h.options.wire_len() + p.len();
        assert!(len <= mtu, "{len} bytes > {mtu}: {h:?}");
    }
}

/// Bytes that come in records (none when `ends` is empty): a segment ends where a
/// record does, the way [`SendSource::segment_end`] asks.
struct Records<'a> {
    bytes: Source<'a>,
    ends: &'a [u64],
}

impl SendSource for Records<'_> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        self.bytes.read(offset, buf)
    }

    fn segment_end(&self, offset: u64, len: u64, mss: u64) -> u64 {
        // The engine's rule, as its iWARP stream answers it: what is tested here is how
        // the connection cuts segments by it (the rule itself is tested with the stream).
        let ends = self.ends.iter().copied().filter(|&e| e > offset);
        record_segment_end(ends, offset, len, mss)
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
    /// Where the records of `data` end (stream offsets, ascending), for a source of
    /// records such as iWARP FPDUs; empty: plain bytes.
    pub record_ends: Vec<u64>,
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
            record_ends: Vec::new(),
        }
    }

    pub fn listen(&mut self, cfg: &Config, backlog: usize, cookies: bool) {
        self.table
            .listen(Listener::new(
                LOCAL, LPORT, *cfg, backlog, cookies, self.now,
            ))
            .expect("listen");
    }

    /// An active open from `CPORT` to the remote end; returns its handle and its SYN.
    pub fn connect(&mut self, cfg: &Config) -> (ConnId, Segments) {
        let tag = self.new_app();
        let id = self
            .table
            .connect(tuple(LOCAL, CPORT, REMOTE, RPORT), self.now, cfg, tag)
            .expect("connect");
        let mut out = Vec::new();
        self.service(id, &mut out);
        (id, out)
    }

    /// [`Dev::connect`], answered by a SYN-ACK with `options` and `window`: the device's
    /// SYN and its ACK of the SYN-ACK are checked. Returns the handle, the ISS and the
    /// SYN.
    pub fn connected(
        &mut self,
        cfg: &Config,
        window: u16,
        options: Options,
    ) -> (ConnId, u32, Header) {
        let (id, out) = self.connect(cfg);
        let iss = self.iss(id);
        assert_eq!(shape(&out), vec![(wire::flags::SYN, iss, 0, 0)]);
        let mut sa = hdr(
            CPORT,
            wire::flags::SYN | wire::flags::ACK,
            IRS,
            iss + 1,
            window,
        );
        sa.options = options;
        let ack = self.send(sa, &[]);
        assert_eq!(shape(&ack), vec![(wire::flags::ACK, iss + 1, IRS + 1, 0)]);
        (id, iss, out[0].0)
    }

    /// A new application (a tag for a connection the test makes itself).
    pub fn new_app(&mut self) -> usize {
        self.apps.push(App::new(ROOM, false));
        self.apps.len() - 1
    }

    /// The remote end sends a segment; returns what the device sends in answer.
    pub fn send(&mut self, h: Header, payload: &[u8]) -> Segments {
        let bytes = from_remote(&h, payload);
        let seg = parse_remote(&bytes);
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
            Input::Reply(o) => out.push(sent(o)),
            Input::Dropped => {}
        }
        out
    }

    /// After anything happened to a connection: its events, its segments, its timer.
    pub fn service(&mut self, id: ConnId, out: &mut Segments) {
        let Some(e) = self.table.get_mut(id) else {
            return;
        };
        while let Some(ev) = e.conn.pop_event() {
            self.events.push((id, ev));
        }
        if e.conn.is_orphan() {
            // Its data is gone with its application: reading it would panic.
            while let Some(o) = e.conn.poll_transmit(self.now, &mut tcp::NoData) {
                out.push(sent(o));
            }
        } else {
            let queued = e.conn.queued() as usize;
            let mut src = Records {
                bytes: Source(&self.data[..queued]),
                ends: &self.record_ends,
            };
            while let Some(o) = e.conn.poll_transmit(self.now, &mut src) {
                out.push(sent(o));
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

    /// The application does `f` to a connection (closes it, aborts it); returns what the
    /// device sends then.
    pub fn by_app(&mut self, id: ConnId, f: impl FnOnce(&mut Connection)) -> Segments {
        f(&mut self.table.get_mut(id).expect("there").conn);
        let mut out = Vec::new();
        self.service(id, &mut out);
        out
    }

    /// Queues `n` more bytes on a connection and sends what is due.
    pub fn queue(&mut self, id: ConnId, n: u64) -> Segments {
        self.by_app(id, |c| c.queue_send(n).expect("queue"))
    }

    /// Moves the clock by `d` and runs the timers due.
    pub fn wait(&mut self, d: Duration) -> Segments {
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
    pub fn wait_deadline(&mut self) -> Segments {
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

    /// A connection in the table.
    pub fn conn(&self, id: ConnId) -> &Connection {
        &self.table.get(id).expect("there").conn
    }

    /// The connection the device has for the remote end's port `rport` (to `LPORT`).
    pub fn accepted(&self, rport: u16) -> ConnId {
        self.table
            .lookup(&tuple(LOCAL, LPORT, REMOTE, rport))
            .expect("a connection")
    }

    /// The connection's ISS.
    pub fn iss(&self, id: ConnId) -> u32 {
        self.conn(id).iss()
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }
}
