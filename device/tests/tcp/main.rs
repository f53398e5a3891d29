//! The TCP of the network layer (`net::tcp`) on its own, without a device: connections and
//! connection tables driven in-process, segment by segment or over an in-memory wire, with
//! every segment they build also read by smoltcp's parser. One module a subject; the
//! device's TCP queue pairs are tested in `tcp_qp/`.

// Two endpoints over an in-memory wire, the smoltcp oracle, the test applications.
#[path = "../support/tcp_common.rs"]
mod common;
// A connection table driven as the engine drives it, the test playing the remote end.
#[path = "../support/tcp_harness.rs"]
mod harness;

mod orphan;
mod pmtu;
mod rcv_window;
mod robust;
mod segment_size;
mod state;
mod stats;
mod table;
mod time_wait;
mod transfer;
