//! RDMAP messages (RFC 5040 §4) as DDP segments carry them, with RFC 7306's immediate data
//! opcodes known but optional.
//!
//! RDMAP owns the byte DDP leaves after its control byte:
//!
//! ```text
//!  0 1 2 3 4 5 6 7
//! +-+-+-+-+-+-+-+-+
//! |RV |Rsv|Opcode |   RV: RDMAP version, 1; Rsv: sent as zero, not checked
//! +-+-+-+-+-+-+-+-+
//! ```
//!
//! | opcode | message | DDP buffer model | body after the DDP header |
//! | --- | --- | --- | --- |
//! | 0 | Write | tagged: the sink's STag and TO | data |
//! | 1 | Read Request | untagged, queue 1, one segment | 28 bytes ([`ReadRequest`]) |
//! | 2 | Read Response | tagged: the requester's sink STag and TO | data |
//! | 3, 5 | Send, Send with Solicited Event | untagged, queue 0 | data |
//! | 4, 6 | the same with Invalidate | untagged, queue 0; the STag to invalidate in the header's spare word | data |
//! | 7 | Terminate | untagged, queue 2, one segment | [`Terminate`] |
//! | 8, 9 | Immediate Data, with Solicited Event (RFC 7306) | untagged, queue 0, one segment | 8 bytes |
//!
//! siw speaks opcodes 0-7 only. Every other opcode is invalid. [`parse`] checks a segment
//! against its opcode (buffer model, queue, single segment, body length), and every
//! [`Error`] names the Terminate that reports it ([`Error::term_error`]).

use std::fmt;

use super::ddp::{self, Buffer, Header};
use super::terminate::{
    self, DdpTaggedCode, DdpUntaggedCode, RdmapCode, RdmapType, TermError, Terminate,
};
use super::{be32, be64};

/// RDMAP version (RV).
pub const VERSION: u8 = 1;

/// Bits of the control byte.
pub mod control {
    pub const VERSION: u8 = 0xc0;
    pub const RESERVED: u8 = 0x30;
    pub const OPCODE: u8 = 0x0f;
}

/// The untagged queues (QN).
pub mod queue {
    pub const SEND: u32 = 0;
    pub const READ_REQUEST: u32 = 1;
    pub const TERMINATE: u32 = 2;
}

/// A Read Request's body.
pub const READ_REQUEST_LEN: usize = 28;
/// An Immediate Data message's body.
pub const IMMEDIATE_DATA_LEN: usize = 8;

u8_codes! {
    pub enum Opcode {
        Write = 0,
        ReadRequest = 1,
        ReadResponse = 2,
        Send = 3,
        SendInvalidate = 4,
        SendSe = 5,
        SendSeInvalidate = 6,
        Terminate = 7,
        ImmediateData = 8,
        ImmediateDataSe = 9,
    }
}

impl Opcode {
    /// The RDMAP control byte of this opcode.
    pub fn control_byte(self) -> u8 {
        VERSION << 6 | self as u8
    }

    /// Whether it travels in tagged DDP segments.
    pub fn tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// Its untagged queue (None for tagged opcodes).
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::ReadRequest => Some(queue::READ_REQUEST),
            Opcode::Terminate => Some(queue::TERMINATE),
            _ => Some(queue::SEND),
        }
    }

    /// Whether its message is always one DDP segment (L set, MO 0).
    pub fn single_segment(self) -> bool {
        matches!(
            self,
            Opcode::ReadRequest
                | Opcode::Terminate
                | Opcode::ImmediateData
                | Opcode::ImmediateDataSe
        )
    }

    /// A Send that carries an STag to invalidate.
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// A message with a solicited event.
    pub fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }

    /// One of the four Sends.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendInvalidate | Opcode::SendSe | Opcode::SendSeInvalidate
        )
    }
}

/// A Read Request's body: read `size` bytes at `source_to` of the responder's `source_stag`
/// into the requester's `sink_stag` at `sink_to` (which the Read Responses then target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadRequest {
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u32,
    pub source_stag: u32,
    pub source_to: u64,
}

impl ReadRequest {
    /// From a body of exactly [`READ_REQUEST_LEN`] bytes.
    pub fn parse(body: &[u8]) -> Option<ReadRequest> {
        (body.len() == READ_REQUEST_LEN).then(|| ReadRequest {
            sink_stag: be32(body, 0),
            sink_to: be64(body, 4),
            size: be32(body, 12),
            source_stag: be32(body, 16),
            source_to: be64(body, 20),
        })
    }

    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        b[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        b[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..20].copy_from_slice(&self.source_stag.to_be_bytes());
        b[20..28].copy_from_slice(&self.source_to.to_be_bytes());
        b
    }
}

/// What follows the DDP header, by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// Write, Read Response and the Sends: the segment's payload.
    Data(&'a [u8]),
    ReadRequest(ReadRequest),
    Terminate(Terminate<'a>),
    Immediate([u8; IMMEDIATE_DATA_LEN]),
}

/// One RDMAP message segment: checked against its opcode when parsed, consistent when
/// built by the constructors below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub opcode: Opcode,
    pub header: Header,
    pub body: Body<'a>,
}

impl Message<'_> {
    /// The STag a Send with Invalidate names.
    pub fn invalidate_stag(&self) -> Option<u32> {
        match self.header.buffer {
            Buffer::Untagged { ulp, .. } if self.opcode.invalidates() => Some(ulp),
            _ => None,
        }
    }

    fn body_len(&self) -> usize {
        match &self.body {
            Body::Data(d) => d.len(),
            Body::ReadRequest(_) => READ_REQUEST_LEN,
            Body::Terminate(t) => t.wire_len(),
            Body::Immediate(_) => IMMEDIATE_DATA_LEN,
        }
    }

    /// Bytes on the wire (the ULPDU's length).
    pub fn wire_len(&self) -> usize {
        self.header.wire_len() + self.body_len()
    }

    /// Writes the segment into the first [`Message::wire_len`] bytes of `buf` (for
    /// [`super::fpdu::emit`]'s fill).
    pub fn write_into(&self, buf: &mut [u8]) -> usize {
        let n = self.header.write_into(buf);
        let b = &mut buf[n..n + self.body_len()];
        match &self.body {
            Body::Data(d) => b.copy_from_slice(d),
            Body::ReadRequest(r) => b.copy_from_slice(&r.to_bytes()),
            Body::Terminate(t) => {
                t.write_into(b);
            }
            Body::Immediate(d) => b.copy_from_slice(d),
        }
        self.wire_len()
    }

    /// Appends the segment to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + self.wire_len(), 0);
        self.write_into(&mut out[at..]);
    }
}

// ---- building -----------------------------------------------------------------------------

/// The DDP header of a tagged message segment (Write or Read Response).
pub fn tagged_header(opcode: Opcode, stag: u32, to: u64, last: bool) -> Header {
    debug_assert!(opcode.tagged());
    Header {
        last,
        ulp_control: opcode.control_byte(),
        buffer: Buffer::Tagged { stag, to },
    }
}

/// The DDP header of an untagged message segment on the opcode's queue; `ulp` is the STag
/// to invalidate for the Sends with Invalidate, else 0.
pub fn untagged_header(opcode: Opcode, ulp: u32, msn: u32, mo: u32, last: bool) -> Header {
    Header {
        last,
        ulp_control: opcode.control_byte(),
        buffer: Buffer::Untagged {
            ulp,
            qn: opcode.queue().expect("an untagged opcode"),
            msn,
            mo,
        },
    }
}

/// A segment of a Write of `data` at `to` of the peer's `stag`.
pub fn write(stag: u32, to: u64, last: bool, data: &[u8]) -> Message<'_> {
    Message {
        opcode: Opcode::Write,
        header: tagged_header(Opcode::Write, stag, to, last),
        body: Body::Data(data),
    }
}

/// A segment of a Read Response placing `data` at `to` of the requester's sink `stag`.
pub fn read_response(stag: u32, to: u64, last: bool, data: &[u8]) -> Message<'_> {
    Message {
        opcode: Opcode::ReadResponse,
        header: tagged_header(Opcode::ReadResponse, stag, to, last),
        body: Body::Data(data),
    }
}

/// A segment of a Send (`opcode` one of the four; `invalidate` the STag for those with
/// Invalidate, else ignored) of message `msn` at offset `mo`.
pub fn send(
    opcode: Opcode,
    invalidate: u32,
    msn: u32,
    mo: u32,
    last: bool,
    data: &[u8],
) -> Message<'_> {
    debug_assert!(opcode.is_send());
    let ulp = if opcode.invalidates() { invalidate } else { 0 };
    Message {
        opcode,
        header: untagged_header(opcode, ulp, msn, mo, last),
        body: Body::Data(data),
    }
}

/// A Read Request, message `msn` of queue 1.
pub fn read_request(msn: u32, request: ReadRequest) -> Message<'static> {
    Message {
        opcode: Opcode::ReadRequest,
        header: untagged_header(Opcode::ReadRequest, 0, msn, 0, true),
        body: Body::ReadRequest(request),
    }
}

/// A Terminate, message `msn` of queue 2 (siw sends its one Terminate as MSN 1).
pub fn terminate(msn: u32, body: Terminate<'_>) -> Message<'_> {
    Message {
        opcode: Opcode::Terminate,
        header: untagged_header(Opcode::Terminate, 0, msn, 0, true),
        body: Body::Terminate(body),
    }
}

// ---- parsing ------------------------------------------------------------------------------

/// Why a ULPDU is not a valid RDMAP message segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Not a DDP segment.
    Ddp(ddp::Error),
    /// RV is not 1.
    Version(u8),
    /// An opcode RDMAP does not define (10-15).
    Opcode(u8),
    /// The opcode in a segment of the other buffer model.
    BufferModel(Opcode),
    /// An untagged opcode on another queue than its own.
    Queue { opcode: Opcode, qn: u32 },
    /// A single-segment message without L.
    NotLast(Opcode),
    /// A single-segment message at a non-zero MO.
    Offset { opcode: Opcode, mo: u32 },
    /// A Read Request or Immediate Data body of the wrong length.
    Length { opcode: Opcode, len: usize },
    /// A Terminate whose body does not parse.
    Terminate(terminate::Error),
}

impl Error {
    /// The error a Terminate answering this segment reports (RFC 5040 §7; codes as siw's
    /// receive path picks them where it checks the same thing).
    pub fn term_error(&self) -> TermError {
        use RdmapType::RemoteOperation;
        match *self {
            Error::Ddp(ddp::Error::Truncated) => TermError::DdpCatastrophic,
            Error::Ddp(ddp::Error::Version { tagged: true, .. }) => {
                TermError::DdpTagged(DdpTaggedCode::Version)
            }
            Error::Ddp(ddp::Error::Version { tagged: false, .. }) => {
                TermError::DdpUntagged(DdpUntaggedCode::Version)
            }
            Error::Version(_) => TermError::Rdmap(RemoteOperation, RdmapCode::Version),
            Error::Opcode(_) | Error::BufferModel(_) => {
                TermError::Rdmap(RemoteOperation, RdmapCode::UnexpectedOpcode)
            }
            Error::Queue { .. } => TermError::DdpUntagged(DdpUntaggedCode::InvalidQn),
            Error::Offset { .. } => TermError::DdpUntagged(DdpUntaggedCode::InvalidMo),
            Error::NotLast(_) | Error::Length { .. } | Error::Terminate(_) => {
                TermError::Rdmap(RemoteOperation, RdmapCode::Unspecified)
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Ddp(e) => e.fmt(f),
            Error::Version(v) => write!(f, "RDMAP version {v} (not 1)"),
            Error::Opcode(op) => write!(f, "RDMAP opcode {op} is not defined"),
            Error::BufferModel(op) => write!(f, "{op:?} in a segment of the wrong buffer model"),
            Error::Queue { opcode, qn } => write!(f, "{opcode:?} on queue {qn}"),
            Error::NotLast(op) => write!(f, "{op:?} in more than one segment (L clear)"),
            Error::Offset { opcode, mo } => write!(f, "{opcode:?} at message offset {mo}"),
            Error::Length { opcode, len } => write!(f, "{opcode:?} body of {len} bytes"),
            Error::Terminate(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

/// Parses a ULPDU as one RDMAP message segment and checks it against its opcode.
pub fn parse(ulpdu: &[u8]) -> Result<Message<'_>, Error> {
    let seg = ddp::parse(ulpdu).map_err(Error::Ddp)?;
    let header = seg.header;
    let version = header.ulp_control >> 6;
    if version != VERSION {
        return Err(Error::Version(version));
    }
    let op = header.ulp_control & control::OPCODE;
    let opcode = Opcode::from_u8(op).ok_or(Error::Opcode(op))?;
    if opcode.tagged() != header.tagged() {
        return Err(Error::BufferModel(opcode));
    }
    if let Buffer::Untagged { qn, mo, .. } = header.buffer {
        if Some(qn) != opcode.queue() {
            return Err(Error::Queue { opcode, qn });
        }
        if opcode.single_segment() {
            if !header.last {
                return Err(Error::NotLast(opcode));
            }
            if mo != 0 {
                return Err(Error::Offset { opcode, mo });
            }
        }
    }
    let payload = seg.payload;
    let length = Error::Length {
        opcode,
        len: payload.len(),
    };
    let body = match opcode {
        Opcode::ReadRequest => Body::ReadRequest(ReadRequest::parse(payload).ok_or(length)?),
        Opcode::Terminate => Body::Terminate(Terminate::parse(payload).map_err(Error::Terminate)?),
        Opcode::ImmediateData | Opcode::ImmediateDataSe => {
            Body::Immediate(payload.try_into().map_err(|_| length)?)
        }
        _ => Body::Data(payload),
    };
    Ok(Message {
        opcode,
        header,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::iwarp::wire::terminate::MpaCode;

    #[test]
    fn handmade_read_request() {
        // DDP untagged, L, DV 1; RDMAP RV 1 opcode 1; QN 1, MSN 7, MO 0; then sink STag
        // 0x11, sink TO 0x2000, size 0x300, source STag 0x44, source TO 0x5000.
        let b = [
            0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, // DDP
            0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x20, 0, // sink STag, TO
            0, 0, 0x03, 0, // size
            0, 0, 0, 0x44, 0, 0, 0, 0, 0, 0, 0x50, 0, // source STag, TO
        ];
        let m = parse(&b).unwrap();
        let rr = ReadRequest {
            sink_stag: 0x11,
            sink_to: 0x2000,
            size: 0x300,
            source_stag: 0x44,
            source_to: 0x5000,
        };
        assert_eq!(m, read_request(7, rr));
        let mut out = Vec::new();
        m.write(&mut out);
        assert_eq!(out, b);
        assert_eq!(m.wire_len(), b.len());
    }

    #[test]
    fn handmade_sends_and_writes() {
        // Send with SE and Invalidate: opcode 6, invalidate STag 0xcafe, MSN 2, MO 0.
        let mut b = vec![
            0x41, 0x46, 0, 0, 0xca, 0xfe, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0,
        ];
        b.extend_from_slice(b"hello");
        let m = parse(&b).unwrap();
        assert_eq!(m.opcode, Opcode::SendSeInvalidate);
        assert_eq!(m.invalidate_stag(), Some(0xcafe));
        assert!(m.opcode.solicited());
        assert_eq!(
            m,
            send(Opcode::SendSeInvalidate, 0xcafe, 2, 0, true, b"hello")
        );
        // Plain Send, not last, at MO 5: the spare word is not an STag.
        let mut b = vec![0x01, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5];
        b.extend_from_slice(b"x");
        let m = parse(&b).unwrap();
        assert_eq!(m.invalidate_stag(), None);
        assert_eq!(m, send(Opcode::Send, 99, 1, 5, false, b"x"));
        // Write and Read Response: tagged, opcodes 0 and 2.
        let w = [0xc1, 0x40, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0x10, 7, 7];
        assert_eq!(parse(&w).unwrap(), write(9, 0x10, true, &[7, 7]));
        let r = [0x81, 0x42, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0x10];
        assert_eq!(parse(&r).unwrap(), read_response(9, 0x10, false, &[]));
    }

    #[test]
    fn terminate_and_immediate() {
        let t = Terminate {
            error: TermError::Mpa(MpaCode::Crc),
            copied: None,
        };
        let b = [
            0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x20, 0x02, 0, 0,
        ];
        let m = parse(&b).unwrap();
        assert_eq!(m, terminate(1, t));
        let mut out = Vec::new();
        m.write(&mut out);
        assert_eq!(out, b);
        // Immediate Data: opcode 8 on queue 0, eight bytes.
        let mut b = vec![0x41, 0x48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0];
        b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let m = parse(&b).unwrap();
        assert_eq!(m.body, Body::Immediate([1, 2, 3, 4, 5, 6, 7, 8]));
        b.push(9);
        assert_eq!(
            parse(&b),
            Err(Error::Length {
                opcode: Opcode::ImmediateData,
                len: 9
            })
        );
    }

    fn untagged(ctrl: u8, qn: u32, last: bool, mo: u32) -> Vec<u8> {
        let h = Header {
            last,
            ulp_control: ctrl,
            buffer: Buffer::Untagged {
                ulp: 0,
                qn,
                msn: 1,
                mo,
            },
        };
        let mut b = Vec::new();
        h.write(&mut b);
        b
    }

    #[test]
    fn every_check_has_its_error_and_its_terminate() {
        use RdmapType::RemoteOperation;
        let cases: Vec<(Vec<u8>, Error, TermError)> = vec![
            (
                vec![0xc1; 3],
                Error::Ddp(ddp::Error::Truncated),
                TermError::DdpCatastrophic,
            ),
            (
                vec![0xc2; 14],
                Error::Ddp(ddp::Error::Version {
                    tagged: true,
                    version: 2,
                }),
                TermError::DdpTagged(DdpTaggedCode::Version),
            ),
            (
                untagged(0x43, 0, true, 0).iter().map(|&b| b & !3).collect(),
                Error::Ddp(ddp::Error::Version {
                    tagged: false,
                    version: 0,
                }),
                TermError::DdpUntagged(DdpUntaggedCode::Version),
            ),
            (
                untagged(0x83, 0, true, 0),
                Error::Version(2),
                TermError::Rdmap(RemoteOperation, RdmapCode::Version),
            ),
            (
                untagged(0x4a, 0, true, 0),
                Error::Opcode(10),
                TermError::Rdmap(RemoteOperation, RdmapCode::UnexpectedOpcode),
            ),
            (
                untagged(0x40, 0, true, 0),
                Error::BufferModel(Opcode::Write),
                TermError::Rdmap(RemoteOperation, RdmapCode::UnexpectedOpcode),
            ),
            (
                {
                    let mut b = vec![0xc1, 0x43];
                    b.extend_from_slice(&[0; 12]);
                    b
                },
                Error::BufferModel(Opcode::Send),
                TermError::Rdmap(RemoteOperation, RdmapCode::UnexpectedOpcode),
            ),
            (
                untagged(0x43, 1, true, 0),
                Error::Queue {
                    opcode: Opcode::Send,
                    qn: 1,
                },
                TermError::DdpUntagged(DdpUntaggedCode::InvalidQn),
            ),
            (
                untagged(0x41, 0, true, 0),
                Error::Queue {
                    opcode: Opcode::ReadRequest,
                    qn: 0,
                },
                TermError::DdpUntagged(DdpUntaggedCode::InvalidQn),
            ),
            (
                untagged(0x47, 7, true, 0),
                Error::Queue {
                    opcode: Opcode::Terminate,
                    qn: 7,
                },
                TermError::DdpUntagged(DdpUntaggedCode::InvalidQn),
            ),
            (
                untagged(0x41, 1, false, 0),
                Error::NotLast(Opcode::ReadRequest),
                TermError::Rdmap(RemoteOperation, RdmapCode::Unspecified),
            ),
            (
                untagged(0x47, 2, true, 4),
                Error::Offset {
                    opcode: Opcode::Terminate,
                    mo: 4,
                },
                TermError::DdpUntagged(DdpUntaggedCode::InvalidMo),
            ),
            (
                {
                    let mut b = untagged(0x41, 1, true, 0);
                    b.extend_from_slice(&[0; 27]);
                    b
                },
                Error::Length {
                    opcode: Opcode::ReadRequest,
                    len: 27,
                },
                TermError::Rdmap(RemoteOperation, RdmapCode::Unspecified),
            ),
            (
                untagged(0x47, 2, true, 0),
                Error::Terminate(terminate::Error::Truncated),
                TermError::Rdmap(RemoteOperation, RdmapCode::Unspecified),
            ),
        ];
        for (bytes, error, term) in cases {
            assert_eq!(parse(&bytes), Err(error), "{bytes:02x?}");
            assert_eq!(error.term_error(), term, "{error:?}");
            assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn reserved_bits_and_opcode_table() {
        // RDMAP's reserved bits are not checked.
        let mut b = untagged(0x43 | control::RESERVED, 0, true, 0);
        b.push(1);
        assert_eq!(parse(&b).unwrap().opcode, Opcode::Send);
        for v in 0..16u8 {
            let op = Opcode::from_u8(v);
            assert_eq!(op.is_some(), v <= 9);
            if let Some(op) = op {
                assert_eq!(op as u8, v);
                assert_eq!(op.control_byte(), 0x40 | v);
                assert_eq!(op.tagged(), op.queue().is_none());
            }
        }
        assert_eq!(Opcode::ReadRequest.queue(), Some(queue::READ_REQUEST));
        assert_eq!(Opcode::Terminate.queue(), Some(queue::TERMINATE));
        assert_eq!(Opcode::SendSe.queue(), Some(queue::SEND));
        assert_eq!(Opcode::ImmediateDataSe.queue(), Some(queue::SEND));
    }
}
