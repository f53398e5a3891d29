//! MPA connection setup frames: the request and the reply (RFC 5044 §7.1), and the
//! enhanced connection setup block RFC 6581 §3 puts at the start of their private data.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Key: "MPA ID Req Frame" or "MPA ID Rep Frame" (16 bytes)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |M|C|R|H| Res   |     Rev       |          PD_Length            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  private data (PD_Length bytes); with H and Rev 2 it opens    |
//! |  with the enhanced block:                                     |
//! |A|B|        IRD (14 bits)      |C|D|        ORD (14 bits)      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! M asks for markers, C for CRCs, R (in a reply) rejects the connection, H says the
//! private data opens with the enhanced block (siw's `MPA_RR_FLAG_ENHANCED`). Two of the
//! reserved bits are qpip's: [`flags::QPIP_IMMEDIATE_OFFER`] and
//! [`flags::QPIP_IMMEDIATE_AGREE`]. In the block,
//! A asks for peer-to-peer setup and B, C, D name the ready-to-receive message the
//! initiator may send: a zero-length Send, Write or Read Request (siw's
//! `MPA_V2_PEER_TO_PEER`, `MPA_V2_ZERO_LENGTH_RTR`, `MPA_V2_RDMA_WRITE_RTR`,
//! `MPA_V2_RDMA_READ_RTR`).
//!
//! The frames arrive as the first bytes of each direction of the TCP stream, possibly split
//! over segments: [`parse_prefix`] says whether a prefix of the stream holds a whole frame
//! (and how long it is), needs more bytes, or can never be one. What follows the frame is
//! the caller's business (siw fails the connection if anything follows the request or the
//! reply in the same read, before the first FPDU).

use std::fmt;

use super::{be16, EmitError};

pub const KEY_LEN: usize = 16;
pub const REQUEST_KEY: &[u8; KEY_LEN] = b"MPA ID Req Frame";
pub const REPLY_KEY: &[u8; KEY_LEN] = b"MPA ID Rep Frame";
/// Key, flags, revision and `PD_Length`: the frame without its private data.
pub const HEADER_LEN: usize = 20;

/// Largest `PD_Length` (RFC 5044 §7.1).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Largest private data siw accepts, the enhanced block included: its
/// `MPA_MAX_PRIVDATA` is `RDMA_MAX_PRIVATE_DATA` (256), and a frame announcing more fails
/// the connection (`siw_recv_mpa_rr`).
pub const SIW_MAX_PRIVATE_DATA: usize = 256;

/// RFC 5044's revision.
pub const REVISION_1: u8 = 1;
/// RFC 6581's revision: enhanced connection setup.
pub const REVISION_2: u8 = 2;

/// Bits of the flags byte (byte 16).
pub mod flags {
    pub const MARKERS: u8 = 0x80;
    pub const CRC: u8 = 0x40;
    pub const REJECT: u8 = 0x20;
    pub const ENHANCED: u8 = 0x10;
    /// Reserved (siw uses 0x08 for an experimental "GSO" flag of its own).
    pub const RESERVED: u8 = 0x0f;
    /// qpip's use of a reserved bit, in a request: the initiator offers RFC 7306 Immediate
    /// Data. A receiver must ignore reserved bits (RFC 5044 §7.1), and siw does.
    pub const QPIP_IMMEDIATE_OFFER: u8 = 0x01;
    /// qpip's use of another reserved bit, in a reply: the responder agrees to the offer.
    /// Not the offer's bit, because siw's responder answers with the request's header bits
    /// (its reply is the request's header with the reply's key): an offer's bit comes back
    /// from a peer that never read it.
    pub const QPIP_IMMEDIATE_AGREE: u8 = 0x02;
}

/// The enhanced block's length.
pub const ENHANCED_BLOCK_LEN: usize = 4;
/// IRD and ORD have 14 bits each.
pub const MAX_IRD_ORD: u16 = 0x3fff;

/// Bits of the enhanced block's two 16-bit words.
pub mod enhanced {
    /// IRD word: peer-to-peer setup (A).
    pub const PEER_TO_PEER: u16 = 0x8000;
    /// IRD word: a zero-length Send is the ready-to-receive message (B).
    pub const ZERO_LENGTH_SEND_RTR: u16 = 0x4000;
    /// ORD word: a zero-length Write is the ready-to-receive message (C).
    pub const WRITE_RTR: u16 = 0x8000;
    /// ORD word: a zero-length Read Request is the ready-to-receive message (D).
    pub const READ_RTR: u16 = 0x4000;
}

/// Which of the two frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sent by the initiator (the side that connected).
    Request,
    /// Sent by the responder.
    Reply,
}

impl Kind {
    pub fn key(self) -> &'static [u8; KEY_LEN] {
        match self {
            Kind::Request => REQUEST_KEY,
            Kind::Reply => REPLY_KEY,
        }
    }
}

/// The flags byte. `reserved` keeps the four low bits as they came (zero when sending).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub markers: bool,
    pub crc: bool,
    pub reject: bool,
    pub enhanced: bool,
    pub reserved: u8,
}

impl Flags {
    pub fn from_byte(b: u8) -> Flags {
        Flags {
            markers: b & flags::MARKERS != 0,
            crc: b & flags::CRC != 0,
            reject: b & flags::REJECT != 0,
            enhanced: b & flags::ENHANCED != 0,
            reserved: b & flags::RESERVED,
        }
    }

    pub fn to_byte(self) -> u8 {
        (self.markers as u8) << 7
            | (self.crc as u8) << 6
            | (self.reject as u8) << 5
            | (self.enhanced as u8) << 4
            | self.reserved & flags::RESERVED
    }
}

/// RFC 6581's IRD/ORD block. IRD is how many incoming Read Requests the sender can have
/// outstanding, ORD how many it will issue; the flags are described in the module
/// documentation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnhancedBlock {
    pub ird: u16,
    pub ord: u16,
    pub peer_to_peer: bool,
    pub zero_length_send_rtr: bool,
    pub write_rtr: bool,
    pub read_rtr: bool,
}

impl EnhancedBlock {
    /// Reads the block from the start of `private_data`.
    pub fn parse(private_data: &[u8]) -> Result<EnhancedBlock, Error> {
        if private_data.len() < ENHANCED_BLOCK_LEN {
            return Err(Error::EnhancedBlockMissing);
        }
        let ird = be16(private_data, 0);
        let ord = be16(private_data, 2);
        Ok(EnhancedBlock {
            ird: ird & MAX_IRD_ORD,
            ord: ord & MAX_IRD_ORD,
            peer_to_peer: ird & enhanced::PEER_TO_PEER != 0,
            zero_length_send_rtr: ird & enhanced::ZERO_LENGTH_SEND_RTR != 0,
            write_rtr: ord & enhanced::WRITE_RTR != 0,
            read_rtr: ord & enhanced::READ_RTR != 0,
        })
    }

    pub fn to_bytes(&self) -> Result<[u8; ENHANCED_BLOCK_LEN], EmitError> {
        for v in [self.ird, self.ord] {
            if v > MAX_IRD_ORD {
                return Err(EmitError::IrdOrdTooLarge(v));
            }
        }
        let bit = |on: bool, b: u16| if on { b } else { 0 };
        let ird = self.ird
            | bit(self.peer_to_peer, enhanced::PEER_TO_PEER)
            | bit(self.zero_length_send_rtr, enhanced::ZERO_LENGTH_SEND_RTR);
        let ord = self.ord
            | bit(self.write_rtr, enhanced::WRITE_RTR)
            | bit(self.read_rtr, enhanced::READ_RTR);
        let mut b = [0u8; ENHANCED_BLOCK_LEN];
        b[..2].copy_from_slice(&ird.to_be_bytes());
        b[2..].copy_from_slice(&ord.to_be_bytes());
        Ok(b)
    }
}

/// A request or reply frame. `private_data` is all `PD_Length` bytes, the enhanced block
/// included when there is one ([`Frame::split_enhanced`] separates them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub kind: Kind,
    pub flags: Flags,
    pub revision: u8,
    pub private_data: &'a [u8],
}

impl<'a> Frame<'a> {
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.private_data.len()
    }

    /// Whether the private data opens with the enhanced block: H set in a revision 2 frame
    /// (siw reads the block only then; H in an older revision means nothing).
    pub fn has_enhanced_block(&self) -> bool {
        self.flags.enhanced && self.revision == REVISION_2
    }

    /// The enhanced block, if the frame has one, and the private data that is the ULP's
    /// (what follows the block, or all of it).
    pub fn split_enhanced(&self) -> Result<(Option<EnhancedBlock>, &'a [u8]), Error> {
        if !self.has_enhanced_block() {
            return Ok((None, self.private_data));
        }
        let block = EnhancedBlock::parse(self.private_data)?;
        Ok((Some(block), &self.private_data[ENHANCED_BLOCK_LEN..]))
    }

    /// Appends the frame to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), EmitError> {
        if self.private_data.len() > MAX_PRIVATE_DATA {
            return Err(EmitError::PrivateDataTooLong(self.private_data.len()));
        }
        out.reserve(self.wire_len());
        out.extend_from_slice(self.kind.key());
        out.push(self.flags.to_byte());
        out.push(self.revision);
        out.extend_from_slice(&(self.private_data.len() as u16).to_be_bytes());
        out.extend_from_slice(self.private_data);
        Ok(())
    }
}

/// A whole frame: `flags.enhanced` and the private data are set from `block` (written first)
/// and `ulp_private_data` (after it).
pub fn build(
    kind: Kind,
    mut flags: Flags,
    revision: u8,
    block: Option<&EnhancedBlock>,
    ulp_private_data: &[u8],
) -> Result<Vec<u8>, EmitError> {
    let mut pd = Vec::with_capacity(ENHANCED_BLOCK_LEN + ulp_private_data.len());
    if let Some(b) = block {
        pd.extend_from_slice(&b.to_bytes()?);
    }
    pd.extend_from_slice(ulp_private_data);
    flags.enhanced = block.is_some();
    let mut out = Vec::new();
    Frame {
        kind,
        flags,
        revision,
        private_data: &pd,
    }
    .emit(&mut out)?;
    Ok(out)
}

/// Why bytes are not (or can never become) the frame expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The stream does not start with the expected key (an LLP "invalid MPA request or
    /// reply" in a Terminate).
    Key,
    /// `PD_Length` above [`MAX_PRIVATE_DATA`].
    PrivateDataTooLong(u16),
    /// H in a revision 2 frame, but fewer than 4 bytes of private data.
    EnhancedBlockMissing,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Key => f.write_str("not an MPA frame of the kind expected (key)"),
            Error::PrivateDataTooLong(n) => {
                write!(f, "MPA private data length {n} above {MAX_PRIVATE_DATA}")
            }
            Error::EnhancedBlockMissing => {
                f.write_str("MPA frame announces the enhanced block but is too short for it")
            }
        }
    }
}

impl std::error::Error for Error {}

/// What a prefix of the stream holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix<'a> {
    /// Not a whole frame yet: at least `needed` more bytes must come (exactly that many
    /// once the header is complete).
    Incomplete { needed: usize },
    /// A whole frame, the first `len` bytes of the stream.
    Complete { frame: Frame<'a>, len: usize },
}

/// Reads the frame of `kind` at the start of `stream` (the bytes received so far). A key
/// that cannot match is refused as soon as its first wrong byte arrives.
pub fn parse_prefix(stream: &[u8], kind: Kind) -> Result<Prefix<'_>, Error> {
    let key = kind.key();
    let seen = stream.len().min(KEY_LEN);
    if stream[..seen] != key[..seen] {
        return Err(Error::Key);
    }
    if stream.len() < HEADER_LEN {
        return Ok(Prefix::Incomplete {
            needed: HEADER_LEN - stream.len(),
        });
    }
    let pd_len = be16(stream, 18);
    if pd_len as usize > MAX_PRIVATE_DATA {
        return Err(Error::PrivateDataTooLong(pd_len));
    }
    let len = HEADER_LEN + pd_len as usize;
    if stream.len() < len {
        return Ok(Prefix::Incomplete {
            needed: len - stream.len(),
        });
    }
    Ok(Prefix::Complete {
        frame: Frame {
            kind,
            flags: Flags::from_byte(stream[16]),
            revision: stream[17],
            private_data: &stream[HEADER_LEN..len],
        },
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// siw's initiator: revision 2, H, no CRC, no markers, IRD/ORD block, then the ULP's
    /// private data. Written from the RFC layouts.
    const SIW_REQUEST: [u8; 28] = [
        b'M', b'P', b'A', b' ', b'I', b'D', b' ', b'R', b'e', b'q', b' ', b'F', b'r', b'a', b'm',
        b'e', // key
        0x10, // H
        0x02, // Rev
        0x00, 0x08, // PD_Length: block + 4 bytes
        0x00, 0x10, // IRD 16
        0x40, 0x08, // read RTR, ORD 8
        0xde, 0xad, 0xbe, 0xef,
    ];

    fn complete(p: Prefix<'_>) -> (Frame<'_>, usize) {
        match p {
            Prefix::Complete { frame, len } => (frame, len),
            other => panic!("not complete: {other:?}"),
        }
    }

    #[test]
    fn parses_a_handmade_enhanced_request() {
        let (f, len) = complete(parse_prefix(&SIW_REQUEST, Kind::Request).unwrap());
        assert_eq!(len, 28);
        assert_eq!(f.revision, 2);
        assert_eq!(
            f.flags,
            Flags {
                enhanced: true,
                ..Flags::default()
            }
        );
        let (block, ulp) = f.split_enhanced().unwrap();
        assert_eq!(
            block,
            Some(EnhancedBlock {
                ird: 16,
                ord: 8,
                read_rtr: true,
                ..EnhancedBlock::default()
            })
        );
        assert_eq!(ulp, &[0xde, 0xad, 0xbe, 0xef]);
        let mut out = Vec::new();
        f.emit(&mut out).unwrap();
        assert_eq!(out, SIW_REQUEST);
        let built = build(
            Kind::Request,
            Flags::default(),
            REVISION_2,
            block.as_ref(),
            ulp,
        )
        .unwrap();
        assert_eq!(built, SIW_REQUEST);
    }

    #[test]
    fn flag_bits_and_block_bits_sit_where_the_rfcs_put_them() {
        assert_eq!(
            Flags::from_byte(0x80),
            Flags {
                markers: true,
                ..Flags::default()
            }
        );
        assert!(Flags::from_byte(0x40).crc);
        assert!(Flags::from_byte(0x20).reject);
        assert!(Flags::from_byte(0x10).enhanced);
        assert_eq!(Flags::from_byte(0x0f).reserved, 0x0f);
        // qpip's two bits are reserved ones, and not siw's (0x08).
        for b in [flags::QPIP_IMMEDIATE_OFFER, flags::QPIP_IMMEDIATE_AGREE] {
            assert_eq!(b & flags::RESERVED, b);
            assert_eq!(b & 0x08, 0);
        }
        for b in 0..=255u8 {
            assert_eq!(Flags::from_byte(b).to_byte(), b);
        }
        let b = EnhancedBlock::parse(&[0xbf, 0xff, 0x80, 0x01]).unwrap();
        assert_eq!(
            b,
            EnhancedBlock {
                ird: 0x3fff,
                ord: 1,
                peer_to_peer: true,
                write_rtr: true,
                ..EnhancedBlock::default()
            }
        );
        let b = EnhancedBlock::parse(&[0x40, 0x00, 0x40, 0x00]).unwrap();
        assert!(b.zero_length_send_rtr && b.read_rtr && !b.peer_to_peer && !b.write_rtr);
        assert_eq!(b.to_bytes().unwrap(), [0x40, 0x00, 0x40, 0x00]);
        let too_big = EnhancedBlock {
            ord: 0x4000,
            ..EnhancedBlock::default()
        };
        assert_eq!(too_big.to_bytes(), Err(EmitError::IrdOrdTooLarge(0x4000)));
    }

    #[test]
    fn a_reply_with_crc_and_reject() {
        // RFC 5044 revision 1 reply: C and R set, no private data.
        let mut rep = REPLY_KEY.to_vec();
        rep.extend_from_slice(&[0x60, 0x01, 0x00, 0x00]);
        let (f, len) = complete(parse_prefix(&rep, Kind::Reply).unwrap());
        assert_eq!(len, 20);
        assert!(f.flags.crc && f.flags.reject && !f.flags.markers);
        assert_eq!(f.revision, 1);
        assert_eq!(f.split_enhanced().unwrap(), (None, &[][..]));
        // The same bytes are not a request.
        assert_eq!(parse_prefix(&rep, Kind::Request), Err(Error::Key));
    }

    #[test]
    fn every_prefix_says_how_much_is_missing() {
        for n in 0..SIW_REQUEST.len() {
            let p = parse_prefix(&SIW_REQUEST[..n], Kind::Request).unwrap();
            let needed = match p {
                Prefix::Incomplete { needed } => needed,
                other => panic!("{n} bytes: {other:?}"),
            };
            if n < HEADER_LEN {
                assert_eq!(needed, HEADER_LEN - n);
            } else {
                assert_eq!(needed, SIW_REQUEST.len() - n);
            }
        }
        // Bytes after the frame are not part of it.
        let mut more = SIW_REQUEST.to_vec();
        more.extend_from_slice(&[0, 0x1c]);
        assert_eq!(complete(parse_prefix(&more, Kind::Request).unwrap()).1, 28);
    }

    #[test]
    fn refusals() {
        // A wrong byte in the key is refused before the header is complete.
        assert_eq!(parse_prefix(b"MPA ID Rx", Kind::Request), Err(Error::Key));
        assert_eq!(
            parse_prefix(b"GET / HTTP/1.1\r\n", Kind::Reply),
            Err(Error::Key)
        );
        // PD_Length above 512.
        let mut req = REQUEST_KEY.to_vec();
        req.extend_from_slice(&[0x00, 0x01, 0x02, 0x01]);
        assert_eq!(
            parse_prefix(&req, Kind::Request),
            Err(Error::PrivateDataTooLong(513))
        );
        // 512 is allowed (and waits for the bytes).
        let mut req = REQUEST_KEY.to_vec();
        req.extend_from_slice(&[0x00, 0x01, 0x02, 0x00]);
        assert_eq!(
            parse_prefix(&req, Kind::Request),
            Ok(Prefix::Incomplete { needed: 512 })
        );
        // H in revision 2 without room for the block.
        let mut req = REQUEST_KEY.to_vec();
        req.extend_from_slice(&[0x10, 0x02, 0x00, 0x03, 1, 2, 3]);
        let (f, _) = complete(parse_prefix(&req, Kind::Request).unwrap());
        assert_eq!(f.split_enhanced(), Err(Error::EnhancedBlockMissing));
        // H in revision 1 announces nothing.
        req[17] = 1;
        let (f, _) = complete(parse_prefix(&req, Kind::Request).unwrap());
        assert_eq!(f.split_enhanced().unwrap(), (None, &[1, 2, 3][..]));
    }

    #[test]
    fn emit_limits() {
        let pd = [7u8; MAX_PRIVATE_DATA + 1];
        let f = Frame {
            kind: Kind::Reply,
            flags: Flags::default(),
            revision: 1,
            private_data: &pd,
        };
        assert_eq!(
            f.emit(&mut Vec::new()),
            Err(EmitError::PrivateDataTooLong(513))
        );
        let f = Frame {
            private_data: &pd[..MAX_PRIVATE_DATA],
            ..f
        };
        let mut out = Vec::new();
        f.emit(&mut out).unwrap();
        assert_eq!(out.len(), HEADER_LEN + MAX_PRIVATE_DATA);
        assert_eq!(complete(parse_prefix(&out, Kind::Reply).unwrap()).0, f);
        // The block counts against the limit.
        assert!(build(
            Kind::Request,
            Flags::default(),
            2,
            Some(&EnhancedBlock::default()),
            &pd[..MAX_PRIVATE_DATA - 3],
        )
        .is_err());
    }
}
