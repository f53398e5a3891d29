//! `qpip-nbd`: network block devices over qpip queue pairs.
//!
//! - [`proto`]: the NBD wire format (fixed newstyle handshake, simple replies).
//! - [`backing`]: the exported file or block device, and its I/O through io_uring.
//! - [`negotiate`]: the server's side of the handshake, a state machine fed with bytes.
//! - [`stream`]: the receive side of a TCP QP as a byte stream, read in place.
//! - [`serve`]: the server, `qpip-nbd serve`.
//! - [`client`]: the client's connection to a server over a TCP QP.
//! - [`ublk`]: Linux's userspace block devices (`ublk_drv`).
//! - [`attach`]: the client, `qpip-nbd connect`: an export as a ublk block device.

pub mod attach;
pub mod backing;
pub mod client;
pub mod negotiate;
pub mod proto;
pub mod serve;
pub mod stream;
pub mod ublk;
