//! Segment-exact tests of the TCP state machine, in the smoltcp style: in this state,
//! given this segment (or this much time), exactly these segments come out. Every
//! segment the connection builds also goes through smoltcp's parser. One connection on
//! its own (`T`), or a listener or a table where the test is about them; one module a
//! part of RFC 9293's state machine.

mod acceptance;
mod close;
mod open;
mod receive;
mod send;
mod table;

use std::time::{Duration, Instant};

use qpip_device::net::tcp::wire::flags::*;
use qpip_device::net::tcp::wire::{Header, Options, SackBlocks};
use qpip_device::net::tcp::{Config, Connection, Event, State};

use crate::common::{pattern, tuple, App, Source};
use crate::harness::{
    self, from_remote, parse_remote, sent, IRS, LOCAL, MSS, REMOTE, ROOM, STAGING,
};

/// The connection's port (also the listener's, for passive opens), and its ISS when it
/// opens actively.
const LPORT: u16 = harness::CPORT;
const ISS: u32 = 1000;
/// The window the connection offers when nothing was received: the space the application
/// posted and the staging allowance.
const WINDOW: u16 = (ROOM + STAGING) as u16;

/// The configuration the tests start from (ACKs delayed as the device delays them).
fn cfg() -> Config {
    harness::plain_cfg()
}

/// A header from the remote end.
fn hdr(fl: u8, seq: u32, ack: u32, window: u16) -> Header {
    harness::hdr(LPORT, fl, seq, ack, window)
}

/// A header we expect from the connection.
fn out(fl: u8, seq: u32, ack: u32, window: u16) -> Header {
    Header {
        src_port: LPORT,
        dst_port: harness::RPORT,
        ..hdr(fl, seq, ack, window)
    }
}

fn sack(blocks: &[(u32, u32)]) -> Options {
    Options {
        sack: SackBlocks::from_slice(blocks),
        ..Options::default()
    }
}

/// One connection, its application, and what it reported.
struct T {
    c: Connection,
    t0: Instant,
    now: Instant,
    app: App,
    data: Vec<u8>,
    events: Vec<Event>,
}

impl T {
    /// `c`, made at `t0`, with an application that posted `ROOM` bytes.
    fn new(c: Connection, t0: Instant) -> T {
        T {
            c,
            t0,
            now: t0,
            app: App::new(ROOM, false),
            data: pattern(7, 200_000),
            events: Vec::new(),
        }
    }

    fn connect(cfg: &Config) -> T {
        let t0 = Instant::now();
        let c = Connection::connect(tuple(LOCAL, LPORT, REMOTE, harness::RPORT), ISS, t0, cfg);
        T::new(c, t0)
    }

    /// An established connection (active open, SYN-ACK without options but MSS and
    /// SACK-permitted), the handshake's segments checked and taken.
    fn established(cfg: &Config) -> T {
        let mut t = T::connect(cfg);
        let syn = t.recv1();
        assert!(syn.0.syn());
        let mut h = hdr(SYN | ACK, IRS, ISS + 1, 30_000);
        h.options.mss = Some(MSS);
        h.options.sack_permitted = cfg.sack;
        t.send(h, &[]);
        assert_eq!(t.c.state(), State::Established);
        let ack = t.recv1();
        assert_eq!(
            ack.0,
            out(ACK, ISS + 1, IRS + 1, (ROOM + cfg.staging) as u16)
        );
        assert_eq!(t.take_events(), vec![Event::Established]);
        t
    }

    fn send(&mut self, h: Header, payload: &[u8]) {
        let bytes = from_remote(&h, payload);
        self.c
            .on_segment(&parse_remote(&bytes), self.now, &mut self.app);
        self.collect();
    }

    /// The peer acknowledges up to `ack` (nothing else: no data, a window of 30000).
    fn ack(&mut self, ack: u32) {
        self.send(hdr(ACK, IRS + 1, ack, 30_000), &[]);
    }

    fn collect(&mut self) {
        while let Some(e) = self.c.pop_event() {
            self.events.push(e);
        }
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.collect();
        std::mem::take(&mut self.events)
    }

    /// Everything the connection sends now.
    fn recv(&mut self) -> Vec<(Header, Vec<u8>)> {
        let queued = self.c.queued() as usize;
        let mut src = Source(&self.data[..queued]);
        let mut v = Vec::new();
        while let Some(o) = self.c.poll_transmit(self.now, &mut src) {
            v.push(sent(o));
        }
        self.collect();
        v
    }

    fn recv1(&mut self) -> (Header, Vec<u8>) {
        let mut v = self.recv();
        assert_eq!(v.len(), 1, "exactly one segment: {v:#?}");
        v.pop().expect("one")
    }

    fn recv_none(&mut self) {
        let v = self.recv();
        assert!(v.is_empty(), "no segment expected: {v:#?}");
    }

    /// The connection is closed, `last` is what it reported last, and it sends nothing
    /// more.
    fn ended_with(&mut self, last: Event) {
        assert_eq!(self.c.state(), State::Closed);
        assert_eq!(self.take_events(), vec![last]);
        self.recv_none();
    }

    /// Moves the clock by `d` and runs the timers.
    fn wait(&mut self, d: Duration) {
        self.now += d;
        self.c.poll(self.now);
        self.collect();
    }

    /// Moves the clock to the next deadline.
    fn wait_deadline(&mut self) -> Duration {
        let d = self.c.next_deadline().expect("a timer");
        let waited = d - self.now;
        self.now = d;
        self.c.poll(self.now);
        self.collect();
        waited
    }

    fn queue(&mut self, n: u64) {
        self.c.queue_send(n).expect("queue");
    }

    fn bytes(&self, from: u64, len: usize) -> Vec<u8> {
        self.data[from as usize..from as usize + len].to_vec()
    }
}
