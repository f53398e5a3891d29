//! IPv4 beside IPv6 (RFC 791, RFC 1122): ARP for neighbours (RFC 826) through the same
//! neighbour cache as NDP, packets in and out, reassembly through the same reassembler,
//! ICMPv4 echo and errors (with ICMPv6's rate limit), and path MTU from "fragmentation
//! needed" (RFC 1191). Every address here is in its IPv4-mapped form.
//!
//! As Linux does by default: TCP segments go with "don't fragment" set (path MTU
//! discovery, RFC 1191), other packets without it; the device answers ARP only for its own
//! addresses, and echo requests only to its own addresses (not to broadcasts); a UDP
//! datagram to a broadcast address is delivered like one to the device's address.

use std::borrow::Cow;
use std::net::Ipv6Addr;
use std::time::Instant;

use log::{debug, warn};

use crate::net::frag::{self, Key};
use crate::net::stats::DropReason;
use crate::net::wire::{
    self, icmp4, proto, Arp, EthernetFrame, Ipv4Fields, MacDisplay, ParseError, ETH_LEN, IPV4_LEN,
    PROTO_ICMPV4,
};

use super::icmpv6::icmp_error_body;
use super::*;

/// Largest UDP payload over IPv4: the total length field (65535) less the IPv4 and UDP
/// headers.
pub const MAX_UDP4_PAYLOAD: usize = 65535 - IPV4_LEN - wire::UDP_LEN;

/// The lowest path MTU a "fragmentation needed" can set: 576, the datagram every IPv4 host
/// takes (RFC 791, RFC 1122 §3.3.3), so TCP's segments stay at least the 536 bytes of its
/// default MSS. Smaller reports (old routers that report none, RFC 1191 §5, or forged
/// ones) are raised to it.
pub const MIN_IPV4_PATH_MTU: usize = 576;

impl Stack {
    // ---- routing ----------------------------------------------------------------------

    /// [`Stack::route`] for an IPv4 destination that is not the device's own: on-link
    /// inside the prefix of an IPv4 address of the device, or a static neighbour (the
    /// device needs an IPv4 address to send from), else through the gateway of a route.
    /// Broadcasts and multicast are not sent.
    pub(super) fn route_ipv4(&self, dst: &Ipv6Addr) -> Result<Ipv6Addr, SendError> {
        let v4 = wire::ipv4_of(dst).expect("an IPv4 destination");
        if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || self.is_broadcast4(dst)
        {
            return Err(SendError::BadDestination);
        }
        self.next_hop(dst)
    }

    /// Whether `a` is a broadcast address on the link: 255.255.255.255, or the directed
    /// broadcast of a prefix of one of the device's IPv4 addresses (not a /31 or /32).
    pub(super) fn is_broadcast4(&self, a: &Ipv6Addr) -> bool {
        if *a == wire::IPV4_BROADCAST {
            return true;
        }
        self.addrs.iter().any(|(own, plen)| {
            wire::is_ipv4(own) && *plen <= 126 && wire::in_prefix(a, own, *plen) && {
                let host = !(u128::MAX << (128 - *plen as u32));
                u128::from(*a) & host == host
            }
        })
    }

    // ---- sending ----------------------------------------------------------------------

    /// [`Stack::send_ip`] for IPv4: `upper` (its checksum computed over the mapped
    /// addresses) in an IPv4 packet, fragmented to the path MTU if needed. TCP goes with
    /// "don't fragment".
    pub(super) fn send_ipv4(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        protocol: u8,
        ttl: u8,
        upper: &[u8],
        now: Instant,
    ) -> Result<(), SendError> {
        let _stage = crate::stages::span(crate::stages::Stage::BuildHeaders);
        let hop = self.route(&dst)?;
        if !wire::is_ipv4(&src) {
            return Err(SendError::BadSource);
        }
        if IPV4_LEN + upper.len() > u16::MAX as usize {
            return Err(SendError::TooBig);
        }
        let df = protocol == proto::TCP;
        if self.is_local(&dst) {
            let f = Ipv4Fields::whole(protocol, ttl, self.next_ipv4_id(), df);
            self.loop_back(wire::ipv4_packet(&src, &dst, &f, upper));
            return Ok(());
        }
        let mtu = self.path_mtu(&dst, now);
        if IPV4_LEN + upper.len() <= mtu {
            let f = Ipv4Fields::whole(protocol, ttl, self.next_ipv4_id(), df);
            let frame = wire::ipv4_packet(&src, &dst, &f, upper);
            self.output(hop, frame, now);
            return Ok(());
        }
        // Too big for the path (a TCP segment built before the path shrank, or a large
        // datagram): fragments, with an identifier nobody can predict (RFC 7739's advice
        // for IPv6 holds for IPv4 too).
        let id = self.rng.u16(..);
        let mut n = 0;
        for (offset, more, data) in frag::split(upper, mtu, IPV4_LEN) {
            let f = Ipv4Fields {
                protocol,
                ttl,
                id,
                dont_fragment: false,
                offset,
                more,
            };
            let frame = wire::ipv4_packet(&src, &dst, &f, data);
            self.output(hop, frame, now);
            n += 1;
        }
        self.stats.fragmented_tx += 1;
        self.stats.fragments_tx += n;
        Ok(())
    }

    fn next_ipv4_id(&mut self) -> u16 {
        self.ipv4_id = self.ipv4_id.wrapping_add(1);
        self.ipv4_id
    }

    /// An ARP request for `target`: broadcast, or to `unicast` (a reachability probe),
    /// from the device's IPv4 address on target's link.
    pub(super) fn send_arp_request(&mut self, target: Ipv6Addr, unicast: Option<Mac>) {
        let sender = self.select_source(&target);
        if !wire::is_ipv4(&sender) {
            return;
        }
        self.send_arp_request_from(sender, target, unicast.unwrap_or(wire::BROADCAST_MAC));
    }

    /// Announces a new address (a gratuitous ARP request: sender and target both the
    /// address, RFC 5227 §3), so that neighbours holding an old entry for it update.
    pub(super) fn send_gratuitous_arp(&mut self, addr: Ipv6Addr) {
        if !self.link {
            return;
        }
        self.send_arp_request_from(addr, addr, wire::BROADCAST_MAC);
    }

    /// An ARP request from `sender` asking for `target`'s hardware address, sent to `to`.
    fn send_arp_request_from(&mut self, sender: Ipv6Addr, target: Ipv6Addr, to: Mac) {
        let m = Arp {
            request: true,
            sender_mac: self.mac,
            sender_ip: sender,
            target_mac: [0; 6],
            target_ip: target,
        };
        let f = wire::arp_frame(&m, &to);
        self.stats.arp_requests_tx += 1;
        self.push_tx(f);
    }

    fn send_arp_reply(&mut self, ip: Ipv6Addr, to_mac: Mac, to_ip: Ipv6Addr) {
        let m = Arp {
            request: false,
            sender_mac: self.mac,
            sender_ip: ip,
            target_mac: to_mac,
            target_ip: to_ip,
        };
        let f = wire::arp_frame(&m, &to_mac);
        self.stats.arp_replies_tx += 1;
        self.push_tx(f);
    }

    /// Sends an ICMPv4 error about `invoking` (an IPv4 packet as received) within RFC 1122
    /// §3.2.2's rules: never about an ICMP error, a fragment other than the first, a
    /// broadcast or multicast packet, or one from an address that names no single host;
    /// rate limited with ICMPv6's errors. It quotes the header and the first 8 bytes of
    /// data as RFC 792 asks, as much more as fits in 576 bytes as RFC 1812 allows.
    pub(super) fn icmpv4_error(
        &mut self,
        invoking: &[u8],
        ty: u8,
        code: u8,
        word: u32,
        now: Instant,
    ) {
        let Ok(ip) = wire::parse_ipv4(invoking) else {
            return;
        };
        if self.is_bad_source4(&ip.src) {
            return;
        }
        if !self.is_own_unicast(&ip.dst) && !is_loopback(&ip.dst) || ip.offset != 0 {
            return;
        }
        if ip.protocol == PROTO_ICMPV4 && ip.payload().first().is_some_and(|&t| icmp4::is_error(t))
        {
            return;
        }
        if !self.icmp_error_allowed(now) {
            return;
        }
        let body = icmp_error_body(word, invoking, MIN_IPV4_PATH_MTU - IPV4_LEN - 8);
        let msg = wire::icmpv4(ty, code, &body);
        self.send_icmp_error(ip.dst, ip.src, PROTO_ICMPV4, &msg, now);
    }

    // ---- receiving --------------------------------------------------------------------

    /// An IPv4 frame from the link (its Ethernet source is not ours).
    pub(super) fn receive_ipv4<'f>(
        &mut self,
        eth: &EthernetFrame<'f>,
        now: Instant,
    ) -> Option<Upper<'f>> {
        if eth.dst != self.mac && eth.dst != wire::BROADCAST_MAC {
            if eth.dst[0] & 1 == 1 {
                self.raw_give(); // a multicast group the engine does not use
            }
            return self.drop(DropReason::NotForUs);
        }
        let ip = match wire::parse_ipv4(eth.payload) {
            Ok(ip) => ip,
            Err(ParseError::Checksum) => return self.drop(DropReason::BadChecksum),
            Err(_) => return self.drop(DropReason::Malformed),
        };
        if self.is_bad_source4(&ip.src) {
            return self.drop(DropReason::BadSource);
        }
        let broadcast = !self.is_own_unicast(&ip.dst);
        if broadcast && !self.is_broadcast4(&ip.dst) {
            self.raw_give(); // an address or group the engine does not use
            return self.drop(DropReason::NotForUs);
        }
        self.ipv4_packet(&ip, Arrival::of_ipv4(&ip, eth.src, now))
    }

    /// Whether an IPv4 (mapped) source address names no single host on the link:
    /// unspecified, broadcast, multicast, loopback or our own. No packet from the link
    /// carries these (RFC 1122 §3.2.1.3), and no error goes to them.
    fn is_bad_source4(&self, src: &Ipv6Addr) -> bool {
        let src4 = wire::ipv4_of(src).expect("mapped");
        src4.is_unspecified()
            || src4.is_broadcast()
            || src4.is_multicast()
            || self.is_local(src)
            || self.is_broadcast4(src)
    }

    /// A packet the device sent to itself, from the IPv4 header on.
    pub(super) fn receive_looped_ipv4<'f>(
        &mut self,
        packet: &'f [u8],
        now: Instant,
    ) -> Option<Upper<'f>> {
        let Ok(ip) = wire::parse_ipv4(packet) else {
            return self.drop(DropReason::Malformed);
        };
        self.ipv4_packet(&ip, Arrival::of_ipv4(&ip, self.mac, now))
    }

    /// A valid IPv4 packet for the device (or a broadcast): reassembled if a fragment, then
    /// handed to its protocol.
    fn ipv4_packet<'f>(&mut self, ip: &wire::Ipv4Packet<'f>, a: Arrival) -> Option<Upper<'f>> {
        if ip.is_fragment() {
            self.stats.fragments_rx += 1;
            self.raw_fragment();
            return self.ipv4_fragment(ip, a);
        }
        self.ipv4_deliver(Cow::Borrowed(ip.packet), ip.header_len, ip.protocol, a)
    }

    /// A fragment: checked, then held until its packet is complete (RFC 791 with RFC
    /// 5722's treatment of overlaps, as for IPv6).
    fn ipv4_fragment<'f>(&mut self, ip: &wire::Ipv4Packet<'f>, a: Arrival) -> Option<Upper<'f>> {
        let data = ip.payload();
        if ip.more && (data.is_empty() || !data.len().is_multiple_of(8))
            || ip.offset + data.len() > frag::MAX_PACKET - IPV4_LEN
        {
            return self.drop(DropReason::BadFragment);
        }
        let f = frag::Fragment {
            key: Key::ipv4(a.src, a.dst, ip.protocol, ip.id),
            offset: ip.offset,
            more: ip.more,
            next_header: ip.protocol,
            data,
            packet: ip.packet,
        };
        let (protocol, data) = self.reassemble(f, a.now)?;
        let f = Ipv4Fields::whole(protocol, a.hop_limit, ip.id, false);
        let mut packet = wire::ipv4_packet(&a.src, &a.dst, &f, &data);
        packet.drain(..ETH_LEN);
        self.ipv4_deliver(Cow::Owned(packet), IPV4_LEN, protocol, a)
    }

    /// A whole IPv4 packet for the device (`pkt`, its header `header_len` bytes) to its
    /// protocol.
    fn ipv4_deliver<'f>(
        &mut self,
        pkt: Cow<'f, [u8]>,
        header_len: usize,
        protocol: u8,
        a: Arrival,
    ) -> Option<Upper<'f>> {
        let broadcast = !self.is_own_unicast(&a.dst) && !is_loopback(&a.dst);
        match protocol {
            PROTO_ICMPV4 if broadcast => {
                self.raw_give();
                self.drop(DropReason::Ignored)
            }
            PROTO_ICMPV4 => {
                if let Some(&ty) = pkt.get(header_len) {
                    self.raw_icmpv4(ty);
                }
                self.icmpv4(&pkt[header_len..], a);
                None
            }
            proto::UDP => {
                let d = match wire::parse_udp(&pkt[header_len..]) {
                    Ok(d) => d,
                    Err(_) => return self.drop(DropReason::Malformed),
                };
                // A zero checksum means none was computed (RFC 768).
                if d.checksum != 0 && !wire::checksum_ok(&a.src, &a.dst, proto::UDP, d.datagram) {
                    self.raw_give(); // the kernel drops and counts it too
                    return self.drop(DropReason::BadChecksum);
                }
                if d.checksum != 0 {
                    // The header's checksum was verified when it was parsed.
                    self.raw_csum_verified();
                }
                let (sport, dport, len) = (d.sport, d.dport, d.payload().len());
                self.stats.udp_rx += 1;
                Some(Upper::Udp(UdpIn {
                    src: a.src,
                    dst: a.dst,
                    sport,
                    dport,
                    packet: pkt,
                    payload_at: header_len + wire::UDP_LEN,
                    payload_len: len,
                }))
            }
            proto::TCP if broadcast => self.drop(DropReason::NotForUs),
            proto::TCP if self.tcp => Some(Upper::Tcp(TcpIn {
                src: a.src,
                dst: a.dst,
                packet: pkt,
                segment_at: header_len,
            })),
            _ if broadcast => {
                self.raw_give();
                self.drop(DropReason::NotForUs)
            }
            _ if self.steering() => {
                // A protocol the kernel beside us may run: its to answer.
                self.raw_give();
                self.drop(DropReason::UnsupportedNextHeader)
            }
            _ => {
                self.icmpv4_error(
                    &pkt,
                    icmp4::DEST_UNREACHABLE,
                    icmp4::UNREACH_PROTOCOL,
                    0,
                    a.now,
                );
                self.drop(DropReason::UnsupportedNextHeader)
            }
        }
    }

    /// An ICMPv4 message for one of the device's addresses.
    fn icmpv4(&mut self, msg: &[u8], a: Arrival) {
        let Arrival { src, dst, now, .. } = a;
        let m = match wire::parse_icmpv4(msg) {
            Ok(m) => m,
            Err(ParseError::Checksum) => return self.stats.drop(DropReason::BadChecksum),
            Err(_) => return self.stats.drop(DropReason::Malformed),
        };
        match m.ty {
            icmp4::ECHO_REQUEST => {
                self.stats.echo_requests += 1;
                let mut body = Vec::with_capacity(4 + m.body.len());
                body.extend_from_slice(&m.word);
                body.extend_from_slice(m.body);
                let reply = wire::icmpv4(icmp4::ECHO_REPLY, 0, &body);
                match self.send_ipv4(dst, src, PROTO_ICMPV4, wire::DEFAULT_HOP_LIMIT, &reply, now) {
                    Ok(()) => self.stats.echo_replies += 1,
                    Err(e) => {
                        debug!("echo request from {src}: no reply ({e})");
                        self.stats.no_route += 1;
                    }
                }
            }
            icmp4::DEST_UNREACHABLE if m.code == icmp4::UNREACH_FRAG_NEEDED => {
                self.fragmentation_needed(&m, now)
            }
            icmp4::DEST_UNREACHABLE | icmp4::TIME_EXCEEDED | icmp4::PARAM_PROBLEM => {
                // As over IPv6: a destination unreachable may end a connection attempt.
                if m.ty == icmp4::DEST_UNREACHABLE {
                    self.unreachable_v4(m.body);
                }
                self.stats.icmp_errors_rx += 1;
                debug!("ICMPv4 type {} code {} from {src}", m.ty, m.code);
            }
            // Echo replies, redirects, router discovery, timestamps ...
            _ => self.stats.drop(DropReason::Ignored),
        }
    }

    /// "Fragmentation needed and DF set" about one of our packets lowers the path MTU
    /// toward its destination to the next-hop MTU it reports (RFC 1191 §4), within the
    /// same limits as a packet too big: never above the link's, never below
    /// [`MIN_IPV4_PATH_MTU`].
    fn fragmentation_needed(&mut self, m: &wire::Icmpv4Message<'_>, now: Instant) {
        let Ok((qsrc, qdst, _)) = wire::parse_quoted_ipv4(m.body) else {
            return self.stats.drop(DropReason::Malformed);
        };
        if !self.is_own_unicast(&qsrc) {
            return self.stats.drop(DropReason::NotForUs);
        }
        self.stats.ptb_rx += 1;
        let reported = u16::from_be_bytes([m.word[2], m.word[3]]) as usize;
        self.lower_path_mtu(qdst, reported, MIN_IPV4_PATH_MTU, now);
    }

    /// An ARP frame from the link (RFC 826's algorithm, with Linux's choices): a request
    /// for one of our addresses is answered and teaches the cache the asker's address; a
    /// reply completes a resolution; ARP about other addresses only refreshes a neighbour
    /// already in the cache, and is counted as not for us.
    pub(super) fn receive_arp(&mut self, eth: &EthernetFrame<'_>, now: Instant) {
        if eth.dst != self.mac && eth.dst != wire::BROADCAST_MAC {
            return self.stats.drop(DropReason::NotForUs);
        }
        let m = match wire::parse_arp(eth.payload) {
            Ok(m) => m,
            Err(_) => return self.stats.drop(DropReason::Malformed),
        };
        if m.sender_mac[0] & 1 != 0 || m.sender_mac == [0; 6] {
            return self.stats.drop(DropReason::BadSource);
        }
        let sender4 = wire::ipv4_of(&m.sender_ip).expect("mapped");
        if self.is_own_unicast(&m.sender_ip) {
            // Another station uses (or announces) one of our addresses.
            warn!(
                "{} uses {sender4}, one of our addresses",
                MacDisplay(&m.sender_mac)
            );
            self.stats.duplicate_address += 1;
            return;
        }
        if sender4.is_broadcast() || sender4.is_multicast() || sender4.is_loopback() {
            return self.stats.drop(DropReason::BadSource);
        }
        if m.request {
            self.stats.arp_requests_rx += 1;
        } else {
            self.stats.arp_replies_rx += 1;
        }
        if !self.is_own_unicast(&m.target_ip) {
            if !sender4.is_unspecified() && self.neighbors.get(&m.sender_ip).is_some() {
                // A gratuitous announcement or someone else's exchange: what it says of
                // the sender updates a neighbour we know (never adds one).
                self.neighbors.on_advertisement(
                    m.sender_ip,
                    Some(m.sender_mac),
                    false,
                    true,
                    now,
                    &mut self.actions,
                );
                self.run_actions();
                return;
            }
            return self.stats.drop(DropReason::NotForUs);
        }
        if sender4.is_unspecified() {
            // An address probe (RFC 5227 §2.1.1) for one of ours: defend it.
            if m.request {
                warn!(
                    "{} is probing for {}, one of our addresses; defending it",
                    MacDisplay(&m.sender_mac),
                    wire::ipv4_of(&m.target_ip).expect("mapped")
                );
                self.stats.dad_defended += 1;
                self.send_arp_reply(m.target_ip, m.sender_mac, m.sender_ip);
            }
            return;
        }
        if m.request {
            self.neighbors
                .on_solicitation(m.sender_ip, m.sender_mac, now, &mut self.actions);
            self.run_actions();
            self.send_arp_reply(m.target_ip, m.sender_mac, m.sender_ip);
        } else {
            self.neighbors.on_advertisement(
                m.sender_ip,
                Some(m.sender_mac),
                true,
                true,
                now,
                &mut self.actions,
            );
            self.run_actions();
        }
    }
}
