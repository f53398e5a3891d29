//! iWARP packet formats. No protocol state lives here.
//!
//! What a TCP connection carries once it speaks iWARP, outermost first:
//! - [`mpa`]: one MPA request (initiator to responder) and one MPA reply, the connection
//!   setup frames of RFC 5044 §7.1 with RFC 6581's IRD/ORD block in their private data;
//!   parsed from a prefix of the byte stream, since they arrive in TCP segments like
//!   everything else.
//! - [`fpdu`]: after them, each direction is a sequence of FPDUs (RFC 5044 §4):
//!   `ULPDU_Length`, the ULPDU, a pad to a 4-byte boundary and a CRC32c field. No markers
//!   (they are refused at negotiation). [`fpdu::Deframer`] cuts the received stream back
//!   into ULPDUs, whatever the TCP segment boundaries.
//! - [`ddp`]: each ULPDU is one DDP segment (RFC 5041): a control byte, a byte DDP leaves to
//!   its upper layer, a tagged (STag, TO) or untagged (QN, MSN, MO) header, the payload.
//! - [`rdmap`]: RDMAP (RFC 5040) gives that upper-layer byte its version and opcode and
//!   the untagged header's spare word its meaning (the STag a Send invalidates), and adds
//!   the Read Request's body; [`rdmap::parse`] checks a segment against its opcode.
//! - [`terminate`]: the Terminate message's body and the error codes it carries
//!   (RFC 5040 §7), with the rules for which headers of the failed segment it copies.
//!
//! Every field is big-endian except the FPDU CRC (see [`fpdu`]). Parsers take untrusted
//! bytes: every length is checked, an error names what was wrong, nothing panics. Emitters
//! append to a `Vec<u8>` (or write into a slice the caller sized with `wire_len()`).

/// Declares a `#[repr(u8)]` enum of a format's numbered codes and its `from_u8`, so that
/// each code's number is written once.
macro_rules! u8_codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $n:literal,)* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name { $($(#[$vmeta])* $variant = $n,)* }

        impl $name {
            /// The code numbered `v`, if the format names one.
            pub fn from_u8(v: u8) -> Option<$name> {
                match v {
                    $($n => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

pub mod ddp;
pub mod fpdu;
pub mod mpa;
pub mod rdmap;
pub mod terminate;

#[cfg(test)]
mod tshark_tests;

use std::fmt;

/// Why a frame or message could not be built: a value the format cannot carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// MPA private data longer than [`mpa::MAX_PRIVATE_DATA`].
    PrivateDataTooLong(usize),
    /// An IRD or ORD above [`mpa::MAX_IRD_ORD`] (14 bits).
    IrdOrdTooLarge(u16),
    /// A ULPDU longer than `ULPDU_Length` (16 bits) can say.
    UlpduTooLong(usize),
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            EmitError::PrivateDataTooLong(n) => write!(
                f,
                "MPA private data of {n} bytes (at most {})",
                mpa::MAX_PRIVATE_DATA
            ),
            EmitError::IrdOrdTooLarge(v) => {
                write!(
                    f,
                    "IRD/ORD {v} does not fit 14 bits (at most {})",
                    mpa::MAX_IRD_ORD
                )
            }
            EmitError::UlpduTooLong(n) => {
                write!(f, "ULPDU of {n} bytes (at most {})", fpdu::MAX_ULPDU)
            }
        }
    }
}

impl std::error::Error for EmitError {}

// Field readers for the parsers: each caller has checked the length first.

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}
