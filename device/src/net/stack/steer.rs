//! What a received frame is to a raw Ethernet QP beside the engine (the guest kernel's
//! network interface on the function, `QP_TYPE_RAW_ETH`): the stack marks each frame from
//! the link as it walks it, and the engine hands the marked ones to the raw QP.
//!
//! The rules (the ABI's steering, made exact):
//! - the raw QP gets what the engine does not own among the frames addressed to the
//!   function (its MAC, broadcast, multicast): other ethertypes; IP packets to an address
//!   or group the engine does not use; protocols the engine does not run; UDP datagrams
//!   for no bound port and TCP segments for no connection or listener (the engine then
//!   sends no port unreachable and no RST: the kernel answers for its own ports);
//!   ICMP(v6) messages other than echo requests, errors and neighbour/listener discovery;
//!   UDP and TCP with a bad checksum (the kernel drops and counts them itself);
//! - it gets a copy of what both sides need, which the engine processes too: ARP,
//!   ICMPv6 neighbour discovery (types 133-137) and multicast listener discovery (130-132,
//!   143), ICMP and ICMPv6 errors, and every IP fragment (each side reassembles its own);
//! - echo requests to the function stay the engine's (it answers them; the kernel would
//!   answer twice).
//!
//! Without a raw QP ([`Stack::set_raw_beside`] off) nothing is marked and the stack
//! answers as it always did.

use super::Stack;

/// What a received frame is to the raw QP: set by [`Stack::receive_upper`] and
/// [`Stack::delivered`], read with [`Stack::raw_rx`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RawRx {
    /// The raw QP gets the frame (alone, or a copy beside the engine).
    pub give: bool,
    /// The device verified the IPv4 header checksum (if IPv4) and the TCP or UDP
    /// checksum, and both were right (`CQE_RAW_RX_CSUM_OK`).
    pub csum_ok: bool,
    /// The frame is an IP fragment: its upper-layer checksum cannot be vouched for.
    fragment: bool,
    /// The frame came from the link (what the device sent itself is never the kernel's:
    /// the kernel's own traffic to its addresses stays in the guest).
    from_link: bool,
}

impl Stack {
    /// A raw QP is beside the engine (or no longer is): from the next frame on, the stack
    /// marks what it gets and leaves to it the answers (RST, port and protocol
    /// unreachable, parameter problems for unknown next headers) that are its kernel's.
    pub fn set_raw_beside(&mut self, on: bool) {
        self.raw_beside = on;
    }

    /// Whether the frame being received is steered: a raw QP is beside the engine and the
    /// frame came from the link. While it is, what the engine does not own is the raw
    /// QP's, and the answers to it ([`super::Delivery::Steered`]) the kernel's.
    pub fn steering(&self) -> bool {
        self.raw_beside && self.raw_rx.from_link
    }

    /// What the last frame received from the link is to the raw QP.
    pub fn raw_rx(&self) -> RawRx {
        let mut r = self.raw_rx;
        r.csum_ok &= r.give && !r.fragment;
        r
    }

    /// A new frame, from the link or (`from_link` false) from the device itself: nothing
    /// marked yet.
    pub(super) fn raw_rx_start(&mut self, from_link: bool) {
        self.raw_rx = RawRx {
            from_link,
            ..RawRx::default()
        };
    }

    /// The raw QP gets the frame (alone or as a copy: the caller decides whether the
    /// engine goes on with it).
    pub(super) fn raw_give(&mut self) {
        self.raw_rx.give = self.steering();
    }

    /// The frame is an IP fragment: a copy for the raw QP, no checksum vouched for.
    pub(super) fn raw_fragment(&mut self) {
        self.raw_give();
        self.raw_rx.fragment = true;
    }

    /// The frame's upper-layer checksum (and IPv4 header checksum, if IPv4) was verified.
    pub(super) fn raw_csum_verified(&mut self) {
        self.raw_rx.csum_ok = true;
    }

    /// Whether an ICMPv6 message of type `ty` goes to the raw QP beside the engine: all
    /// but echo requests (the engine answers them).
    pub(super) fn raw_icmpv6(&mut self, ty: u8) {
        if ty != super::icmp::ECHO_REQUEST {
            self.raw_give();
        }
    }

    /// As [`Stack::raw_icmpv6`] for ICMPv4 (echo request is type 8).
    pub(super) fn raw_icmpv4(&mut self, ty: u8) {
        if ty != 8 {
            self.raw_give();
        }
    }
}
