//! TCP inside the device (RFC 9293 and the extensions a modern stack runs), kept apart
//! from the QP engine as smoltcp keeps sockets apart from interfaces:
//!
//! - [`wire`]: segment format and checksums; no state.
//! - [`connection`]: one connection's state machine, in files by concern (segment input,
//!   received data and the window, output, timers, and `recovery`: the SACK scoreboard and
//!   loss recovery as a unit of its own). It takes segments, the clock and
//!   application calls; it gives segments to send and [`Event`]s. Data never lives in it
//!   beyond a small staging allowance and a bounded out-of-order buffer: the bytes to send
//!   are read from a [`SendSource`] when a segment is built (guest memory, in the device),
//!   received bytes go to a [`RecvSink`] (posted receive buffers), and the window offered
//!   is the sink's space plus the staging allowance (when the sink gives up space the
//!   window already offered, staging grows to take it: what is advertised is taken).
//! - [`listener`]: LISTEN with a bounded SYN backlog and SYN cookies beyond it.
//! - [`table`]: demultiplexing by 4-tuple and the timer heap, for the engine.
//! - [`congestion`] (RTO, Reno, CUBIC), [`recv`] (reassembly), [`isn`] (RFC 6528),
//!   [`ranges`] (range sets, sequence arithmetic), [`config`].
//!
//! Sending a segment is the IPv6 layer's job: `Stack::send_ip(out.src, out.dst,
//! proto::TCP, hop_limit, &out.segment, now)`.
//!
//! # How the engine drives it
//!
//! - **Receive.** A TCP payload of an IPv6 packet for the device: [`wire::parse`] (checks
//!   the checksum; count and drop on error), then [`ConnectionTable::input`]:
//!   [`Input::Connection`] → `entry.conn.on_segment(&seg, now, &mut qp_sink)` (a
//!   connection with no QP yet takes [`NoSpace`]); [`Input::HalfOpen`] → a listener made
//!   a connection (its SYN-ACK is due); [`Input::Reply`] → send it (a reset or a cookie
//!   SYN-ACK); [`Input::Dropped`].
//! - **After anything happened to a connection** (a segment, a timer, a call): read its
//!   events with [`Connection::pop_event`], send everything
//!   [`Connection::poll_transmit`] gives (reading the bytes from the send WRs through a
//!   [`SendSource`]), then [`ConnectionTable::update`] (re-arms its timer, releases the
//!   listener's backlog slot once established) or [`ConnectionTable::remove`] if
//!   [`Connection::is_closed`].
//! - **Timers.** Sleep until [`ConnectionTable::next_deadline`]; then for each
//!   [`ConnectionTable::pop_expired`] call [`Connection::poll`] and the step above.
//! - **Events → completions.** [`Event::Established`]: connect completes, or an accepted
//!   QP gets the connection (set [`Entry::tag`]). [`Event::Acked`]`{ upto }`: every send
//!   WR whose bytes end at or below `upto` completes. [`Event::DataArrived`]`{ upto,
//!   push }`: receive WRs filled below `upto` complete (stream mode also completes the
//!   one holding `push`). [`Event::PeerClosed`], [`Event::Reset`], [`Event::TimedOut`],
//!   [`Event::Closed`]: the QP's connection events.
//! - **Application calls.** A send WR: [`Connection::queue_send`] with its length (its
//!   bytes are stream offsets `queued()..queued()+len`). Receive WRs posted:
//!   [`Connection::recv_space_changed`] (staged bytes move into them; the window opens).
//!   Close: [`Connection::close`]. QP destroyed: [`ConnectionTable::orphan`] if the
//!   application had closed it and nothing would be lost (it then finishes its close by
//!   itself, with no owner), else [`Connection::abort`] (a reset goes out).
//! - **Path MTU.** After received frames, each `(dst, mtu)` of
//!   `Stack::take_path_mtu_changes` goes to [`ConnectionTable::path_mtu_changed`]; the
//!   connections it concerns are then due in the timer heap (retransmissions at the new
//!   size go out through the timer step above).
//! - **Counters.** [`ConnectionTable::stats`] (QUERY_STATS' `STAT_TCP_*`): exact once
//!   every connection touched was handed back with `update` or `remove`.

pub mod config;
pub mod congestion;
pub mod connection;
pub mod io;
pub mod isn;
pub mod listener;
pub mod memory;
pub mod ranges;
pub mod recv;
pub mod stats;
pub mod table;
pub mod wire;

pub use config::{Config, CongestionKind, Keepalive};
pub use connection::{CallError, ConnStats, Connection, Event, FourTuple, Outgoing, State};
pub use io::{record_segment_end, NoData, NoSpace, RecvSink, SendSource, VecSink};
pub use isn::IsnGenerator;
pub use listener::{ListenOutcome, Listener, ListenerStats};
pub use memory::MemoryPool;
pub use stats::TcpStats;
pub use table::{ConnId, ConnectionTable, Entry, Input, OrphanRefused, TableError, MAX_ORPHANS};
pub use wire::{Header, Options, ParseError, SackBlocks, Segment};
