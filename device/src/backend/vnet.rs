//! The virtio-net header (`struct virtio_net_hdr`, 10 bytes) that a TAP opened with
//! `IFF_VNET_HDR` puts before every frame, both ways: what offloads a frame needs.
//!
//! Sending, the device uses it to hand the kernel a TCP super-frame (`gso_type` TCPV6,
//! `gso_size` the MSS, the checksum left partial) that the kernel cuts into segments, or
//! not at all if the frame stays in the host. Receiving, the kernel uses it to hand the
//! device frames it did not finish: a partial checksum (`NEEDS_CSUM`: the checksum field
//! holds only the pseudo-header's sum, the rest is to be summed from `csum_start` and
//! stored at `csum_start + csum_offset`), or a frame GRO made of several segments (a GSO
//! type, larger than the MTU). [`finish_rx`] completes such a frame so the stack sees an
//! ordinary packet with a valid checksum, whatever its size.
//!
//! The header and the frame come from outside: every field is checked against the frame
//! before it is used, and a frame that does not fit is refused (the caller counts it).

/// `flags`: the checksum is partial (see the module text).
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum was verified (the kernel says so; the stack checks it anyway).
pub const F_DATA_VALID: u8 = 2;
/// `gso_type` values.
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

/// Bytes of the header as a TAP reads and writes it (the default `TUNSETVNETHDRSZ`).
pub const LEN: usize = 10;

/// The header's fields, in the host's byte order (what a TAP uses unless told otherwise
/// with TUNSETVNETLE/BE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        let b: &[u8; LEN] = b.get(..LEN)?.try_into().ok()?;
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn to_bytes(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// The header for a TCP/IPv6 super-frame of `headers` bytes of Ethernet, IPv6 and TCP
    /// headers, to be cut into segments of `mss` payload bytes, its checksum left partial.
    pub fn tcp6_gso(headers: usize, mss: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV6,
            hdr_len: headers as u16,
            gso_size: mss,
            csum_start: 14 + 40,
            csum_offset: 16,
        }
    }

    /// The same for a TCP/IPv4 super-frame (an IPv4 header without options).
    pub fn tcp4_gso(headers: usize, mss: u16) -> VnetHdr {
        VnetHdr {
            gso_type: GSO_TCPV4,
            csum_start: 14 + 20,
            ..VnetHdr::tcp6_gso(headers, mss)
        }
    }
}

/// Why a received frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError {
    /// Shorter than a virtio-net header.
    Short,
    /// `NEEDS_CSUM` with a checksum position outside the frame (or not on a 16-bit word
    /// of the summed range).
    BadChecksumPosition,
    /// A GSO type the device did not ask for (TUNSETOFFLOAD) or does not know.
    BadGsoType,
}

/// Completes a received frame as its header says (`frame` is the frame after the header)
/// so the stack can take it as an ordinary packet: a partial checksum is summed and
/// stored. A GRO'd frame (a GSO type) is left whole: the stack takes segments larger than
/// the MTU. Nothing else is changed.
pub fn finish_rx(h: &VnetHdr, frame: &mut [u8]) -> Result<(), RxError> {
    match h.gso_type & !GSO_ECN {
        GSO_NONE | GSO_TCPV6 | GSO_TCPV4 | GSO_UDP_L4 => {}
        _ => return Err(RxError::BadGsoType),
    }
    if h.flags & F_NEEDS_CSUM != 0 {
        let start = h.csum_start as usize;
        let at = start + h.csum_offset as usize;
        if start < 14 || h.csum_offset & 1 != 0 || at + 2 > frame.len() {
            return Err(RxError::BadChecksumPosition);
        }
        // The field holds the pseudo-header's sum: summing from csum_start over the rest,
        // field included, gives the whole sum.
        let sum = !crate::net::checksum::sum(0, &frame[start..]);
        frame[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(())
}

/// Prepares a TCP super-frame's checksum for a `NEEDS_CSUM` header: the TCP checksum
/// field gets the sum of the pseudo-header (over the whole TCP length), so the receiver of
/// each segment (or the kernel's segmentation) completes it. `src`/`dst` are its addresses
/// (IPv4 ones mapped: the IPv4 pseudo-header is summed then).
pub fn partial_tcp_checksum(
    src: &std::net::Ipv6Addr,
    dst: &std::net::Ipv6Addr,
    tcp_len: usize,
) -> [u8; 2] {
    crate::net::checksum::pseudo_header(src, dst, crate::net::wire::proto::TCP, tcp_len as u32)
        .to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = VnetHdr::tcp6_gso(86, 1428);
        assert_eq!(VnetHdr::parse(&h.to_bytes()), Some(h));
        assert_eq!(VnetHdr::parse(&[0; 9]), None);
        assert_eq!(VnetHdr::parse(&[0; 10]), Some(VnetHdr::default()));
    }

    #[test]
    fn a_partial_checksum_is_completed() {
        let s: std::net::Ipv6Addr = "fd51:5050::1".parse().unwrap();
        let d: std::net::Ipv6Addr = "fd51:5050::1:1".parse().unwrap();
        let h = crate::net::tcp::wire::Header {
            src_port: 5,
            dst_port: 6,
            flags: crate::net::tcp::wire::flags::ACK,
            ..Default::default()
        };
        let seg = crate::net::tcp::wire::build(&s, &d, &h, &[7u8; 3001]);
        let mut frame = crate::net::wire::ipv6_packet(&s, &d, 6, 64, &seg);
        // As a kernel hands it over: the checksum field holds the pseudo-header's sum.
        let p = partial_tcp_checksum(&s, &d, seg.len());
        frame[54 + 16..54 + 18].copy_from_slice(&p);
        let vh = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 54,
            csum_offset: 16,
            ..Default::default()
        };
        finish_rx(&vh, &mut frame).unwrap();
        assert_eq!(&frame[54..], &seg[..]);
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut f = vec![0u8; 100];
        let mut h = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 90,
            csum_offset: 9,
            ..Default::default()
        };
        assert_eq!(finish_rx(&h, &mut f), Err(RxError::BadChecksumPosition));
        h.csum_offset = 8;
        assert_eq!(finish_rx(&h, &mut f), Ok(()));
        h.csum_start = 0xffff;
        h.csum_offset = 0xffff;
        assert_eq!(finish_rx(&h, &mut f), Err(RxError::BadChecksumPosition));
        h.csum_start = 20;
        h.csum_offset = 7;
        assert_eq!(finish_rx(&h, &mut f), Err(RxError::BadChecksumPosition));
        h.csum_start = 2;
        h.csum_offset = 0;
        assert_eq!(finish_rx(&h, &mut f), Err(RxError::BadChecksumPosition));
        h.flags = 0;
        h.gso_type = 9;
        assert_eq!(finish_rx(&h, &mut f), Err(RxError::BadGsoType));
        // Any header at all on any frame: an answer, never a panic.
        let mut x: u64 = 1;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = x.to_ne_bytes().to_vec();
            b.extend_from_slice(&(x >> 17).to_ne_bytes()[..2]);
            let h = VnetHdr::parse(&b).unwrap();
            let mut f = vec![0u8; (x % 200) as usize];
            let _ = finish_rx(&h, &mut f);
        }
    }
}
