//! What only IPv4 has at the test's end of the cable: the device's IPv4 packets read (their
//! header checked by etherparse), ARP played (RFC 826), and "fragmentation needed" sent
//! (RFC 1191).

use std::net::Ipv6Addr;
use std::time::Instant;

use etherparse::Ipv4HeaderSlice;
use qpip_device::net::wire::{self, icmp4, Arp, Mac, BROADCAST_MAC, ETH_LEN};

use super::segment::Frame;
use super::*;

/// The most of an offending packet an ICMPv4 error quotes: what fits the 576 bytes every
/// host takes (RFC 1812 §4.3.2.3) after the IPv4 and ICMP headers.
const QUOTE_MAX: usize = 576 - 20 - 8;

impl Peer {
    /// An IPv4 packet the device sent (from its header on): a well-formed header of 20
    /// bytes (the device sends no options) with a checksum that verifies and a TTL that is
    /// not 0 (RFC 1122 §3.2.1.7), then TCP, ICMPv4 to the test, or a fragment.
    pub(super) fn classify_ipv4(&self, eth_dst: Mac, ip: &[u8]) -> Frame {
        let h = Ipv4HeaderSlice::from_slice(ip).expect("an IPv4 header from the device");
        assert_eq!(h.ihl(), 5, "the device sends no IPv4 options");
        assert_eq!(
            h.to_header().calc_header_checksum(),
            h.header_checksum(),
            "IPv4 header checksum"
        );
        assert_ne!(h.ttl(), 0, "a TTL of 0 (RFC 1122 §3.2.1.7)");
        let total = h.total_len() as usize;
        assert!((20..=ip.len()).contains(&total), "IPv4 total length");
        if h.more_fragments() || h.fragments_offset().value() != 0 {
            return Frame::Fragment(total);
        }
        let (src, dst) = (
            wire::mapped(h.source_addr()),
            wire::mapped(h.destination_addr()),
        );
        let upper = &ip[20..total];
        match h.protocol().0 {
            TCP => self.tcp_seg(src, dst, upper, total, eth_dst, Some(h.dont_fragment())),
            ICMPV4 if dst == self.addr && upper.len() >= 8 => {
                let m = wire::parse_icmpv4(upper).expect("an ICMPv4 checksum that verifies");
                Frame::Icmp(m.ty, m.code, upper[4..].to_vec())
            }
            _ => Frame::Other,
        }
    }

    // ---- ARP ----------------------------------------------------------------------------

    /// Injects an ARP message (from its sender's MAC) to the Ethernet address `to`.
    pub fn inject_arp(&mut self, m: &Arp, to: &Mac) {
        let f = wire::arp_frame(m, to);
        self.inject_frame(&f);
    }

    /// The test asks, by broadcast, for the MAC of `target`.
    pub fn arp_request(&mut self, target: Ipv6Addr) {
        let m = Arp {
            request: true,
            sender_mac: self.mac,
            sender_ip: self.addr,
            target_mac: [0; 6],
            target_ip: target,
        };
        self.inject_arp(&m, &BROADCAST_MAC);
    }

    /// The test answers the device's request `req` with its MAC.
    pub fn arp_reply(&mut self, req: &Arp) {
        let m = Arp {
            request: false,
            sender_mac: self.mac,
            sender_ip: req.target_ip,
            target_mac: req.sender_mac,
            target_ip: req.sender_ip,
        };
        self.inject_arp(&m, &req.sender_mac);
    }

    /// The next ARP message the device sends, with the frame's destination, announcements
    /// of its own address (RFC 5227 §2.3) passed over (they stay in [`Peer::log`]); it
    /// waits up to [`WAIT`].
    pub fn next_arp(&mut self) -> (Mac, Arp) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            while let Some((to, m)) = self.arps.pop_front() {
                if !is_announcement(&m, &self.dev) {
                    return (to, m);
                }
            }
            assert!(
                Instant::now() < deadline,
                "the device sent no ARP within {WAIT:?}"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The ARP messages the device sent that nothing took, announcements aside.
    pub fn arps_pending(&mut self) -> Vec<(Mac, Arp)> {
        self.pump();
        let dev = self.dev;
        self.arps
            .drain(..)
            .filter(|(_, m)| !is_announcement(m, &dev))
            .collect()
    }

    /// The device's next ARP message is a request for `target`, broadcast (unicast
    /// requests are reachability probes); returns it.
    #[track_caller]
    pub fn expect_arp_request(&mut self, target: Ipv6Addr) -> Arp {
        let (to, m) = self.next_arp();
        assert!(m.request, "an ARP request: {m:?}");
        assert_eq!(to, BROADCAST_MAC, "a broadcast request");
        assert_eq!(
            (m.sender_mac, m.sender_ip, m.target_ip),
            (DEV_MAC, self.dev, target),
            "a request from the device for {target}"
        );
        m
    }

    // ---- ICMPv4 errors ----------------------------------------------------------------------

    /// An ICMPv4 "fragmentation needed and DF set" from the router reporting a next-hop
    /// MTU of `mtu`, quoting the device's last data segment.
    pub fn frag_needed(&mut self, mtu: u16) {
        let q = self.last_data_packet();
        self.frag_needed_quoting(mtu, &q);
    }

    /// [`Peer::frag_needed`] quoting `packet` (an IPv4 packet from its header on).
    pub fn frag_needed_quoting(&mut self, mtu: u16, packet: &[u8]) {
        let [hi, lo] = mtu.to_be_bytes();
        self.icmp4_error(
            icmp4::DEST_UNREACHABLE,
            icmp4::UNREACH_FRAG_NEEDED,
            [0, 0, hi, lo],
            packet,
        );
    }

    /// An ICMPv4 error of type `ty` and `code` (`word` its second 4 bytes) from the
    /// router, quoting as much of `packet` (from its IPv4 header on) as an error holds.
    pub fn icmp4_error(&mut self, ty: u8, code: u8, word: [u8; 4], packet: &[u8]) {
        assert_eq!(self.family, Family::V4, "over IPv6: packet_too_big");
        let mut body = word.to_vec();
        body.extend_from_slice(&packet[..packet.len().min(QUOTE_MAX)]);
        let m = wire::icmpv4(ty, code, &body);
        let f = self.ip_frame_from(&self.router, ICMPV4, &m);
        self.inject_frame(&f);
    }

    /// The device's last TCP segment with data, from its IP header on.
    pub fn last_data_packet(&self) -> Vec<u8> {
        let f = self
            .last_data_frame
            .as_ref()
            .expect("the device sent data to quote");
        f[ETH_LEN..].to_vec()
    }
}

/// Whether an ARP message announces the device's own address (sender and target both it).
fn is_announcement(m: &Arp, dev: &Ipv6Addr) -> bool {
    m.sender_ip == *dev && m.target_ip == *dev
}
