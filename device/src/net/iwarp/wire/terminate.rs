//! The Terminate message (RFC 5040 §4.8) and the errors it reports (RFC 5040 §7, RFC 5041
//! §7, RFC 5044 §8, RFC 6581 §7). A Terminate is an untagged RDMAP message on queue 2
//! ([`super::rdmap::terminate`] builds its DDP header); this is its body:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Layer | EType |  Error Code   |M|D|R|       Reserved          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  DDP Segment Length (if D)    |  Terminated DDP Header (if D, |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  14 or 18 bytes by its T bit) ~
//! ~  Terminated RDMAP Header (if R: a Read Request's 28 bytes)    ~
//! ```
//!
//! D: the failed segment's DDP header is copied (after a 16-bit DDP Segment Length field,
//! valid when M is set). R: its RDMAP header is copied too; only a Read Request has one
//! beyond the DDP header, so R adds 28 bytes after a Read Request's DDP header and nothing
//! after any other (siw sets R with no more bytes for a failed Send). This is the layout
//! siw writes (`siw_send_terminate`: the copied header starts with the 16-bit length field
//! in place of the MPA length) and Wireshark's `iwarp_ddp_rdmap` reads. The numbers of the
//! layers, types and codes are siw's (`iwarp.h`: `term_elayer`, `rdmap_etype`,
//! `rdmap_ecode`, `ddp_etype`, `ddp_ecode`, `llp_ecode`, `llp_etype`).

use std::fmt;

use super::be16;
use super::ddp::{self, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::rdmap::{Opcode, READ_REQUEST_LEN};

/// The Terminate Control field.
pub const CONTROL_LEN: usize = 4;
/// The DDP Segment Length field before a copied DDP header.
pub const SEGMENT_LENGTH_LEN: usize = 2;

/// Header-control bits (byte 2 of the body).
pub mod hdrct {
    /// The DDP Segment Length field is valid.
    pub const M: u8 = 0x80;
    /// The failed segment's DDP header is copied.
    pub const D: u8 = 0x40;
    /// The failed message's RDMAP header is copied.
    pub const R: u8 = 0x20;
}

/// The layer that found the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Layer {
    Rdmap = 0,
    Ddp = 1,
    /// The lower-layer protocol: MPA.
    Llp = 2,
}

u8_codes! {
    /// RDMAP error types.
    pub enum RdmapType {
        LocalCatastrophic = 0,
        RemoteProtection = 1,
        RemoteOperation = 2,
    }
}

u8_codes! {
    /// RDMAP error codes.
    pub enum RdmapCode {
        InvalidStag = 0x00,
        BaseOrBounds = 0x01,
        AccessRights = 0x02,
        StagNotAssociated = 0x03,
        ToWrap = 0x04,
        Version = 0x05,
        UnexpectedOpcode = 0x06,
        CatastrophicStream = 0x07,
        CatastrophicGlobal = 0x08,
        CannotInvalidate = 0x09,
        Unspecified = 0xff,
    }
}

/// DDP error types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DdpType {
    LocalCatastrophic = 0,
    TaggedBuffer = 1,
    UntaggedBuffer = 2,
    /// Reserved for the LLP's use.
    Reserved = 3,
}

u8_codes! {
    /// DDP tagged buffer error codes.
    pub enum DdpTaggedCode {
        InvalidStag = 0x00,
        BaseOrBounds = 0x01,
        StagNotAssociated = 0x02,
        ToWrap = 0x03,
        Version = 0x04,
    }
}

u8_codes! {
    /// DDP untagged buffer error codes.
    pub enum DdpUntaggedCode {
        InvalidQn = 0x01,
        /// Invalid MSN: no buffer available.
        NoBuffer = 0x02,
        /// Invalid MSN: MSN out of range.
        MsnRange = 0x03,
        InvalidMo = 0x04,
        /// The message is too long for the buffer.
        TooLong = 0x05,
        Version = 0x06,
    }
}

/// LLP error types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LlpType {
    Mpa = 0,
}

u8_codes! {
    /// MPA error codes (the last three from RFC 6581's enhanced setup).
    pub enum MpaCode {
        /// The TCP connection was lost (siw: `LLP_ECODE_TCP_STREAM_LOST`).
        StreamLost = 0x01,
        Crc = 0x02,
        /// A marker and the FPDU start disagree (never sent without markers).
        FpduStart = 0x03,
        InvalidRequestReply = 0x04,
        LocalCatastrophic = 0x05,
        InsufficientIrd = 0x06,
        NoMatchingRtr = 0x07,
    }
}

/// A Terminate's layer, type and code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermError {
    Rdmap(RdmapType, RdmapCode),
    DdpCatastrophic,
    DdpTagged(DdpTaggedCode),
    DdpUntagged(DdpUntaggedCode),
    Mpa(MpaCode),
    /// A combination none of the above names (a newer RFC's, or nonsense), as sent.
    Other {
        layer: u8,
        etype: u8,
        code: u8,
    },
}

impl TermError {
    /// From the three fields (layer and type: 4 bits each).
    pub fn from_raw(layer: u8, etype: u8, code: u8) -> TermError {
        let known = match (layer, etype) {
            (0, _) => RdmapType::from_u8(etype)
                .zip(RdmapCode::from_u8(code))
                .map(|(t, c)| TermError::Rdmap(t, c)),
            (1, 0) => (code == 0).then_some(TermError::DdpCatastrophic),
            (1, 1) => DdpTaggedCode::from_u8(code).map(TermError::DdpTagged),
            (1, 2) => DdpUntaggedCode::from_u8(code).map(TermError::DdpUntagged),
            (2, 0) => MpaCode::from_u8(code).map(TermError::Mpa),
            _ => None,
        };
        known.unwrap_or(TermError::Other {
            layer: layer & 0x0f,
            etype: etype & 0x0f,
            code,
        })
    }

    /// Layer, type and code.
    pub fn raw(&self) -> (u8, u8, u8) {
        match *self {
            TermError::Rdmap(t, c) => (Layer::Rdmap as u8, t as u8, c as u8),
            TermError::DdpCatastrophic => (Layer::Ddp as u8, DdpType::LocalCatastrophic as u8, 0),
            TermError::DdpTagged(c) => (Layer::Ddp as u8, DdpType::TaggedBuffer as u8, c as u8),
            TermError::DdpUntagged(c) => (Layer::Ddp as u8, DdpType::UntaggedBuffer as u8, c as u8),
            TermError::Mpa(c) => (Layer::Llp as u8, LlpType::Mpa as u8, c as u8),
            TermError::Other { layer, etype, code } => (layer & 0x0f, etype & 0x0f, code),
        }
    }

    /// Which of the failed segment's headers a Terminate reporting this error copies, as
    /// siw's `siw_send_terminate` decides (RFC 5040 §7 leaves it to the error): the DDP
    /// header for DDP errors and for RDMAP errors other than catastrophic ones, except
    /// where a version or opcode error means the header cannot be understood; also the
    /// RDMAP header for remote protection errors. Returns (DDP header, RDMAP header).
    pub fn copies(&self) -> (bool, bool) {
        match self {
            TermError::DdpTagged(DdpTaggedCode::Version)
            | TermError::DdpUntagged(DdpUntaggedCode::Version) => (false, false),
            TermError::DdpCatastrophic | TermError::DdpTagged(_) | TermError::DdpUntagged(_) => {
                (true, false)
            }
            TermError::Rdmap(RdmapType::LocalCatastrophic, _) => (false, false),
            TermError::Rdmap(RdmapType::RemoteProtection, _) => (true, true),
            TermError::Rdmap(
                RdmapType::RemoteOperation,
                RdmapCode::Version | RdmapCode::UnexpectedOpcode,
            ) => (false, false),
            TermError::Rdmap(RdmapType::RemoteOperation, _) => (true, false),
            TermError::Mpa(_) | TermError::Other { .. } => (false, false),
        }
    }
}

/// The failed segment's headers a Terminate carries (D, and R within it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied<'a> {
    /// The DDP Segment Length field when M says it is valid (sent as 0 otherwise).
    pub segment_length: Option<u16>,
    /// The failed segment's DDP header as it arrived: 14 bytes if its T bit is set, else 18.
    pub ddp_header: &'a [u8],
    /// R: the failed message's RDMAP header: 28 bytes after a Read Request's DDP header,
    /// empty after any other.
    pub rdmap_header: Option<&'a [u8]>,
}

impl Copied<'_> {
    fn wire_len(&self) -> usize {
        SEGMENT_LENGTH_LEN + self.ddp_header.len() + self.rdmap_header.map_or(0, <[u8]>::len)
    }

    /// The copied DDP header, parsed (None if it does not parse as one).
    pub fn ddp(&self) -> Option<ddp::Header> {
        ddp::parse(self.ddp_header).ok().map(|s| s.header)
    }
}

/// A Terminate message's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminate<'a> {
    pub error: TermError,
    pub copied: Option<Copied<'a>>,
}

/// Why a body is not a Terminate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its control field or than the headers it announces.
    Truncated,
    /// M or R without D: a length or RDMAP header with no DDP header to go with.
    WithoutDdpHeader,
    /// Bytes after the last announced header.
    Trailing,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "Terminate shorter than the headers it announces",
            Error::WithoutDdpHeader => "Terminate with M or R but no DDP header",
            Error::Trailing => "bytes after the end of a Terminate",
        })
    }
}

impl std::error::Error for Error {}

/// Length of the RDMAP header a Terminate copies after `ddp_header` when R is set.
fn rdmap_header_len(ddp_header: &[u8]) -> usize {
    let read_request = ddp_header
        .get(1)
        .is_some_and(|c| c & super::rdmap::control::OPCODE == Opcode::ReadRequest as u8);
    if read_request {
        READ_REQUEST_LEN
    } else {
        0
    }
}

/// Length of a DDP header by its control byte.
fn ddp_header_len(control: u8) -> usize {
    if control & ddp::control::TAGGED != 0 {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

impl<'a> Terminate<'a> {
    /// Parses a Terminate body (the payload of a Terminate message). Reserved bits are not
    /// checked.
    pub fn parse(body: &'a [u8]) -> Result<Terminate<'a>, Error> {
        if body.len() < CONTROL_LEN {
            return Err(Error::Truncated);
        }
        // Linux's siw fills the control word through little-endian bit fields, so on x86 it
        // sends the layer in the low nibble and the type in the high one, and M, D and R
        // in bits 0-2 of the third byte (where RFC 5040 puts reserved bits). A third byte
        // with no RFC flag but one of those bits is read that way; with no flag at all
        // the two layouts cannot be told apart, and the RFC's is taken. (siw sets D when it
        // sets anything, so headers follow; its other bits of that byte are zero.)
        let siw = body[2] & !0x07 == 0 && body[2] & 0x02 != 0 && body.len() > CONTROL_LEN;
        let (layer, etype) = if siw {
            (body[0] & 0x0f, body[0] >> 4)
        } else {
            (body[0] >> 4, body[0] & 0x0f)
        };
        let error = TermError::from_raw(layer, etype, body[1]);
        let (m, d, r) = if siw {
            (body[2] & 1 != 0, body[2] & 2 != 0, body[2] & 4 != 0)
        } else {
            (
                body[2] & hdrct::M != 0,
                body[2] & hdrct::D != 0,
                body[2] & hdrct::R != 0,
            )
        };
        let rest = &body[CONTROL_LEN..];
        if !d {
            if m || r {
                return Err(Error::WithoutDdpHeader);
            }
            if !rest.is_empty() {
                return Err(Error::Trailing);
            }
            return Ok(Terminate {
                error,
                copied: None,
            });
        }
        if rest.len() <= SEGMENT_LENGTH_LEN {
            return Err(Error::Truncated);
        }
        let length = be16(rest, 0);
        let rest = &rest[SEGMENT_LENGTH_LEN..];
        let n = ddp_header_len(rest[0]);
        if rest.len() < n {
            return Err(Error::Truncated);
        }
        let (ddp_header, rest) = rest.split_at(n);
        let (rdmap_header, rest) = if r {
            let n = rdmap_header_len(ddp_header);
            if rest.len() < n {
                return Err(Error::Truncated);
            }
            let (h, rest) = rest.split_at(n);
            (Some(h), rest)
        } else {
            (None, rest)
        };
        if !rest.is_empty() {
            return Err(Error::Trailing);
        }
        Ok(Terminate {
            error,
            copied: Some(Copied {
                segment_length: m.then_some(length),
                ddp_header,
                rdmap_header,
            }),
        })
    }

    /// A Terminate reporting `error` about the failed DDP segment `ulpdu` (as the FPDU
    /// carried it), copying the headers [`TermError::copies`] names, as far as `ulpdu` holds
    /// them whole.
    pub fn about(error: TermError, ulpdu: &'a [u8]) -> Terminate<'a> {
        let (ddp_wanted, rdmap_wanted) = error.copies();
        let copied = ulpdu.first().and_then(|&control| {
            let n = ddp_header_len(control);
            if !ddp_wanted || ulpdu.len() < n {
                return None;
            }
            let ddp_header = &ulpdu[..n];
            // R says a Read Request's header follows (RFC 5040 §4.8): only a Read Request
            // has one to copy, so for any other message R stays clear (set with nothing
            // after it, Wireshark and peers read the frame as truncated).
            let r = rdmap_header_len(ddp_header);
            let rdmap_header =
                (rdmap_wanted && r > 0 && ulpdu.len() >= n + r).then(|| &ulpdu[n..n + r]);
            Some(Copied {
                // The failed segment's whole length, as MPA framed it (siw sends the
                // payload length after the headers; receivers only report the field).
                segment_length: u16::try_from(ulpdu.len()).ok(),
                ddp_header,
                rdmap_header,
            })
        });
        Terminate { error, copied }
    }

    /// Bytes of the body on the wire.
    pub fn wire_len(&self) -> usize {
        CONTROL_LEN + self.copied.as_ref().map_or(0, Copied::wire_len)
    }

    /// Writes the body into the first [`Terminate::wire_len`] bytes of `buf`.
    pub fn write_into(&self, buf: &mut [u8]) -> usize {
        let n = self.wire_len();
        let b = &mut buf[..n];
        let (layer, etype, code) = self.error.raw();
        b[0] = layer << 4 | etype;
        b[1] = code;
        b[2] = 0;
        b[3] = 0;
        if let Some(c) = &self.copied {
            debug_assert_eq!(c.ddp_header.len(), ddp_header_len(c.ddp_header[0]));
            b[2] |= hdrct::D;
            if c.segment_length.is_some() {
                b[2] |= hdrct::M;
            }
            b[4..6].copy_from_slice(&c.segment_length.unwrap_or(0).to_be_bytes());
            let mut at = CONTROL_LEN + SEGMENT_LENGTH_LEN;
            b[at..at + c.ddp_header.len()].copy_from_slice(c.ddp_header);
            at += c.ddp_header.len();
            if let Some(h) = c.rdmap_header {
                debug_assert_eq!(h.len(), rdmap_header_len(c.ddp_header));
                b[2] |= hdrct::R;
                b[at..at + h.len()].copy_from_slice(h);
            }
        }
        n
    }

    /// Appends the body to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + self.wire_len(), 0);
        self.write_into(&mut out[at..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Linux's siw sent on x86 about a Read Response out of its sink's bounds: DDP
    /// tagged buffer error "base or bounds", M and D set in its own bit order, the
    /// segment's length and its tagged DDP header.
    #[test]
    fn a_terminate_in_siws_bit_order_reads_as_meant() {
        let body = [
            0x11, 0x01, 0x03, 0x00, // control, siw's order
            0x00, 0x64, // DDP segment length
            0xc1, 0x42, 0x67, 0x7f, 0xca, 0x00, 0x00, 0x00, 0x56, 0x02, 0xcb, 0x65, 0x33, 0x50,
        ];
        let t = Terminate::parse(&body).unwrap();
        assert_eq!(t.error, TermError::DdpTagged(DdpTaggedCode::BaseOrBounds));
        let c = t.copied.expect("the DDP header");
        assert_eq!(c.segment_length, Some(100));
        assert_eq!(c.ddp_header, &body[6..]);
        assert!(c.ddp().is_some_and(|h| h.tagged()));
        // RDMAP remote protection, access rights, with D and R, in siw's order: layer 0 in
        // the low nibble, type 1 in the high one.
        let mut b = vec![0x10, 0x02, 0x06, 0x00, 0x00, 0x00];
        b.extend_from_slice(&[0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
        b.extend_from_slice(&[0u8; 28]);
        let t = Terminate::parse(&b).unwrap();
        assert_eq!(
            t.error,
            TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::AccessRights)
        );
        assert!(t.copied.is_some_and(|c| c.rdmap_header.is_some()));
    }

    #[test]
    fn numbers_are_siws() {
        assert_eq!(TermError::Mpa(MpaCode::Crc).raw(), (2, 0, 2));
        assert_eq!(TermError::Mpa(MpaCode::InsufficientIrd).raw(), (2, 0, 6));
        assert_eq!(
            TermError::Rdmap(RdmapType::RemoteOperation, RdmapCode::UnexpectedOpcode).raw(),
            (0, 2, 6)
        );
        assert_eq!(
            TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::CannotInvalidate).raw(),
            (0, 1, 9)
        );
        assert_eq!(
            TermError::Rdmap(RdmapType::RemoteOperation, RdmapCode::Unspecified).raw(),
            (0, 2, 0xff)
        );
        assert_eq!(
            TermError::DdpTagged(DdpTaggedCode::Version).raw(),
            (1, 1, 4)
        );
        assert_eq!(
            TermError::DdpUntagged(DdpUntaggedCode::TooLong).raw(),
            (1, 2, 5)
        );
        assert_eq!(TermError::DdpCatastrophic.raw(), (1, 0, 0));
    }

    #[test]
    fn every_raw_combination_round_trips() {
        for layer in 0..16u8 {
            for etype in 0..16u8 {
                for code in 0..=255u8 {
                    let e = TermError::from_raw(layer, etype, code);
                    assert_eq!(e.raw(), (layer, etype, code), "{e:?}");
                    let known = !matches!(e, TermError::Other { .. });
                    assert_eq!(
                        known,
                        match (layer, etype) {
                            (0, 0..=2) => code <= 9 || code == 0xff,
                            (1, 0) => code == 0,
                            (1, 1) => code <= 4,
                            (1, 2) => (1..=6).contains(&code),
                            (2, 0) => (1..=7).contains(&code),
                            _ => false,
                        },
                        "{layer}/{etype}/{code}"
                    );
                }
            }
        }
    }

    /// siw's Terminate for a DDP tagged error (invalid STag) about a Write: M and D, the
    /// DDP Segment Length, then the Write's 14-byte header.
    #[test]
    fn handmade_tagged_error_terminate() {
        let body = [
            0x11, 0x00, 0xc0, 0x00, // DDP layer, tagged buffer error, invalid STag; M D
            0x00, 0x20, // DDP Segment Length 32
            0xc1, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0x10, 0x00, // the Write's header
        ];
        let t = Terminate::parse(&body).unwrap();
        assert_eq!(t.error, TermError::DdpTagged(DdpTaggedCode::InvalidStag));
        let c = t.copied.unwrap();
        assert_eq!(c.segment_length, Some(32));
        assert_eq!(c.ddp_header, &body[6..]);
        assert_eq!(c.rdmap_header, None);
        assert_eq!(
            c.ddp().unwrap().buffer,
            ddp::Buffer::Tagged {
                stag: 0x1234,
                to: 0x1000
            }
        );
        let mut out = Vec::new();
        t.write(&mut out);
        assert_eq!(out, body);
    }

    /// A remote protection error about a Read Request: M D R, the 18-byte untagged header,
    /// then the 28-byte Read Request header (siw's `in_tx` case).
    #[test]
    fn handmade_read_request_terminate() {
        let mut body = vec![0x01, 0x00, 0xe0, 0x00, 0x00, 46];
        body.extend_from_slice(&[0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
        body.extend((0..28).map(|i| i as u8));
        let t = Terminate::parse(&body).unwrap();
        assert_eq!(
            t.error,
            TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::InvalidStag)
        );
        let c = t.copied.unwrap();
        assert_eq!(c.ddp_header.len(), 18);
        assert_eq!(c.rdmap_header.unwrap().len(), 28);
        assert_eq!(t.wire_len(), body.len());
        let mut out = Vec::new();
        t.write(&mut out);
        assert_eq!(out, body);
        // The same, about a Send: R with nothing after the DDP header.
        let mut body = vec![0x01, 0x02, 0x60, 0x00, 0x00, 0x00];
        body.extend_from_slice(&[0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        let t = Terminate::parse(&body).unwrap();
        let c = t.copied.unwrap();
        assert_eq!((c.segment_length, c.rdmap_header), (None, Some(&[][..])));
        let mut out = Vec::new();
        t.write(&mut out);
        assert_eq!(out, body);
    }

    #[test]
    fn catastrophic_terminate_has_no_headers() {
        let body = [0x20, 0x02, 0x00, 0x00]; // LLP, MPA, CRC error
        let t = Terminate::parse(&body).unwrap();
        assert_eq!(
            t,
            Terminate {
                error: TermError::Mpa(MpaCode::Crc),
                copied: None
            }
        );
        // Reserved bits are not checked, and sent as zero.
        let t2 = Terminate::parse(&[0x20, 0x02, 0x1f, 0xff]).unwrap();
        assert_eq!(t2, t);
        let mut out = Vec::new();
        t2.write(&mut out);
        assert_eq!(out, body);
    }

    #[test]
    fn malformed_bodies() {
        assert_eq!(Terminate::parse(&[]), Err(Error::Truncated));
        assert_eq!(Terminate::parse(&[0x20, 0x02, 0x00]), Err(Error::Truncated));
        assert_eq!(
            Terminate::parse(&[0x20, 0x02, 0x80, 0x00]),
            Err(Error::WithoutDdpHeader)
        );
        assert_eq!(
            Terminate::parse(&[0x20, 0x02, 0x20, 0x00]),
            Err(Error::WithoutDdpHeader)
        );
        assert_eq!(
            Terminate::parse(&[0x20, 0x02, 0x00, 0x00, 0]),
            Err(Error::Trailing)
        );
        // D, but the length field or the header is cut short.
        assert_eq!(
            Terminate::parse(&[0x11, 0, 0x40, 0, 0, 0]),
            Err(Error::Truncated)
        );
        let mut b = vec![0x11, 0, 0x40, 0, 0, 0, 0xc1];
        b.extend_from_slice(&[0; 12]);
        assert_eq!(Terminate::parse(&b), Err(Error::Truncated));
        b.push(0);
        assert!(Terminate::parse(&b).is_ok());
        b.push(0);
        assert_eq!(Terminate::parse(&b), Err(Error::Trailing));
        // R after a Read Request's header, without its 28 bytes.
        let mut b = vec![0x01, 0, 0x60, 0, 0, 0, 0x41, 0x41];
        b.extend_from_slice(&[0; 16 + 27]);
        assert_eq!(Terminate::parse(&b), Err(Error::Truncated));
    }

    #[test]
    fn about_copies_what_the_error_calls_for() {
        // A Write that hit an invalid STag: its header, M and the length.
        let mut write = vec![0xc1, 0x40, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0];
        write.extend_from_slice(b"payload");
        let t = Terminate::about(TermError::DdpTagged(DdpTaggedCode::InvalidStag), &write);
        let c = t.copied.unwrap();
        assert_eq!(c.ddp_header, &write[..14]);
        assert_eq!(c.segment_length, Some(21));
        assert_eq!(c.rdmap_header, None);
        // A version error copies nothing (the header cannot be understood).
        let t = Terminate::about(TermError::DdpTagged(DdpTaggedCode::Version), &write);
        assert_eq!(t.copied, None);
        // A protection error on a Read Request copies both headers.
        let mut rr = vec![0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        rr.extend_from_slice(&[5; 28]);
        let e = TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::BaseOrBounds);
        let t = Terminate::about(e, &rr);
        let c = t.copied.unwrap();
        assert_eq!(c.rdmap_header, Some(&rr[18..]));
        // Round trip through the wire.
        let mut out = Vec::new();
        t.write(&mut out);
        assert_eq!(Terminate::parse(&out), Ok(t));
        // The same error on a Write (a read-only region written): the DDP header and
        // length, but no R, since only a Read Request has an RDMAP header to copy.
        let t = Terminate::about(e, &write);
        let c = t.copied.unwrap();
        assert_eq!((c.ddp_header, c.rdmap_header), (&write[..14], None));
        let mut out = Vec::new();
        t.write(&mut out);
        assert_eq!(out[2] & hdrct::R, 0, "R without a Read Request header");
        assert_eq!(out.len(), 4 + 2 + 14);
        // Too short for the Read Request header: no R. Too short for the DDP header: no D.
        let t = Terminate::about(e, &rr[..30]);
        assert_eq!(t.copied.unwrap().rdmap_header, None);
        let t = Terminate::about(e, &rr[..10]);
        assert_eq!(t.copied, None);
        assert_eq!(Terminate::about(e, &[]).copied, None);
        // MPA errors copy nothing.
        assert_eq!(
            Terminate::about(TermError::Mpa(MpaCode::Crc), &rr).copied,
            None
        );
    }
}
