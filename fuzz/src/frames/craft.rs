//! Frames built around an operation's fuzzed fields: TCP segments near the live sequence
//! numbers (fragmented or corrupted at will), ICMPv6 echo, NDP, packet too big and errors
//! quoting what the device sent.

use std::net::Ipv6Addr;

use qpip_device::net::tcp::wire::{self as tcpw, Header, Options, SackBlocks};
use qpip_device::net::tcp::FourTuple;
use qpip_device::net::wire::{self, icmp, proto, Mac};

use super::{
    IcmpOp, Num, TcpOp, World, EST_LOCAL_PORT, EST_PEER_PORT, LISTEN_PORT, OUR, OUR_MAC, PEER,
    PEER2, PEER2_MAC, PEER_MAC, PEER_PORT_BASE,
};

impl World {
    pub(super) fn tcp_frames(&self, t: &TcpOp) -> Vec<Vec<u8>> {
        let (src, mac) = if t.from_peer2 {
            (PEER2, PEER2_MAC)
        } else {
            (PEER, PEER_MAC)
        };
        let (sport, dport) = match t.target {
            0 => (EST_PEER_PORT, EST_LOCAL_PORT),
            1 => (PEER_PORT_BASE + t.peer_port as u16, LISTEN_PORT),
            _ => t.ports,
        };
        let tuple = FourTuple {
            local: OUR,
            local_port: dport,
            remote: src,
            remote_port: sport,
        };
        // The live numbers: what the connection expects next and what it has had acked.
        let (seq0, ack0) = match self.table.lookup(&tuple).and_then(|id| self.table.get(id)) {
            Some(e) => (
                e.conn
                    .irs()
                    .wrapping_add(1)
                    .wrapping_add(e.conn.received() as u32),
                e.conn
                    .iss()
                    .wrapping_add(1)
                    .wrapping_add(e.conn.acked() as u32),
            ),
            None => (0x1000_0000 + sport as u32, 0),
        };
        let pick = |n: Num, live: u32| match n {
            Num::Live => live,
            Num::Near(d) => live.wrapping_add(d as i32 as u32),
            Num::Any(v) => v,
        };
        let ack = pick(t.ack, ack0);
        let mut sack = SackBlocks::new();
        for &(o, l) in t.sack.iter().take(4) {
            let l0 = ack.wrapping_add(o as u32);
            sack.push((l0, l0.wrapping_add(l as u32)));
        }
        let h = Header {
            src_port: sport,
            dst_port: dport,
            seq: pick(t.seq, seq0),
            ack,
            flags: t.flags,
            window: t.window,
            urgent: 0,
            options: Options {
                mss: t.mss,
                window_scale: t.wscale,
                sack_permitted: t.sack_permitted,
                timestamps: t.timestamps,
                sack,
            },
        };
        let payload: Vec<u8> = (0..t.payload_len)
            .map(|k| (k as u8).wrapping_mul(t.payload_seed))
            .collect();
        let mut seg = tcpw::build(&src, &OUR, &h, &payload);
        if t.corrupt != 0 {
            let at = (t.corrupt as usize - 1) % seg.len();
            seg[at] ^= 0x10;
        }
        if t.frag_units == 0 {
            return vec![frame_from(mac, src, OUR, proto::TCP, &seg)];
        }
        let size = 8 * t.frag_units as usize;
        let mut frames = Vec::new();
        let mut off = 0;
        while off < seg.len() {
            let end = (off + size).min(seg.len());
            let mut f = wire::ipv6_fragment(
                &src,
                &OUR,
                proto::TCP,
                64,
                0xabcd,
                off,
                end < seg.len(),
                &seg[off..end],
            );
            wire::write_ethernet(&mut f, &OUR_MAC, &mac);
            frames.push(f);
            off = end;
            if off / 8 > 0x1fff {
                break;
            }
        }
        if t.frag_reverse {
            frames.reverse();
        }
        frames
    }

    pub(super) fn icmp_frame(&self, m: &IcmpOp) -> Option<Vec<u8>> {
        let f = match *m {
            IcmpOp::Echo { id, seq, len } => {
                let body = wire::echo_body(id, seq, &vec![0x61; len as usize]);
                let msg = wire::icmpv6(&PEER, &OUR, icmp::ECHO_REQUEST, 0, &body);
                frame_from(PEER_MAC, PEER, OUR, proto::ICMPV6, &msg)
            }
            IcmpOp::Solicit {
                target_ours,
                with_sllao,
                multicast,
            } => {
                let target = if target_ours { OUR } else { PEER2 };
                let dst = if multicast {
                    wire::solicited_node(&target)
                } else {
                    OUR
                };
                let body = wire::ns_body(&target, with_sllao.then_some(&PEER2_MAC));
                let msg = wire::icmpv6(&PEER2, &dst, icmp::NEIGHBOR_SOLICIT, 0, &body);
                let mut f = wire::ipv6_packet(&PEER2, &dst, proto::ICMPV6, 255, &msg);
                let dmac = if multicast {
                    wire::multicast_mac(&dst)
                } else {
                    OUR_MAC
                };
                wire::write_ethernet(&mut f, &dmac, &PEER2_MAC);
                f
            }
            IcmpOp::Advert {
                solicited,
                override_,
                from_peer2,
            } => {
                let (who, mac) = if from_peer2 {
                    (PEER2, PEER2_MAC)
                } else {
                    (PEER, PEER_MAC)
                };
                let body = wire::na_body(&who, solicited, override_, &mac);
                let msg = wire::icmpv6(&who, &OUR, icmp::NEIGHBOR_ADVERT, 0, &body);
                let mut f = wire::ipv6_packet(&who, &OUR, proto::ICMPV6, 255, &msg);
                wire::write_ethernet(&mut f, &OUR_MAC, &mac);
                f
            }
            IcmpOp::TooBig { mtu } => {
                let quoted = self.quoted_segment();
                let mut body = mtu.to_be_bytes().to_vec();
                body.extend_from_slice(&quoted);
                let router: Ipv6Addr = "fe80::1".parse().expect("address");
                let msg = wire::icmpv6(&router, &OUR, icmp::PACKET_TOO_BIG, 0, &body);
                let mut f = wire::ipv6_packet(&router, &OUR, proto::ICMPV6, 64, &msg);
                wire::write_ethernet(&mut f, &OUR_MAC, &PEER_MAC);
                f
            }
            IcmpOp::Error { ty, code } => {
                let mut body = vec![0, 0, 0, 0];
                body.extend_from_slice(&self.quoted_segment());
                let msg = wire::icmpv6(&PEER, &OUR, ty, code, &body);
                frame_from(PEER_MAC, PEER, OUR, proto::ICMPV6, &msg)
            }
        };
        Some(f)
    }

    /// The start of an IPv6 packet the device sent to PEER on the established connection,
    /// as a router quotes it.
    fn quoted_segment(&self) -> Vec<u8> {
        let h = Header {
            src_port: EST_LOCAL_PORT,
            dst_port: EST_PEER_PORT,
            seq: 1,
            ack: 1,
            flags: tcpw::flags::ACK,
            window: 100,
            ..Header::default()
        };
        let seg = tcpw::build(&OUR, &PEER, &h, &[0; 1400]);
        let mut p = wire::ipv6_packet(&OUR, &PEER, proto::TCP, 64, &seg)[wire::ETH_LEN..].to_vec();
        p.truncate(1232);
        p
    }
}

/// An IPv6 frame from `mac` to the device.
pub fn frame_from(mac: Mac, src: Ipv6Addr, dst: Ipv6Addr, next: u8, upper: &[u8]) -> Vec<u8> {
    let mut f = wire::ipv6_packet(&src, &dst, next, 64, upper);
    wire::write_ethernet(&mut f, &OUR_MAC, &mac);
    f
}
