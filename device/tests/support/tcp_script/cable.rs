//! The test's end of the cable: frames built and injected, what the device sent taken
//! off, parsed and checked, and waited for.

use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use etherparse::TcpHeader;
use qpip_device::backend::{Backend, MAX_FRAME};
use qpip_device::net::wire::{self, Ipv4Fields, Mac};

use super::segment::{parse_opts, Frame, Seg};
use super::*;

/// A TCP checksum over the pseudo-header of the addresses' family (etherparse's, not the
/// device's).
fn tcp_checksum(h: &TcpHeader, src: &Ipv6Addr, dst: &Ipv6Addr, payload: &[u8]) -> u16 {
    match (wire::ipv4_of(src), wire::ipv4_of(dst)) {
        (Some(s), Some(d)) => h.calc_checksum_ipv4_raw(s.octets(), d.octets(), payload),
        _ => h.calc_checksum_ipv6_raw(src.octets(), dst.octets(), payload),
    }
    .expect("size")
}

impl Peer {
    /// An IP packet (of the test's family) from `src` to the device, `upper` after the
    /// header chain `next` (IPv6) or of protocol `next` (IPv4), in a frame from the
    /// test's MAC.
    pub fn ip_frame_from(&self, src: &Ipv6Addr, next: u8, upper: &[u8]) -> Vec<u8> {
        let mut f = match self.family {
            Family::V6 => wire::ipv6_packet(src, &self.dev, next, 64, upper),
            // As Linux does: DF on TCP only (and an identifier of 0 where it is set, RFC
            // 6864 §4.1).
            Family::V4 => {
                let fields = Ipv4Fields::whole(next, 64, 0, next == TCP);
                wire::ipv4_packet(src, &self.dev, &fields, upper)
            }
        };
        wire::write_ethernet(&mut f, &DEV_MAC, &self.mac);
        f
    }

    /// [`Peer::ip_frame_from`] the test's address.
    pub fn ip_frame(&self, next: u8, upper: &[u8]) -> Vec<u8> {
        self.ip_frame_from(&self.addr, next, upper)
    }

    /// Sends a whole Ethernet frame to the device.
    pub fn inject_frame(&mut self, f: &[u8]) {
        self.link.send(f).expect("the cable takes the frame");
    }

    /// A TCP segment (header with checksum, then payload) from the test to the device.
    pub fn tcp_bytes(&self, h: &TcpHeader, payload: &[u8]) -> Vec<u8> {
        let mut h = h.clone();
        h.checksum = tcp_checksum(&h, &self.addr, &self.dev, payload);
        let mut b = h.to_bytes().to_vec();
        b.extend_from_slice(payload);
        b
    }

    /// Injects a TCP segment in a plain IP packet.
    pub fn inject_tcp(&mut self, h: &TcpHeader, payload: &[u8]) {
        let b = self.tcp_bytes(h, payload);
        let f = self.ip_frame(TCP, &b);
        self.inject_frame(&f);
    }

    /// Injects an IP packet whose payload is `upper` after the header chain `next` (for
    /// extension headers built by the caller), or over IPv4 of protocol `next`.
    pub fn inject_ip(&mut self, next: u8, upper: &[u8]) {
        let f = self.ip_frame(next, upper);
        self.inject_frame(&f);
    }

    /// The device's last TCP segment, from its IP header on.
    pub fn last_tcp_packet(&self) -> Vec<u8> {
        let f = self
            .last_tcp_frame
            .as_ref()
            .expect("the device sent a segment");
        f[wire::ETH_LEN..].to_vec()
    }

    /// A destination unreachable of `code` from the router (ICMPv6 type 1, or ICMPv4
    /// type 3 over IPv4), quoting `packet` (from its IP header on) as far as an error
    /// holds.
    pub fn dest_unreachable(&mut self, code: u8, packet: &[u8]) {
        if self.family == Family::V4 {
            return self.icmp4_error(3, code, [0; 4], packet);
        }
        let mut body = vec![0u8; 4];
        body.extend_from_slice(&packet[..packet.len().min(1280 - 40 - 8)]);
        let m = wire::icmpv6(&self.router, &self.dev, 1, code, &body);
        let f = self.ip_frame_from(&self.router, ICMPV6, &m);
        self.inject_frame(&f);
    }

    /// An ICMPv6 packet too big from [`ROUTER`] reporting `mtu`, quoting the device's last
    /// data segment (as much as fits the minimum MTU, RFC 4443 §3.2).
    pub fn packet_too_big(&mut self, mtu: u32) {
        assert_eq!(self.family, Family::V6, "over IPv4: frag_needed");
        let q = self
            .last_data_frame
            .clone()
            .expect("the device sent data to quote");
        let q = &q[wire::ETH_LEN..q.len().min(wire::ETH_LEN + 1280 - 40 - 8)];
        let mut body = mtu.to_be_bytes().to_vec();
        body.extend_from_slice(q);
        let m = wire::icmpv6(&self.router, &self.dev, 2, 0, &body);
        let f = self.ip_frame_from(&self.router, ICMPV6, &m);
        self.inject_frame(&f);
    }

    /// Takes what the device sent so far into the inbox.
    pub(super) fn pump(&mut self) {
        let mut buf = vec![0u8; MAX_FRAME];
        while let Ok(Some(n)) = self.link.recv(&mut buf) {
            let f = buf[..n].to_vec();
            let fr = self.classify(&f);
            if let Frame::Tcp(s) = &fr {
                self.tcp_seen += 1;
                self.last_tcp_frame = Some(f.clone());
                if !s.payload.is_empty() {
                    self.last_data_frame = Some(f.clone());
                }
                if let Some((v, _)) = s.ts() {
                    self.last_ts = v;
                }
            }
            self.log.push(fr.clone());
            match fr {
                Frame::Other => {}
                Frame::Arp(to, m) => self.arps.push_back((to, m)),
                fr => self.inbox.push_back(fr),
            }
        }
    }

    fn classify(&self, f: &[u8]) -> Frame {
        if f.len() < wire::ETH_LEN {
            return Frame::Other;
        }
        let eth_dst: Mac = f[..6].try_into().unwrap();
        let ip = &f[wire::ETH_LEN..];
        match u16::from_be_bytes([f[12], f[13]]) {
            wire::ETHERTYPE_IPV6 => self.classify_ipv6(eth_dst, ip),
            wire::ETHERTYPE_IPV4 => self.classify_ipv4(eth_dst, ip),
            wire::ETHERTYPE_ARP => Frame::Arp(
                eth_dst,
                wire::parse_arp(ip).expect("Ethernet/IPv4 ARP from the device"),
            ),
            _ => Frame::Other,
        }
    }

    fn classify_ipv6(&self, eth_dst: Mac, ip: &[u8]) -> Frame {
        if ip.len() < 40 {
            return Frame::Other;
        }
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        assert!(
            ip.len() >= 40 + plen,
            "IPv6 payload length beyond the frame"
        );
        let (next, upper) = (ip[6], &ip[40..40 + plen]);
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
        match next {
            FRAGMENT => Frame::Fragment(40 + plen),
            ICMPV6 if upper.len() >= 4 && dst == self.addr => {
                assert!(
                    wire::checksum_ok(&src, &dst, ICMPV6, upper),
                    "ICMPv6 checksum"
                );
                Frame::Icmp(upper[0], upper[1], upper[4..].to_vec())
            }
            TCP => self.tcp_seg(src, dst, upper, 40 + plen, eth_dst, None),
            _ => Frame::Other,
        }
    }

    /// A TCP segment from the device in an IP packet of `ip_len` bytes (`df`: IPv4's
    /// "don't fragment"); its checksum must verify.
    pub(super) fn tcp_seg(
        &self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        upper: &[u8],
        ip_len: usize,
        eth_dst: Mac,
        df: Option<bool>,
    ) -> Frame {
        assert_eq!((src, dst), (self.dev, self.addr), "TCP to the test");
        let (h, payload) = TcpHeader::from_slice(upper).expect("a TCP header");
        let sum = tcp_checksum(&h, &src, &dst, payload);
        assert_eq!(sum, h.checksum, "TCP checksum");
        Frame::Tcp(Seg {
            opts: parse_opts(h.options.as_slice()),
            h,
            payload: payload.to_vec(),
            ip_len,
            eth_dst,
            df,
        })
    }

    /// The next frame the device sends that is not [`Frame::Other`] (it waits up to
    /// [`WAIT`]).
    pub fn next_frame(&mut self) -> Frame {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            if let Some(f) = self.inbox.pop_front() {
                return f;
            }
            assert!(
                Instant::now() < deadline,
                "the device sent nothing within {WAIT:?} (after `{}`)",
                self.line
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The next TCP segment the device sends (ICMPv6 before it is an error).
    pub fn next_seg(&mut self) -> Seg {
        match self.next_frame() {
            Frame::Tcp(s) => s,
            f => panic!("expected a TCP segment, the device sent {f:?}"),
        }
    }

    /// The next ICMPv6 (over IPv4, ICMPv4) message the device sends (a TCP segment first
    /// is an error).
    pub fn next_icmp(&mut self) -> (u8, u8, Vec<u8>) {
        match self.next_frame() {
            Frame::Icmp(t, c, b) => (t, c, b),
            f => panic!("expected ICMPv6, the device sent {f:?}"),
        }
    }
}
