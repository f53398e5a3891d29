//! `qpip`: the verbs library of the qpip adapter — queue pairs over the device's own TCP,
//! UDP and IPv6 — and a software provider with the same API and wire format over kernel
//! sockets, for hosts without the device.
//!
//! ```
//! use std::net::{Ipv6Addr, SocketAddrV6};
//! use std::time::Duration;
//! use qpip::{Context, QpInit, QpKind, SendWr};
//!
//! # fn main() -> Result<(), qpip::Error> {
//! // The device if there is one, else kernel sockets (QPIP_PROVIDER=soft|device decides).
//! let ctx = Context::open()?;
//! let cq = ctx.create_cq(64)?;
//! let a = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq))?;
//! let b = ctx.create_qp(&QpInit::new(QpKind::Udp, &cq))?;
//! let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0);
//! a.bind(any)?;
//! let port = b.bind(any)?.port();
//!
//! // Registered memory: the region owns the buffer; receives land in it.
//! let buf = ctx.alloc(4096)?;
//! b.post_recv(1, &[buf.sge(0, 4096)])?;
//! let to = SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
//! a.post_send(&SendWr::inline(2, b"hello").to(to))?;
//!
//! let mut got = 0;
//! while got < 2 {
//!     let c = cq.wait_one(Some(Duration::from_secs(10)))?.expect("a completion");
//!     assert!(c.is_ok(), "{c:?}");
//!     if c.wr_id == 1 {
//!         assert_eq!(&buf[..c.byte_len as usize], b"hello");
//!     }
//!     got += 1;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The model
//!
//! - [`Context`]: the device (`/dev/qpipN`) or the software provider. Everything else is
//!   created from it and keeps it open.
//! - [`MemoryRegion`]: a registered buffer, owned by its registration; [`Sge`]s name ranges
//!   of it in work requests, which keep it alive until they complete.
//! - [`Cq`]: completions, polled without a system call ([`Cq::poll`]), waited for with a
//!   timeout ([`Cq::wait`]), or watched with `epoll` on its descriptor after [`Cq::arm`].
//! - [`Qp`]: a UDP endpoint or a TCP connection. [`Qp::post_send`] and [`Qp::post_recv`]
//!   never block; each request completes once, in order per queue, tagged with its
//!   `wr_id`. Connections are made with [`Qp::connect`] and [`Listener::accept`], whose
//!   outcomes are [`Event`]s of the context ([`Context::poll_event`], or the blocking
//!   [`Qp::connect_wait`] and [`Listener::accept_wait`]).
//! - iWARP ([`Framing::Iwarp`], the device only): RDMA over TCP with any iWARP peer —
//!   sends, [`SendWr::rdma_write`] and [`SendWr::rdma_read`] into regions registered with
//!   remote rights ([`Context::register_with`], [`MemoryRegion::remote`]), connections set
//!   up by MPA with private data ([`Qp::connect_mpa`], [`Listener::accept_mpa`],
//!   [`Qp::conn_info`]). See [`iwarp`].
//! - [`Tripwire`] (the device only): an event on a CQ when the network places data in a
//!   chosen range of a region while the tripwire is armed ([`Context::create_tripwire`];
//!   [`Tripwire::arm`] is a store, no system call) — a consumer sleeps until a peer's RDMA
//!   Write reaches the next record of a ring. See [`tripwire`].
//!
//! With the Cargo feature `tokio`, [`aio`] adds futures for the waits: [`AsyncCq::next`]
//! and [`AsyncCq::poll_batch`] complete from the CQ's descriptor, [`AsyncContext`]'s
//! `connect`, `accept`, `close` and `event_for` from the context's event descriptor. They
//! are cancel-safe and any number of tasks may share one CQ or context. The default build
//! does not depend on tokio.
//!
//! Device discovery ([`list_devices`]) reads what the guest driver publishes under
//! `/sys/class/qpip/qpipN`. The guest tools that use the library are the crate
//! `qpip-tools` (`guest-tools/`), built as static binaries for the guest image (see
//! `images/guest.sh`).

mod addr;
#[cfg(feature = "tokio")]
pub mod aio;
mod context;
mod cq;
mod device;
mod discovery;
mod error;
pub mod iwarp;
mod mr;
mod qp;
mod soft;
mod sys;
pub mod tripwire;
mod types;

pub use addr::resolve_addr;
#[cfg(feature = "tokio")]
pub use aio::{AsyncContext, AsyncCq};
pub use context::{Context, PROVIDER_ENV};
pub use cq::{Cq, BUSY_POLL_ENV, DEFAULT_BUSY_POLL_US};
pub use discovery::{
    driver_loaded, list_devices, AbiVersion, DeviceInfo, DiscoveryError, CLASS, DEV_DIR,
};
pub use error::{Error, Result};
pub use iwarp::{Access, ConnInfo, Mpa, RemoteAddr};
pub use mr::{MemoryRegion, Sge};
pub use qp::{Listener, Qp, QpInit, SendWr};
pub use sys::{wait_any_readable, MAX_WAIT_FDS};
pub use tripwire::Tripwire;
pub use types::{
    Completion, Detail, Event, EventKind, Framing, Keepalive, Limits, Opcode, ProviderKind, QpKind,
    Status,
};
