//! TCP segment format: the header, its options (MSS, window scale, SACK-permitted, SACK
//! blocks, timestamps) and the checksum over the IPv6 pseudo-header. No protocol state.
//!
//! The fixed header is read through `etherparse` (which checks the data offset against the
//! length); options are walked here, because a segment with an option we do not know must
//! still be accepted (RFC 9293 §3.1: unknown options are skipped by their length).
//! Checksums use `etherparse`'s one's complement sums.

use std::fmt;
use std::net::Ipv6Addr;

use crate::net::checksum;

use crate::net::wire::proto;

pub const HEADER_LEN: usize = 20;
pub const MAX_OPTIONS_LEN: usize = 40;
/// At most four SACK blocks fit (three beside timestamps).
pub const MAX_SACK_BLOCKS: usize = 4;

/// Header flags.
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Option kinds (RFC 9293, RFC 7323, RFC 2018).
pub mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// Largest window shift (RFC 7323 §2.3).
pub const MAX_WINDOW_SHIFT: u8 = 14;

/// Up to four SACK blocks `(left edge, right edge)` in sequence numbers.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct SackBlocks {
    blocks: [(u32, u32); MAX_SACK_BLOCKS],
    len: u8,
}

impl SackBlocks {
    pub fn new() -> SackBlocks {
        SackBlocks::default()
    }

    pub fn from_slice(b: &[(u32, u32)]) -> SackBlocks {
        let mut s = SackBlocks::new();
        for &x in b.iter().take(MAX_SACK_BLOCKS) {
            s.push(x);
        }
        s
    }

    /// Adds a block; false when full.
    pub fn push(&mut self, b: (u32, u32)) -> bool {
        if (self.len as usize) < MAX_SACK_BLOCKS {
            self.blocks[self.len as usize] = b;
            self.len += 1;
            true
        } else {
            false
        }
    }

    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.blocks[..self.len as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n as u8);
    }
}

impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The options the protocol uses.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Options {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    pub sack: SackBlocks,
}

impl Options {
    /// Bytes the options take on the wire, padded to a multiple of 4 (see [`write_options`]
    /// for the layout). SACK blocks beyond what fits in 40 bytes are not counted (they are
    /// not written).
    pub fn wire_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.timestamps.is_some() {
            n += 12; // [SACK-permitted or NOP NOP] TS
        } else if self.sack_permitted {
            n += 4; // NOP NOP SACK-permitted
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        match self.sack_fitting(n) {
            0 => n,
            k => n + 4 + 8 * k,
        }
    }

    /// How many SACK blocks fit after `used` bytes of other options.
    fn sack_fitting(&self, used: usize) -> usize {
        if self.sack.is_empty() {
            return 0;
        }
        let room = MAX_OPTIONS_LEN.saturating_sub(used + 4) / 8;
        self.sack.len().min(room)
    }
}

/// A TCP header as the protocol sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub urgent: u16,
    pub options: Options,
}

impl Header {
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    pub fn syn(&self) -> bool {
        self.has(flags::SYN)
    }
    pub fn fin(&self) -> bool {
        self.has(flags::FIN)
    }
    pub fn rst(&self) -> bool {
        self.has(flags::RST)
    }
    pub fn ack_flag(&self) -> bool {
        self.has(flags::ACK)
    }
}

/// A parsed segment: addresses from the IPv6 header, the TCP header, the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub header: Header,
    pub payload: &'a [u8],
}

impl Segment<'_> {
    /// SEG.LEN: payload plus one for SYN and one for FIN.
    pub fn seg_len(&self) -> u32 {
        self.payload.len() as u32 + self.header.syn() as u32 + self.header.fin() as u32
    }
}

/// Why a segment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than its header says.
    Truncated,
    /// Data offset below 5, an option whose length is impossible, or a zero port.
    Malformed,
    /// The checksum does not verify.
    Checksum,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ParseError::Truncated => "truncated TCP segment",
            ParseError::Malformed => "malformed TCP header",
            ParseError::Checksum => "bad TCP checksum",
        })
    }
}

impl std::error::Error for ParseError {}

fn pseudo_sum(src: &Ipv6Addr, dst: &Ipv6Addr, len: usize) -> u16 {
    checksum::pseudo_header(src, dst, proto::TCP, len as u32)
}

/// Whether a whole TCP segment (checksum field included) verifies.
pub fn checksum_ok(src: &Ipv6Addr, dst: &Ipv6Addr, segment: &[u8]) -> bool {
    checksum::sum(pseudo_sum(src, dst, segment.len()), segment) == 0xffff
}

/// Parses and verifies a TCP segment that arrived in an IPv6 packet from `src` to `dst`
/// (`bytes` is the upper-layer payload, exactly as long as the packet says).
pub fn parse<'a>(src: Ipv6Addr, dst: Ipv6Addr, bytes: &'a [u8]) -> Result<Segment<'a>, ParseError> {
    let _stage = crate::stages::span(crate::stages::Stage::Parse);
    let h = match etherparse::TcpHeaderSlice::from_slice(bytes) {
        Ok(h) => h,
        Err(etherparse::err::tcp::HeaderSliceError::Len(_)) => return Err(ParseError::Truncated),
        Err(_) => return Err(ParseError::Malformed),
    };
    if h.source_port() == 0 || h.destination_port() == 0 {
        return Err(ParseError::Malformed);
    }
    if !checksum_ok(&src, &dst, bytes) {
        return Err(ParseError::Checksum);
    }
    let hl = h.slice().len();
    let options = parse_options(&bytes[HEADER_LEN..hl])?;
    let header = Header {
        src_port: h.source_port(),
        dst_port: h.destination_port(),
        seq: h.sequence_number(),
        ack: h.acknowledgment_number(),
        flags: bytes[13],
        window: h.window_size(),
        urgent: h.urgent_pointer(),
        options,
    };
    Ok(Segment {
        src,
        dst,
        header,
        payload: &bytes[hl..],
    })
}

/// Walks an option list. Options of a known kind with a wrong length, and options whose
/// length runs past the header, make the segment malformed (RFC 9293 MUST-7: never crash
/// on them; we drop the segment). Unknown kinds are skipped.
pub fn parse_options(mut b: &[u8]) -> Result<Options, ParseError> {
    let mut o = Options::default();
    while let Some(&k) = b.first() {
        match k {
            kind::END => break,
            kind::NOP => {
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        if b.len() < 2 {
            return Err(ParseError::Malformed);
        }
        let len = b[1] as usize;
        if len < 2 || len > b.len() {
            return Err(ParseError::Malformed);
        }
        let v = &b[2..len];
        match k {
            kind::MSS => {
                if len != 4 {
                    return Err(ParseError::Malformed);
                }
                o.mss = Some(u16::from_be_bytes([v[0], v[1]]));
            }
            kind::WINDOW_SCALE => {
                if len != 3 {
                    return Err(ParseError::Malformed);
                }
                // RFC 7323 §2.3: larger shifts are used as 14.
                o.window_scale = Some(v[0].min(MAX_WINDOW_SHIFT));
            }
            kind::SACK_PERMITTED => {
                if len != 2 {
                    return Err(ParseError::Malformed);
                }
                o.sack_permitted = true;
            }
            kind::SACK => {
                if !(len - 2).is_multiple_of(8) || len == 2 {
                    return Err(ParseError::Malformed);
                }
                for c in v.chunks_exact(8) {
                    let l = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                    let r = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
                    o.sack.push((l, r));
                }
            }
            kind::TIMESTAMPS => {
                if len != 10 {
                    return Err(ParseError::Malformed);
                }
                o.timestamps = Some((
                    u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
                    u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
                ));
            }
            _ => {}
        }
        b = &b[len..];
    }
    Ok(o)
}

/// Writes the options, in the layout Linux uses so that the 4-byte fields stay aligned:
/// `MSS`, then `SACK-permitted TS` (or `NOP NOP TS`, or `NOP NOP SACK-permitted`), then
/// `NOP WS`, then `NOP NOP SACK blocks` — as many blocks as still fit in 40 bytes.
pub fn write_options(o: &Options, out: &mut Vec<u8>) {
    let start = out.len();
    if let Some(mss) = o.mss {
        out.extend_from_slice(&[kind::MSS, 4]);
        out.extend_from_slice(&mss.to_be_bytes());
    }
    if let Some((val, ecr)) = o.timestamps {
        if o.sack_permitted {
            out.extend_from_slice(&[kind::SACK_PERMITTED, 2]);
        } else {
            out.extend_from_slice(&[kind::NOP, kind::NOP]);
        }
        out.extend_from_slice(&[kind::TIMESTAMPS, 10]);
        out.extend_from_slice(&val.to_be_bytes());
        out.extend_from_slice(&ecr.to_be_bytes());
    } else if o.sack_permitted {
        out.extend_from_slice(&[kind::NOP, kind::NOP, kind::SACK_PERMITTED, 2]);
    }
    if let Some(ws) = o.window_scale {
        out.extend_from_slice(&[kind::NOP, kind::WINDOW_SCALE, 3, ws]);
    }
    let n = o.sack_fitting(out.len() - start);
    if n > 0 {
        out.extend_from_slice(&[kind::NOP, kind::NOP, kind::SACK, 2 + 8 * n as u8]);
        for &(l, r) in &o.sack.as_slice()[..n] {
            out.extend_from_slice(&l.to_be_bytes());
            out.extend_from_slice(&r.to_be_bytes());
        }
    }
    debug_assert_eq!((out.len() - start) % 4, 0);
    debug_assert!(out.len() - start <= MAX_OPTIONS_LEN);
}

/// Builds a segment from `src` to `dst`: header, options, `payload_len` bytes written by
/// `fill` (the caller reads them from wherever the data lives), then the checksum.
pub fn emit(
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    h: &Header,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + MAX_OPTIONS_LEN + payload_len);
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    write_options(&h.options, &mut out);
    let hl = out.len();
    out[0..2].copy_from_slice(&h.src_port.to_be_bytes());
    out[2..4].copy_from_slice(&h.dst_port.to_be_bytes());
    out[4..8].copy_from_slice(&h.seq.to_be_bytes());
    out[8..12].copy_from_slice(&h.ack.to_be_bytes());
    out[12] = ((hl / 4) as u8) << 4;
    out[13] = h.flags;
    out[14..16].copy_from_slice(&h.window.to_be_bytes());
    out[18..20].copy_from_slice(&h.urgent.to_be_bytes());
    out.resize(hl + payload_len, 0);
    fill(&mut out[hl..]);
    let sum = !checksum::sum(pseudo_sum(src, dst, out.len()), &out);
    out[16..18].copy_from_slice(&sum.to_be_bytes());
    out
}

/// [`emit`] with the payload at hand.
pub fn build(src: &Ipv6Addr, dst: &Ipv6Addr, h: &Header, payload: &[u8]) -> Vec<u8> {
    emit(src, dst, h, payload.len(), |b| b.copy_from_slice(payload))
}

/// Whether a segment we built (at least a header long) carries RST.
pub fn is_reset(segment: &[u8]) -> bool {
    segment.get(13).is_some_and(|f| f & flags::RST != 0)
}

/// The reset answering a segment that belongs to no connection (RFC 9293 §3.10.7.1):
/// `<SEQ=SEG.ACK><CTL=RST>` if it carried an ACK, else `<SEQ=0><ACK=SEG.SEQ+SEG.LEN>
/// <CTL=RST,ACK>`. None for a reset (never answered).
pub fn reset_for(seg: &Segment) -> Option<(Ipv6Addr, Ipv6Addr, Vec<u8>)> {
    if seg.header.rst() {
        return None;
    }
    let mut h = Header {
        src_port: seg.header.dst_port,
        dst_port: seg.header.src_port,
        ..Header::default()
    };
    if seg.header.ack_flag() {
        h.seq = seg.header.ack;
        h.flags = flags::RST;
    } else {
        h.ack = seg.header.seq.wrapping_add(seg.seg_len());
        h.flags = flags::RST | flags::ACK;
    }
    Some((seg.dst, seg.src, build(&seg.dst, &seg.src, &h, &[])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn round_trip_with_all_options() {
        let (s, d) = (a("fe80::1"), a("fe80::2"));
        let h = Header {
            src_port: 1000,
            dst_port: 80,
            seq: 0xdead_beef,
            ack: 7,
            flags: flags::SYN | flags::ACK,
            window: 65535,
            urgent: 0,
            options: Options {
                mss: Some(1440),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((1, 2)),
                sack: SackBlocks::new(),
            },
        };
        let b = build(&s, &d, &h, b"hi");
        assert_eq!(b.len(), 20 + 20 + 2);
        let p = parse(s, d, &b).unwrap();
        assert_eq!(p.header, h);
        assert_eq!(p.payload, b"hi");
        let mut bad = b.clone();
        bad[41] ^= 4;
        assert_eq!(parse(s, d, &bad), Err(ParseError::Checksum));
    }

    #[test]
    fn sack_blocks_fit_forty_bytes() {
        let (s, d) = (a("fe80::1"), a("fe80::2"));
        let blocks = [(1, 2), (3, 4), (5, 6), (7, 8)];
        let mut h = Header {
            src_port: 1,
            dst_port: 2,
            flags: flags::ACK,
            options: Options {
                timestamps: Some((9, 10)),
                sack: SackBlocks::from_slice(&blocks),
                ..Options::default()
            },
            ..Header::default()
        };
        let p = build(&s, &d, &h, &[]);
        assert_eq!(p.len(), 60);
        assert_eq!(h.options.wire_len(), 40);
        let q = parse(s, d, &p).unwrap();
        assert_eq!(q.header.options.sack.as_slice(), &blocks[..3]);
        h.options.timestamps = None;
        let p = build(&s, &d, &h, &[]);
        let q = parse(s, d, &p).unwrap();
        assert_eq!(q.header.options.sack.as_slice(), &blocks);
        assert_eq!(h.options.wire_len(), 36);
    }

    #[test]
    fn bad_options() {
        assert_eq!(parse_options(&[2, 3, 0]), Err(ParseError::Malformed));
        assert_eq!(parse_options(&[2]), Err(ParseError::Malformed));
        assert_eq!(parse_options(&[99, 0]), Err(ParseError::Malformed));
        assert_eq!(parse_options(&[99, 9, 0]), Err(ParseError::Malformed));
        // Unknown options are skipped, END stops the walk.
        let o = parse_options(&[99, 3, 0, 1, 3, 3, 20, 0, 2, 4]).unwrap();
        assert_eq!(o.window_scale, Some(14));
        assert_eq!(o.mss, None);
    }
}
