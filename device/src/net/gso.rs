//! Segmentation offload in software: a TCP "super-segment" carrying several MSS of
//! payload (built once, headers and all, by a connection that has that much to send) is
//! cut into the segments the wire carries, exactly as a NIC with TSO or Linux's GSO cuts
//! one: every piece has the same header with the sequence number advanced, the IP length
//! (IPv6's payload length, IPv4's total length with its identification advanced and header
//! checksum fixed) and the TCP checksum fixed, FIN and PSH only on the last piece, CWR
//! only on the first.
//!
//! A link that can take super-frames whole (a TAP with offloads, the in-process memory
//! wire, the cable between two qpipd) gets them whole ([`crate::backend::Backend::send_gso`]);
//! others, the capture and the impairment get the pieces from here.
//!
//! Everything here also runs on frames that did not come from the device (a capture of a
//! frame a peer sent is never cut, but the functions check every length anyway): a frame
//! that is not a well-formed IPv6/TCP or IPv4/TCP super-frame (an IPv4 header without
//! options, not a fragment) is refused, never indexed out of bounds.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::wire::{proto, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, IPV4_LEN, IPV6_LEN};

/// TCP flags that belong to the last piece only (FIN, PSH) and to the first only (CWR).
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// Why a frame could not be cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoError {
    /// Not Ethernet + IPv6 (or IPv4) + TCP with consistent lengths.
    Malformed,
    /// A segment size of zero.
    BadSize,
}

/// Cuts the TCP segment `upper` (header with options, then payload; sent from `src` to
/// `dst`) into segments of at most `mss` payload bytes, each with its checksum, handed to
/// `out` in order. A segment no longer than `mss` comes out unchanged but for the checksum.
pub fn split_tcp(
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    upper: &[u8],
    mss: usize,
    mut out: impl FnMut(Vec<u8>),
) -> Result<(), GsoError> {
    if mss == 0 {
        return Err(GsoError::BadSize);
    }
    let thl = tcp_header_len(upper)?;
    let (head, payload) = upper.split_at(thl);
    let seq0 = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let flags = head[13];
    let pieces = payload.len().div_ceil(mss).max(1);
    for i in 0..pieces {
        let at = i * mss;
        let chunk = &payload[at..(at + mss).min(payload.len())];
        let mut seg = Vec::with_capacity(thl + chunk.len());
        seg.extend_from_slice(head);
        seg.extend_from_slice(chunk);
        seg[4..8].copy_from_slice(&seq0.wrapping_add(at as u32).to_be_bytes());
        let mut f = flags;
        if i + 1 < pieces {
            f &= !(FIN | PSH);
        }
        if i > 0 {
            f &= !CWR;
        }
        seg[13] = f;
        seg[16..18].copy_from_slice(&[0, 0]);
        let sum = !checksum::sum(
            checksum::pseudo_header(src, dst, proto::TCP, seg.len() as u32),
            &seg,
        );
        seg[16..18].copy_from_slice(&sum.to_be_bytes());
        out(seg);
    }
    Ok(())
}

/// The length of the TCP header at the start of `seg`, checked against `seg`.
fn tcp_header_len(seg: &[u8]) -> Result<usize, GsoError> {
    if seg.len() < 20 {
        return Err(GsoError::Malformed);
    }
    let thl = (seg[12] >> 4) as usize * 4;
    if thl < 20 || thl > seg.len() {
        return Err(GsoError::Malformed);
    }
    Ok(thl)
}

/// The parts of an Ethernet + IP + TCP frame: its addresses (IPv4 ones mapped, as
/// [`split_tcp`] takes them) and the IP header's length. IPv6 without extension headers,
/// or IPv4 without options and not a fragment; the IP length must match the frame.
fn tcp_frame(frame: &[u8]) -> Result<(Ipv6Addr, Ipv6Addr, usize), GsoError> {
    if frame.len() < ETH_LEN + IPV4_LEN + 20 {
        return Err(GsoError::Malformed);
    }
    let ip = &frame[ETH_LEN..];
    match u16::from_be_bytes([frame[12], frame[13]]) {
        ETHERTYPE_IPV6 => {
            if ip.len() < IPV6_LEN + 20 || ip[0] >> 4 != 6 || ip[6] != proto::TCP {
                return Err(GsoError::Malformed);
            }
            let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
            if plen != ip.len() - IPV6_LEN {
                return Err(GsoError::Malformed);
            }
            let src: [u8; 16] = ip[8..24].try_into().expect("16 bytes");
            let dst: [u8; 16] = ip[24..40].try_into().expect("16 bytes");
            Ok((Ipv6Addr::from(src), Ipv6Addr::from(dst), IPV6_LEN))
        }
        ETHERTYPE_IPV4 => {
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
            if ip[0] != 0x45 || ip[9] != proto::TCP || total != ip.len() || fragment {
                return Err(GsoError::Malformed);
            }
            let src: [u8; 4] = ip[12..16].try_into().expect("4 bytes");
            let dst: [u8; 4] = ip[16..20].try_into().expect("4 bytes");
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            Ok((src.to_ipv6_mapped(), dst.to_ipv6_mapped(), IPV4_LEN))
        }
        _ => Err(GsoError::Malformed),
    }
}

/// Cuts an Ethernet + IP + TCP super-frame into frames of at most `mss` TCP payload bytes
/// each (the same Ethernet and IP headers, lengths and checksums fixed; over IPv4 each
/// piece's identification one more than the last's, as a NIC's TSO numbers them).
pub fn split_frame(frame: &[u8], mss: usize, mut out: impl FnMut(Vec<u8>)) -> Result<(), GsoError> {
    let (src, dst, iph) = tcp_frame(frame)?;
    let head = &frame[..ETH_LEN + iph];
    let id0 = u16::from_be_bytes([head[ETH_LEN + 4], head[ETH_LEN + 5]]);
    let mut n: u16 = 0;
    split_tcp(&src, &dst, &frame[ETH_LEN + iph..], mss, |seg| {
        let mut f = Vec::with_capacity(head.len() + seg.len());
        f.extend_from_slice(head);
        if iph == IPV6_LEN {
            f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(seg.len() as u16).to_be_bytes());
        } else {
            let ip = &mut f[ETH_LEN..];
            ip[2..4].copy_from_slice(&((IPV4_LEN + seg.len()) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&id0.wrapping_add(n).to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let sum = !checksum::sum(0, &ip[..IPV4_LEN]);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            n = n.wrapping_add(1);
        }
        f.extend_from_slice(&seg);
        out(f);
    })
}

/// The TCP header length of a super-frame (Ethernet, IP, TCP with options), for a
/// virtio-net header's `hdr_len`; None if it is not one.
pub fn frame_headers_len(frame: &[u8]) -> Option<usize> {
    let (_, _, iph) = tcp_frame(frame).ok()?;
    Some(ETH_LEN + iph + tcp_header_len(&frame[ETH_LEN + iph..]).ok()?)
}

/// Whether a super-frame (as [`frame_headers_len`] accepts) carries IPv4.
pub fn is_ipv4_frame(frame: &[u8]) -> bool {
    frame.len() >= ETH_LEN && u16::from_be_bytes([frame[12], frame[13]]) == ETHERTYPE_IPV4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tcp::wire as tw;

    fn addrs() -> (Ipv6Addr, Ipv6Addr) {
        (
            "fd51:5050::1:1".parse().unwrap(),
            "fd51:5050::1:2".parse().unwrap(),
        )
    }

    fn super_segment(len: usize, fl: u8) -> Vec<u8> {
        let (s, d) = addrs();
        let h = tw::Header {
            src_port: 1000,
            dst_port: 2000,
            seq: 0xffff_ff00,
            ack: 7,
            flags: fl,
            window: 100,
            ..tw::Header::default()
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 + i / 251) as u8).collect();
        tw::build(&s, &d, &h, &payload)
    }

    #[test]
    fn pieces_carry_the_stream_in_order_with_valid_checksums() {
        let (s, d) = addrs();
        let fl = tw::flags::ACK | PSH | FIN | CWR;
        let seg = super_segment(10_000, fl);
        let mut pieces = vec![];
        split_tcp(&s, &d, &seg, 1448, |p| pieces.push(p)).unwrap();
        assert_eq!(pieces.len(), 7);
        let mut data = vec![];
        let mut seq = 0xffff_ff00u32;
        for (i, p) in pieces.iter().enumerate() {
            let parsed = tw::parse(s, d, p).expect("valid segment");
            assert_eq!(parsed.header.seq, seq);
            assert_eq!(parsed.header.ack, 7);
            let last = i == pieces.len() - 1;
            assert_eq!(parsed.header.flags & FIN != 0, last);
            assert_eq!(parsed.header.flags & PSH != 0, last);
            assert_eq!(parsed.header.flags & CWR != 0, i == 0);
            assert!(parsed.payload.len() == 1448 || last);
            seq = seq.wrapping_add(parsed.payload.len() as u32);
            data.extend_from_slice(parsed.payload);
        }
        assert_eq!(data, seg[20..]);
    }

    #[test]
    fn frames_are_cut_with_their_ip_lengths() {
        let (s, d) = addrs();
        let seg = super_segment(3000, tw::flags::ACK);
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        frame.extend_from_slice(&crate::net::wire::ipv6_packet(&s, &d, proto::TCP, 64, &seg)[14..]);
        assert_eq!(frame_headers_len(&frame), Some(74));
        let mut n = 0;
        split_frame(&frame, 1000, |f| {
            let plen = u16::from_be_bytes([f[18], f[19]]) as usize;
            assert_eq!(plen, f.len() - 54);
            assert!(tw::parse(s, d, &f[54..]).is_ok());
            n += 1;
        })
        .unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn malformed_input_is_refused() {
        let (s, d) = addrs();
        assert_eq!(
            split_tcp(&s, &d, &[0; 19], 100, |_| {}),
            Err(GsoError::Malformed)
        );
        let mut bad = super_segment(100, tw::flags::ACK);
        bad[12] = 0xf0; // a 60-byte header in 120 bytes: fine
        assert!(split_tcp(&s, &d, &bad, 10, |_| {}).is_ok());
        bad.truncate(50); // now the header is longer than the segment
        assert_eq!(
            split_tcp(&s, &d, &bad, 10, |_| {}),
            Err(GsoError::Malformed)
        );
        let ok = super_segment(100, tw::flags::ACK);
        assert_eq!(split_tcp(&s, &d, &ok, 0, |_| {}), Err(GsoError::BadSize));
        for len in 0..80 {
            assert!(split_frame(&vec![0x86; len], 10, |_| {}).is_err());
            assert_eq!(frame_headers_len(&vec![0x86; len]), None);
            let mut v4 = vec![0x45; len];
            if len >= 14 {
                v4[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            }
            assert!(split_frame(&v4, 10, |_| {}).is_err());
            assert_eq!(frame_headers_len(&v4), None);
        }
    }

    #[test]
    fn ipv4_frames_are_cut_with_their_lengths_ids_and_header_checksums() {
        use crate::net::wire::{self, Ipv4Fields};
        let s = std::net::Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped();
        let d = std::net::Ipv4Addr::new(198, 18, 0, 2).to_ipv6_mapped();
        let h = tw::Header {
            src_port: 1000,
            dst_port: 2000,
            seq: 5,
            flags: tw::flags::ACK | PSH,
            window: 100,
            ..tw::Header::default()
        };
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let seg = tw::build(&s, &d, &h, &payload);
        let mut frame = wire::ipv4_packet(&s, &d, &Ipv4Fields::whole(6, 64, 0xfffe, true), &seg);
        wire::write_ethernet(&mut frame, &[2; 6], &[4; 6]);
        assert_eq!(frame_headers_len(&frame), Some(54));
        let mut got = Vec::new();
        let mut ids = Vec::new();
        split_frame(&frame, 1000, |f| {
            let ip = wire::parse_ipv4(&f[14..]).expect("a valid IPv4 header");
            assert_eq!((ip.dont_fragment, ip.packet.len()), (true, f.len() - 14));
            let t = tw::parse(s, d, ip.payload()).expect("a valid segment");
            got.extend_from_slice(t.payload);
            ids.push(ip.id);
        })
        .unwrap();
        assert_eq!(got, payload);
        assert_eq!(ids, [0xfffe, 0xffff, 0]);
        // A fragment, or a header with options, is not a super-frame.
        let mut frag = frame.clone();
        frag[14 + 6] |= 0x20;
        assert_eq!(frame_headers_len(&frag), None);
        let mut opts = frame.clone();
        opts[14] = 0x46;
        assert_eq!(frame_headers_len(&opts), None);
    }
}
