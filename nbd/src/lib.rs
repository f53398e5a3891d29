//! `qpip-nbd`: network block devices over qpip queue pairs.
//!
//! - [`proto`]: the NBD wire format (fixed newstyle handshake, simple replies).
//! - [`negotiate`]: the server's side of the handshake, a state machine fed with bytes.

pub mod negotiate;
pub mod proto;
