//! A raw QP's outgoing frame, checked and finished as a NIC would: its length, its
//! checksum offload (Linux's `CHECKSUM_PARTIAL`) and its TCP segmentation offload. Pure
//! functions over the frame's bytes, which come from the guest: every offset is checked
//! before it is used.

use qpip_abi::wqe::{RawTxOffload, RAW_GSO_TCPV4, RAW_GSO_TCPV6};

use crate::net::checksum;
use crate::net::gso;
use crate::net::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, IPV4_LEN, IPV6_LEN};

/// The shortest frame a raw QP sends: the Ethernet header and an 802.2 LLC header, the
/// shortest payload anything on a link carries (the link pads to 60 bytes).
pub const MIN_FRAME: usize = ETH_LEN + 3;

/// The largest TSO super-segment: an IP packet of 65,535 bytes and its Ethernet header.
pub const MAX_TSO_FRAME: usize = ETH_LEN + 65535;

/// The smallest TSO segment size (Linux's `TCP_MIN_MSS`).
pub const MIN_MSS: u16 = 88;

/// Why a frame is refused (its WR completes `BAD_WQE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Shorter than [`MIN_FRAME`].
    TooShort,
    /// Longer than the MTU allows (or, with TSO, than [`MAX_TSO_FRAME`]).
    TooLong,
    /// Checksum or TSO fields that do not fit the frame.
    BadOffload,
}

/// What to hand the link: the frame, finished, and 0 or the segment size of a TCP
/// super-frame (the link cuts it, or takes it whole).
#[derive(Debug)]
pub struct Ready {
    pub frame: Vec<u8>,
    pub mss: u16,
    /// Frames it makes on the wire.
    pub segments: usize,
}

/// Checks `frame` against the link's `mtu` and applies its offloads (`csum`, `tso`, with
/// `o`'s fields).
pub fn prepare(
    mut frame: Vec<u8>,
    csum: bool,
    tso: bool,
    o: &RawTxOffload,
    mtu: usize,
) -> Result<Ready, Refused> {
    if frame.len() < MIN_FRAME {
        return Err(Refused::TooShort);
    }
    if tso {
        return prepare_tso(frame, o, mtu);
    }
    if frame.len() > mtu + ETH_LEN {
        return Err(Refused::TooLong);
    }
    if o.mss != 0 || o.gso_type != 0 {
        return Err(Refused::BadOffload);
    }
    if csum {
        fill_checksum(&mut frame, o.csum_start as usize, o.csum_offset as usize)?;
    } else if o.csum_start != 0 || o.csum_offset != 0 {
        return Err(Refused::BadOffload);
    }
    Ok(Ready {
        frame,
        mss: 0,
        segments: 1,
    })
}

/// `CHECKSUM_PARTIAL`: the ones' complement sum from `start` to the frame's end (the
/// field at `start + offset` holding the pseudo-header's sum), complemented, stored in
/// that field; a result of 0 goes as 0xffff, as Linux's `skb_checksum_help` stores it.
pub fn fill_checksum(frame: &mut [u8], start: usize, offset: usize) -> Result<(), Refused> {
    let at = start.checked_add(offset).ok_or(Refused::BadOffload)?;
    if start < ETH_LEN || at + 2 > frame.len() {
        return Err(Refused::BadOffload);
    }
    let sum = !checksum::sum(0, &frame[start..]);
    let sum = if sum == 0 { 0xffff } else { sum };
    frame[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    Ok(())
}

/// A TCP super-segment: Ethernet, IPv4 without options (not a fragment) or IPv6 with TCP
/// next, lengths consistent, the checksum offload on the TCP checksum, and segments of
/// `o.mss` that fit the MTU. Its IPv4 header checksum and its TCP checksum are computed
/// here in full (the pseudo-header sum Linux leaves for a GSO frame lacks the length), so
/// the frame is valid whole and each segment cut from it is too.
fn prepare_tso(mut frame: Vec<u8>, o: &RawTxOffload, mtu: usize) -> Result<Ready, Refused> {
    if frame.len() > MAX_TSO_FRAME {
        return Err(Refused::TooLong);
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let iph = match (o.gso_type, ethertype) {
        (RAW_GSO_TCPV4, ETHERTYPE_IPV4) => IPV4_LEN,
        (RAW_GSO_TCPV6, ETHERTYPE_IPV6) => IPV6_LEN,
        _ => return Err(Refused::BadOffload),
    };
    let headers = gso::frame_headers_len(&frame).ok_or(Refused::BadOffload)?;
    if o.csum_start as usize != ETH_LEN + iph || o.csum_offset != 16 {
        return Err(Refused::BadOffload);
    }
    let mss = o.mss;
    if mss < MIN_MSS || headers - ETH_LEN + mss as usize > mtu {
        return Err(Refused::BadOffload);
    }
    let l4 = ETH_LEN + iph;
    let addr = |at: usize, n: usize| -> std::net::Ipv6Addr {
        if n == 4 {
            let a: [u8; 4] = frame[at..at + 4].try_into().expect("4 bytes");
            std::net::Ipv4Addr::from(a).to_ipv6_mapped()
        } else {
            let a: [u8; 16] = frame[at..at + 16].try_into().expect("16 bytes");
            std::net::Ipv6Addr::from(a)
        }
    };
    let (src, dst) = if iph == IPV4_LEN {
        (addr(ETH_LEN + 12, 4), addr(ETH_LEN + 16, 4))
    } else {
        (addr(ETH_LEN + 8, 16), addr(ETH_LEN + 24, 16))
    };
    if iph == IPV4_LEN {
        let ip = &mut frame[ETH_LEN..l4];
        ip[10..12].copy_from_slice(&[0, 0]);
        let sum = !checksum::sum(0, ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    let tcp_len = frame.len() - l4;
    frame[l4 + 16..l4 + 18].copy_from_slice(&[0, 0]);
    let pseudo = checksum::pseudo_header(&src, &dst, 6, tcp_len as u32);
    let sum = !checksum::sum(pseudo, &frame[l4..]);
    frame[l4 + 16..l4 + 18].copy_from_slice(&sum.to_be_bytes());
    let payload = frame.len() - headers;
    let segments = payload.div_ceil(mss as usize).max(1);
    Ok(Ready {
        frame,
        // A payload of one segment or less goes as it is.
        mss: if segments > 1 { mss } else { 0 },
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4_frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETH_LEN + IPV4_LEN + 8];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let ip = &mut f[ETH_LEN..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((IPV4_LEN + 8 + payload.len()) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let u = &mut f[ETH_LEN + IPV4_LEN..];
        u[0..2].copy_from_slice(&1000u16.to_be_bytes());
        u[2..4].copy_from_slice(&2000u16.to_be_bytes());
        u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_partial_checksum_is_completed_as_linux_leaves_it() {
        let mut f = udp4_frame(b"hello, raw");
        let l4 = ETH_LEN + IPV4_LEN;
        let src = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped();
        let dst = std::net::Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped();
        let pseudo = checksum::pseudo_header(&src, &dst, 17, (f.len() - l4) as u32);
        f[l4 + 6..l4 + 8].copy_from_slice(&pseudo.to_be_bytes());
        fill_checksum(&mut f, l4, 6).unwrap();
        assert!(crate::net::wire::checksum_ok(&src, &dst, 17, &f[l4..]));
    }

    #[test]
    fn offsets_outside_the_frame_are_refused() {
        let f = udp4_frame(b"x");
        let o = |csum_start, csum_offset| RawTxOffload {
            csum_start,
            csum_offset,
            ..Default::default()
        };
        let len = f.len() as u16;
        for (s, off) in [(0, 6), (13, 0), (len - 1, 0), (len, 0), (40, u16::MAX)] {
            assert_eq!(
                prepare(f.clone(), true, false, &o(s, off), 1500).unwrap_err(),
                Refused::BadOffload,
                "{s} {off}"
            );
        }
        assert_eq!(
            prepare(f.clone(), false, false, &o(34, 6), 1500).unwrap_err(),
            Refused::BadOffload,
            "offload fields without the flag"
        );
        assert_eq!(
            prepare(vec![0; 16], false, false, &o(0, 0), 1500).unwrap_err(),
            Refused::TooShort
        );
        assert_eq!(
            prepare(vec![0; 1515], false, false, &o(0, 0), 1500).unwrap_err(),
            Refused::TooLong
        );
        assert!(prepare(vec![0; 1514], false, false, &o(0, 0), 1500).is_ok());
    }
}
