//! TCP inside the device (RFC 9293 and the extensions a modern stack runs), kept apart
//! from the QP engine as smoltcp keeps sockets apart from interfaces:
//!
//! - [`wire`]: segment format and checksums; no state.
//! - [`connection`]: one connection's state machine. It takes segments, the clock and
//!   application calls; it gives segments to send and [`Event`]s. Data never lives in it
//!   beyond a small staging allowance and a bounded out-of-order buffer: the bytes to send
//!   are read from a [`SendSource`] when a segment is built (guest memory, in the device),
//!   received bytes go to a [`RecvSink`] (posted receive buffers), and the window offered
//!   is the sink's space plus the staging allowance.
//! - [`listener`]: LISTEN with a bounded SYN backlog and SYN cookies beyond it.
//! - [`table`]: demultiplexing by 4-tuple and the timer heap, for the engine.
//! - [`congestion`] (RTO, Reno, CUBIC), [`recv`] (reassembly), [`isn`] (RFC 6528),
//!   [`ranges`] (range sets, sequence arithmetic), [`config`].
//!
//! Sending a segment is the IPv6 layer's job: `Stack::send_ip(out.src, out.dst,
//! proto::TCP, hop_limit, &out.segment, now)`.

pub mod config;
pub mod congestion;
pub mod connection;
pub mod io;
pub mod isn;
pub mod listener;
pub mod ranges;
pub mod recv;
pub mod table;
pub mod wire;

pub use config::{Config, CongestionKind, Keepalive};
pub use connection::{CallError, ConnStats, Connection, Event, FourTuple, Outgoing, State};
pub use io::{NoData, RecvSink, SendSource, VecSink};
pub use isn::IsnGenerator;
pub use listener::{ListenOutcome, Listener, ListenerStats};
pub use table::{ConnId, ConnectionTable, Entry, Input, TableError};
pub use wire::{Header, Options, ParseError, SackBlocks, Segment};
