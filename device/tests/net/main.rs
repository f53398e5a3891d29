//! The network layer without a device around it. One stack fed frame by frame (`peer`
//! plays the other end of its link): neighbour discovery, routing, ICMPv6, fragmentation
//! both ways and hostile input. Then two stacks on one link (`pair`): the in-memory wire,
//! clean and impaired, and the cable backend. Frames fed in are built by an independent
//! library (smoltcp's wire module, `net_oracle`), and every frame a stack sends is parsed
//! and its checksums verified by it.

#[path = "../support/checked_datagrams.rs"]
mod checked_datagrams;
#[path = "../support/net_oracle.rs"]
mod net_oracle;
mod peer;

mod fragments;
mod hostile_input;
mod icmp;
mod ipv4;
mod ndp;
mod pair;
mod routing;
