//! Receiving: a frame from the link walked through Ethernet, IPv6 and its extension
//! headers, reassembled when fragmented, checked, and handed up (UDP, TCP) or to ICMPv6.
//! IPv4 and ARP frames turn off to [`super::ipv4`] at the ethertype.

use std::borrow::Cow;
use std::net::Ipv6Addr;
use std::time::Instant;

use crate::net::frag::{self, Key};
use crate::net::stats::DropReason;
use crate::net::wire::{self, icmp, proto, ETH_LEN, IPV6_LEN};

use super::*;

impl Stack {
    // ---- receiving --------------------------------------------------------------------

    pub(super) fn drop<T>(&mut self, why: DropReason) -> Option<T> {
        self.stats.drop(why);
        None
    }

    /// Answers a packet with an ICMPv6 parameter problem (`code`, pointing at byte
    /// `pointer` of `packet`) and drops it for `why`.
    fn param_problem<T>(
        &mut self,
        packet: &[u8],
        code: u8,
        pointer: usize,
        why: DropReason,
        now: Instant,
    ) -> Option<T> {
        self.icmp_error(
            packet,
            icmp::PARAM_PROBLEM,
            code,
            pointer as u32,
            false,
            now,
        );
        self.drop(why)
    }

    /// Processes one received Ethernet frame. A UDP datagram for the device comes back for
    /// the engine to place ([`Stack::port_unreachable`] if no QP has its port); everything
    /// else (NDP, echo, errors, fragments) is handled here, replies queued for
    /// [`Stack::pop_tx`], and every frame not used is counted under its [`DropReason`].
    pub fn receive<'f>(&mut self, frame: &'f [u8], now: Instant) -> Option<UdpIn<'f>> {
        match self.receive_upper(frame, now)? {
            Upper::Udp(d) => Some(d),
            Upper::Tcp(_) => None,
        }
    }

    /// As [`Stack::receive`], with TCP segments for the device coming up too (when
    /// [`Stack::set_tcp`] was called).
    pub fn receive_upper<'f>(&mut self, frame: &'f [u8], now: Instant) -> Option<Upper<'f>> {
        let _stage = crate::stages::span(crate::stages::Stage::Parse);
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += frame.len() as u64;
        self.raw_rx_start(true);
        let Ok(eth) = wire::parse_ethernet(frame) else {
            return self.drop(DropReason::Malformed);
        };
        if eth.src == self.mac {
            return self.drop(DropReason::Looped);
        }
        // Addressed to the function: its MAC, broadcast or multicast.
        let addressed = eth.dst == self.mac || eth.dst[0] & 1 == 1;
        if eth.ethertype != wire::ETHERTYPE_IPV6 {
            return match eth.ethertype {
                wire::ETHERTYPE_IPV4 => self.receive_ipv4(&eth, now),
                wire::ETHERTYPE_ARP => {
                    if addressed {
                        self.raw_give(); // a copy: the kernel resolves its neighbours too
                    }
                    self.receive_arp(&eth, now);
                    None
                }
                _ => {
                    if addressed {
                        self.raw_give();
                    }
                    self.drop(DropReason::NotIp)
                }
            };
        }
        if eth.dst != self.mac && eth.dst[..2] != [0x33, 0x33] {
            return self.drop(DropReason::NotForUs);
        }
        let ip = match wire::parse_ipv6(eth.payload) {
            Ok(ip) => ip,
            Err(_) => return self.drop(DropReason::Malformed),
        };
        // A multicast source is invalid; one of our own addresses (or ::1) from the link
        // is a spoof or a loop: answering it would talk to ourselves.
        if ip.src.is_multicast() || self.is_local(&ip.src) {
            return self.drop(DropReason::BadSource);
        }
        if !(self.is_own_unicast(&ip.dst) || self.is_member(&ip.dst)) {
            self.raw_give(); // an address or group the engine does not use
            return self.drop(DropReason::NotForUs);
        }
        self.walk(Cow::Borrowed(ip.packet), Arrival::of(&ip, eth.src, now))
    }

    /// Processes a packet the device sent to itself ([`Stack::pop_loopback`]): as
    /// [`Stack::receive_upper`] from the IPv6 header on (the stack built it, for one of its
    /// own addresses).
    pub fn receive_looped<'f>(&mut self, frame: &'f [u8], now: Instant) -> Option<Upper<'f>> {
        self.raw_rx_start(false);
        if frame.get(wire::ETH_LEN).is_some_and(|b| b >> 4 == 4) {
            return self.receive_looped_ipv4(&frame[wire::ETH_LEN..], now);
        }
        let Ok(ip) = wire::parse_ipv6(&frame[wire::ETH_LEN..]) else {
            return self.drop(DropReason::Malformed);
        };
        self.walk(Cow::Borrowed(ip.packet), Arrival::of(&ip, self.mac, now))
    }

    /// Follows the header chain of a packet for us (RFC 8200 §4) to its upper layer.
    pub(super) fn walk<'f>(&mut self, pkt: Cow<'f, [u8]>, a: Arrival) -> Option<Upper<'f>> {
        let Arrival { src, dst, now, .. } = a;
        let reassembled = matches!(pkt, Cow::Owned(_));
        let mut nh = pkt[6];
        let mut nh_at = 6; // where the current next-header value sits, for parameter problems
        let mut off = IPV6_LEN;
        loop {
            let b: &[u8] = &pkt;
            match nh {
                proto::HOP_BY_HOP | proto::DEST_OPTS | proto::ROUTING => {
                    if nh == proto::HOP_BY_HOP && off != IPV6_LEN {
                        // Hop-by-hop options only ever follow the fixed header (§4.3).
                        return self.param_problem(
                            b,
                            icmp::PARAM_NEXT_HEADER,
                            nh_at,
                            DropReason::UnsupportedNextHeader,
                            now,
                        );
                    }
                    if b.len() < off + 8 {
                        return self.drop(DropReason::Malformed);
                    }
                    let len = (b[off + 1] as usize + 1) * 8;
                    if b.len() < off + len {
                        return self.drop(DropReason::Malformed);
                    }
                    if nh == proto::ROUTING {
                        if b[off + 3] != 0 {
                            // Segments left: we are a host and route nothing (§4.4).
                            return self.param_problem(
                                b,
                                icmp::PARAM_HEADER_FIELD,
                                off + 2,
                                DropReason::RoutingHeader,
                                now,
                            );
                        }
                    } else if let Err(why) = self.options(b, off, len, &dst, now) {
                        return self.drop(why);
                    }
                    nh = b[off];
                    nh_at = off;
                    off += len;
                }
                proto::FRAGMENT => {
                    let Ok(fh) = wire::parse_fragment_header(&b[off..]) else {
                        return self.drop(DropReason::Malformed);
                    };
                    self.stats.fragments_rx += 1;
                    if fh.offset == 0 && !fh.more {
                        // An atomic fragment: processed as a whole packet (RFC 6946).
                        nh = fh.next_header;
                        nh_at = off;
                        off += wire::FRAG_LEN;
                        continue;
                    }
                    if reassembled {
                        return self.drop(DropReason::BadFragment);
                    }
                    self.raw_fragment();
                    return self.fragment(b, off, fh, a);
                }
                proto::NO_NEXT => return self.drop(DropReason::NoNextHeader),
                proto::ICMPV6 => {
                    if let Some(&ty) = b.get(off) {
                        self.raw_icmpv6(ty);
                    }
                    self.icmpv6(&b[off..], a);
                    return None;
                }
                proto::UDP => {
                    let d = match wire::parse_udp(&b[off..]) {
                        Ok(d) => d,
                        Err(_) => return self.drop(DropReason::Malformed),
                    };
                    // A zero checksum is not allowed over IPv6 (RFC 8200 §8.1).
                    if d.checksum == 0 || !wire::checksum_ok(&src, &dst, proto::UDP, d.datagram) {
                        self.raw_give(); // the kernel drops and counts it too
                        return self.drop(DropReason::BadChecksum);
                    }
                    self.raw_csum_verified();
                    let (sport, dport, len) = (d.sport, d.dport, d.payload().len());
                    self.stats.udp_rx += 1;
                    return Some(Upper::Udp(UdpIn {
                        src,
                        dst,
                        sport,
                        dport,
                        packet: pkt,
                        payload_at: off + wire::UDP_LEN,
                        payload_len: len,
                    }));
                }
                proto::TCP if self.tcp => {
                    return Some(Upper::Tcp(TcpIn {
                        src,
                        dst,
                        packet: pkt,
                        segment_at: off,
                    }));
                }
                _ if self.steering() => {
                    // A protocol the kernel beside us may run: its to answer.
                    self.raw_give();
                    return self.drop(DropReason::UnsupportedNextHeader);
                }
                _ => {
                    return self.param_problem(
                        b,
                        icmp::PARAM_NEXT_HEADER,
                        nh_at,
                        DropReason::UnsupportedNextHeader,
                        now,
                    );
                }
            }
        }
    }

    /// Processes the options of a hop-by-hop or destination options header at `off`
    /// (RFC 8200 §4.2): padding and router alert pass, unknown options act on the two
    /// high bits of their type.
    pub(super) fn options(
        &mut self,
        pkt: &[u8],
        off: usize,
        len: usize,
        dst: &Ipv6Addr,
        now: Instant,
    ) -> Result<(), DropReason> {
        let end = off + len;
        let mut i = off + 2;
        while i < end {
            let t = pkt[i];
            if t == 0 {
                i += 1; // Pad1
                continue;
            }
            if i + 2 > end || i + 2 + pkt[i + 1] as usize > end {
                return Err(DropReason::Malformed);
            }
            match t {
                1 | 5 => {} // PadN, router alert (RFC 2711)
                _ => match t >> 6 {
                    0 => {}
                    1 => return Err(DropReason::UnknownOption),
                    2 | 3 => {
                        if t >> 6 == 2 || !dst.is_multicast() {
                            self.icmp_error(
                                pkt,
                                icmp::PARAM_PROBLEM,
                                icmp::PARAM_OPTION,
                                i as u32,
                                true,
                                now,
                            );
                        }
                        return Err(DropReason::UnknownOption);
                    }
                    _ => unreachable!(),
                },
            }
            i += 2 + pkt[i + 1] as usize;
        }
        Ok(())
    }

    /// A fragment of a packet for us: checked, then held until its packet is complete.
    pub(super) fn fragment<'f>(
        &mut self,
        pkt: &[u8],
        off: usize,
        fh: wire::FragmentHeader,
        a: Arrival,
    ) -> Option<Upper<'f>> {
        let now = a.now;
        let data = &pkt[off + wire::FRAG_LEN..];
        if fh.more && !data.len().is_multiple_of(8) {
            // Parameter problem pointing at the payload length (RFC 8200 §4.5).
            return self.param_problem(
                pkt,
                icmp::PARAM_HEADER_FIELD,
                4,
                DropReason::BadFragment,
                now,
            );
        }
        if fh.offset + data.len() > frag::MAX_PACKET {
            return self.param_problem(
                pkt,
                icmp::PARAM_HEADER_FIELD,
                off + 2,
                DropReason::BadFragment,
                now,
            );
        }
        if fh.offset == 0 && !header_chain_complete(fh.next_header, data) {
            // The first fragment must hold the whole header chain (RFC 7112 §5).
            return self.param_problem(
                pkt,
                icmp::PARAM_INCOMPLETE_CHAIN,
                0,
                DropReason::BadFragment,
                now,
            );
        }
        if fh.more && data.is_empty() {
            return self.drop(DropReason::BadFragment);
        }
        let f = frag::Fragment {
            key: Key {
                src: a.src,
                dst: a.dst,
                id: fh.id,
            },
            offset: fh.offset,
            more: fh.more,
            next_header: fh.next_header,
            data,
            packet: pkt,
        };
        let (next, data) = self.reassemble(f, now)?;
        // The reassembled packet: the fixed header (its extension headers before
        // the fragment header were processed with each fragment) and the data.
        let mut packet = Vec::with_capacity(IPV6_LEN + data.len());
        packet.extend_from_slice(
            &wire::ipv6_packet(&a.src, &a.dst, next, a.hop_limit, &[])[ETH_LEN..],
        );
        packet[4..6].copy_from_slice(&(data.len() as u16).to_be_bytes());
        packet.extend_from_slice(&data);
        self.walk(Cow::Owned(packet), a)
    }
}

/// Whether the first fragment's data holds every extension header and the upper-layer
/// header it announces (RFC 7112).
pub(super) fn header_chain_complete(mut nh: u8, data: &[u8]) -> bool {
    let mut off = 0;
    loop {
        match nh {
            proto::DEST_OPTS | proto::ROUTING | proto::HOP_BY_HOP => {
                if data.len() < off + 2 {
                    return false;
                }
                let len = (data[off + 1] as usize + 1) * 8;
                if data.len() < off + len {
                    return false;
                }
                nh = data[off];
                off += len;
            }
            proto::UDP => return data.len() >= off + wire::UDP_LEN,
            proto::ICMPV6 => return data.len() >= off + 8,
            proto::TCP => return data.len() >= off + 20,
            _ => return true, // no more headers we know of
        }
    }
}
