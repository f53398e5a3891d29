//! DDP segments (RFC 5041 §4-§5): the header that says where a segment's payload goes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |T|L| Rsvd  | DV|   RsvdULP     |  tagged (T=1):  STag (32) ... |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+   TO (64): 14 bytes in all    |
//! |                               |  untagged (T=0): RsvdULP (32),|
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+   QN, MSN, MO (32 each): 18   |
//! ```
//!
//! T: tagged buffer model (the payload goes to offset TO of the buffer named by STag) or
//! untagged (to the buffer at the head of queue QN for message MSN, at offset MO in it).
//! L: last segment of its message. DV: DDP version, 1. The 8 bits after the control byte and,
//! in untagged segments, the 32 bits after them belong to the upper layer (RDMAP puts its
//! control byte and the STag a Send invalidates there); DDP carries them untouched. Rsvd is
//! sent as zero and not checked on receipt.

use std::fmt;

use super::{be32, be64};

/// DDP version (DV).
pub const VERSION: u8 = 1;
pub const TAGGED_HEADER_LEN: usize = 14;
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// Bits of the control byte.
pub mod control {
    pub const TAGGED: u8 = 0x80;
    pub const LAST: u8 = 0x40;
    pub const RESERVED: u8 = 0x3c;
    pub const VERSION: u8 = 0x03;
}

/// Which buffer model a segment uses, and its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// Placement at tagged offset `to` of the buffer `stag` advertised.
    Tagged { stag: u32, to: u64 },
    /// Placement into the untagged buffer of queue `qn`, message `msn`, at offset `mo`;
    /// `ulp` is the upper layer's 32 bits (RDMAP: the STag to invalidate, else 0).
    Untagged {
        ulp: u32,
        qn: u32,
        msn: u32,
        mo: u32,
    },
}

/// A DDP header. `ulp_control` is the upper layer's byte (RDMAP's control byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub last: bool,
    pub ulp_control: u8,
    pub buffer: Buffer,
}

impl Header {
    pub fn tagged(&self) -> bool {
        matches!(self.buffer, Buffer::Tagged { .. })
    }

    /// Bytes on the wire: [`TAGGED_HEADER_LEN`] or [`UNTAGGED_HEADER_LEN`].
    pub fn wire_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    pub fn control_byte(&self) -> u8 {
        let t = if self.tagged() { control::TAGGED } else { 0 };
        let l = if self.last { control::LAST } else { 0 };
        t | l | VERSION
    }

    /// Writes the header into the first [`Header::wire_len`] bytes of `buf` (which must have
    /// them) and returns that length.
    pub fn write_into(&self, buf: &mut [u8]) -> usize {
        let n = self.wire_len();
        let b = &mut buf[..n];
        b[0] = self.control_byte();
        b[1] = self.ulp_control;
        match self.buffer {
            Buffer::Tagged { stag, to } => {
                b[2..6].copy_from_slice(&stag.to_be_bytes());
                b[6..14].copy_from_slice(&to.to_be_bytes());
            }
            Buffer::Untagged { ulp, qn, msn, mo } => {
                b[2..6].copy_from_slice(&ulp.to_be_bytes());
                b[6..10].copy_from_slice(&qn.to_be_bytes());
                b[10..14].copy_from_slice(&msn.to_be_bytes());
                b[14..18].copy_from_slice(&mo.to_be_bytes());
            }
        }
        n
    }

    /// Appends the header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + self.wire_len(), 0);
        self.write_into(&mut out[at..]);
    }
}

/// A DDP segment: header and payload (the rest of the ULPDU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    pub header: Header,
    pub payload: &'a [u8],
}

impl Segment<'_> {
    /// Bytes on the wire (the ULPDU's length).
    pub fn wire_len(&self) -> usize {
        self.header.wire_len() + self.payload.len()
    }

    /// Writes header and payload into the first [`Segment::wire_len`] bytes of `buf`.
    pub fn write_into(&self, buf: &mut [u8]) -> usize {
        let n = self.header.write_into(buf);
        buf[n..n + self.payload.len()].copy_from_slice(self.payload);
        self.wire_len()
    }
}

/// Why a ULPDU is not a DDP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the header its T bit announces (or empty).
    Truncated,
    /// DV is not 1. `tagged` is the T bit, which decides the error code a Terminate
    /// reports.
    Version { tagged: bool, version: u8 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("DDP segment shorter than its header"),
            Error::Version { version, .. } => write!(f, "DDP version {version} (not 1)"),
        }
    }
}

impl std::error::Error for Error {}

/// Parses one DDP segment (an FPDU's ULPDU).
pub fn parse(ulpdu: &[u8]) -> Result<Segment<'_>, Error> {
    let Some(&ctrl) = ulpdu.first() else {
        return Err(Error::Truncated);
    };
    let tagged = ctrl & control::TAGGED != 0;
    let version = ctrl & control::VERSION;
    if version != VERSION {
        return Err(Error::Version { tagged, version });
    }
    let len = if tagged {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    };
    if ulpdu.len() < len {
        return Err(Error::Truncated);
    }
    let buffer = if tagged {
        Buffer::Tagged {
            stag: be32(ulpdu, 2),
            to: be64(ulpdu, 6),
        }
    } else {
        Buffer::Untagged {
            ulp: be32(ulpdu, 2),
            qn: be32(ulpdu, 6),
            msn: be32(ulpdu, 10),
            mo: be32(ulpdu, 14),
        }
    };
    Ok(Segment {
        header: Header {
            last: ctrl & control::LAST != 0,
            ulp_control: ulpdu[1],
            buffer,
        },
        payload: &ulpdu[len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handmade_tagged_segment() {
        // T=1 L=1 DV=1, RDMAP byte 0x40 (Write), STag 0x01020304, TO 0x1122334455667788.
        let b = [
            0xc1, 0x40, 0x01, 0x02, 0x03, 0x04, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
            b'h', b'i',
        ];
        let s = parse(&b).unwrap();
        assert_eq!(
            s.header,
            Header {
                last: true,
                ulp_control: 0x40,
                buffer: Buffer::Tagged {
                    stag: 0x0102_0304,
                    to: 0x1122_3344_5566_7788
                },
            }
        );
        assert_eq!(s.payload, b"hi");
        assert_eq!(s.wire_len(), b.len());
        let mut out = vec![0u8; b.len()];
        assert_eq!(s.write_into(&mut out), b.len());
        assert_eq!(out, b);
    }

    #[test]
    fn handmade_untagged_segment() {
        // T=0 L=0 DV=1, RDMAP byte 0x43 (Send), invalidate word, QN 0, MSN 1, MO 0x100.
        let b = [
            0x01, 0x43, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0,
        ];
        let s = parse(&b).unwrap();
        assert_eq!(
            s.header,
            Header {
                last: false,
                ulp_control: 0x43,
                buffer: Buffer::Untagged {
                    ulp: 0xaabb_ccdd,
                    qn: 0,
                    msn: 1,
                    mo: 0x100
                },
            }
        );
        assert!(s.payload.is_empty());
        let mut out = Vec::new();
        s.header.write(&mut out);
        assert_eq!(out, b);
    }

    #[test]
    fn reserved_bits_are_ignored_and_sent_as_zero() {
        let mut b = [0u8; 18];
        b[0] = 0x01 | control::RESERVED;
        let s = parse(&b).unwrap();
        assert_eq!(s.header.control_byte(), 0x01);
    }

    #[test]
    fn errors() {
        assert_eq!(parse(&[]), Err(Error::Truncated));
        assert_eq!(parse(&[0xc1; 13]), Err(Error::Truncated));
        assert!(parse(&[0xc1; 14]).is_ok());
        assert_eq!(parse(&[0x41; 17]), Err(Error::Truncated));
        assert!(parse(&[0x41; 18]).is_ok());
        assert_eq!(
            parse(&[0x82; 14]),
            Err(Error::Version {
                tagged: true,
                version: 2
            })
        );
        // The version is judged from the first byte alone.
        assert_eq!(
            parse(&[0x40]),
            Err(Error::Version {
                tagged: false,
                version: 0
            })
        );
    }
}
