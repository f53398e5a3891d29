//! The device's network: Ethernet, IPv6, NDP, ICMPv6, IPv4, ARP, ICMPv4, UDP and TCP on
//! the wire, beneath the engine.
//!
//! Addresses are 16 bytes everywhere (`Ipv6Addr`): an IPv4 address is its IPv4-mapped form
//! `::ffff:a.b.c.d`, and only this layer knows the family, which it reads off the
//! addresses ([`wire::is_ipv4`]): the engine sees "an address".
//!
//! As in smoltcp, packet formats are kept apart from protocol state:
//! - [`wire`] builds and parses frames (Ethernet II, IPv6 with fragment header, ICMPv6,
//!   NDP options, UDP; IPv4, ICMPv4, ARP) on top of `etherparse`; no state.
//! - [`stack`] is the protocol state machine: addresses, neighbour discovery through
//!   [`neighbor`] (NDP, and ARP for IPv4), ICMPv6 and ICMPv4 echo and errors, path MTU,
//!   fragmentation and reassembly through [`frag`], UDP checksums. It is driven with frames
//!   and a clock, and hands back frames. A destination off the link goes to the gateway
//!   its [`route`] table gives.
//! - [`interface`] joins a stack to a [`crate::backend::Backend`] (TAP, cable, memory).
//! - [`tcp`] is TCP (RFC 9293 and its extensions): connections, listeners and their table,
//!   with its own wire format beside its state, driven by the engine beside the stack
//!   (segments go out through [`stack::Stack::send_tcp`]); [`gso`] cuts its
//!   super-segments for links that cannot carry them whole; [`checksum`] sums them.
//! - [`iwarp`] is iWARP's wire formats (MPA, DDP, RDMAP; RFC 5040/5041/5044/6581) for
//!   queue pairs that speak RDMA over a TCP connection, wire-compatible with Linux's `siw`.
//! - [`config`] holds the settings and parses their command-line forms; [`stats`] the
//!   counters, with every dropped frame under its reason.
//!
//! The engine keeps port demultiplexing and the placement of data into QPs: a UDP datagram
//! that arrives comes up as a [`UdpIn`], and the engine says whether a QP had its port
//! ([`Delivery`]), so the stack can answer "port unreachable" when none did.

pub mod checksum;
pub mod config;
pub mod frag;
pub mod gso;
pub mod interface;
pub mod iwarp;
pub mod neighbor;
pub mod route;
pub mod stack;
pub mod stats;
pub mod tcp;
pub mod wire;

pub use config::{Mtu, NetConfig, StaticNeighbor};
pub use interface::Interface;
pub use route::{Route, RouteError, RouteTable};
pub use stack::{Delivery, SendError, Stack, UdpIn, Upper, MAX_UDP_PAYLOAD};
pub use stats::{DropReason, NetStats};
