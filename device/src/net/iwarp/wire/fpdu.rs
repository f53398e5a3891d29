//! FPDUs, MPA's framing of ULPDUs in the TCP stream (RFC 5044 §4), without markers.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          ULPDU_Length         |                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//! ~             ULPDU (one DDP segment, ULPDU_Length bytes)       ~
//! +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                               |  PAD (0-3 zero bytes)         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     CRC (CRC32c, or zero)                     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The pad brings `ULPDU_Length`, ULPDU and pad to a multiple of 4 bytes. The CRC covers
//! exactly those bytes (siw: `siw_prepare_fpdu` starts it over the header, `ULPDU_Length`
//! included, `siw_tx_hdt` adds the payload and the pad and finishes it). It is the
//! ordinary CRC32c value (the one the `crc32c` crate and Linux's `crc32c()` compute, final
//! inversion included) sent as a *little-endian* 32-bit word: the polynomial's coefficients
//! in descending order, as iSCSI sends its digests (siw's `siw_crc_final` writes
//! `cpu_to_le32(~crc)`; Wireshark's `iwarp_mpa` checks the same bytes). When CRCs are off
//! the field is still there, sent as zero and not looked at on receipt (siw's
//! `siw_get_trailer` ignores it then).

use std::borrow::Cow;
use std::fmt;

use super::{be16, EmitError};

/// The `ULPDU_Length` field.
pub const LENGTH_LEN: usize = 2;
/// The CRC field.
pub const CRC_LEN: usize = 4;
/// The largest ULPDU `ULPDU_Length` can announce.
pub const MAX_ULPDU: usize = u16::MAX as usize;

/// Pad bytes after a ULPDU of `ulpdu_len` bytes.
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Bytes an FPDU carrying `ulpdu_len` bytes takes in the stream (always a multiple of 4).
pub fn fpdu_len(ulpdu_len: usize) -> usize {
    LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// MULPDU, the largest ULPDU whose FPDU fits a TCP segment of `emss` bytes of payload
/// (RFC 5044's formula without markers: `EMSS - (6 + EMSS mod 4)`), capped at what
/// `ULPDU_Length` can say. 0 when not even an empty ULPDU fits (`emss` below 8, far below
/// any IPv6 path).
pub fn mulpdu(emss: usize) -> usize {
    emss.saturating_sub(LENGTH_LEN + CRC_LEN + emss % 4)
        .min(MAX_ULPDU)
}

/// The CRC field's four bytes for the FPDU bytes it covers (`ULPDU_Length`, ULPDU, pad).
pub fn crc_field(covered: &[u8]) -> [u8; CRC_LEN] {
    crc32c::crc32c(covered).to_le_bytes()
}

/// Appends one FPDU of a `ulpdu_len`-byte ULPDU that `fill` writes (it gets exactly that
/// many bytes, zeroed), then the pad and the CRC field (computed when `crc`, else zero).
pub fn emit(
    ulpdu_len: usize,
    crc: bool,
    out: &mut Vec<u8>,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), EmitError> {
    if ulpdu_len > MAX_ULPDU {
        return Err(EmitError::UlpduTooLong(ulpdu_len));
    }
    let start = out.len();
    let covered = LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len);
    out.resize(start + covered, 0);
    out[start..start + LENGTH_LEN].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
    fill(&mut out[start + LENGTH_LEN..start + LENGTH_LEN + ulpdu_len]);
    let field = if crc {
        crc_field(&out[start..])
    } else {
        [0; CRC_LEN]
    };
    out.extend_from_slice(&field);
    Ok(())
}

/// [`emit`] with the ULPDU at hand.
pub fn build(ulpdu: &[u8], crc: bool, out: &mut Vec<u8>) -> Result<(), EmitError> {
    emit(ulpdu.len(), crc, out, |b| b.copy_from_slice(ulpdu))
}

/// Why the stream cannot be deframed (MPA has no way back into step: the connection must
/// end, with a Terminate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// `ULPDU_Length` above the receiver's maximum.
    TooLong { len: usize, max: usize },
    /// The CRC field does not match the bytes it covers (an LLP "CRC error").
    Crc {
        received: [u8; CRC_LEN],
        computed: [u8; CRC_LEN],
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::TooLong { len, max } => {
                write!(f, "FPDU announces a ULPDU of {len} bytes (at most {max})")
            }
            Error::Crc { received, computed } => write!(
                f,
                "FPDU CRC {:08x} where its bytes give {:08x}",
                u32::from_le_bytes(*received),
                u32::from_le_bytes(*computed)
            ),
        }
    }
}

impl std::error::Error for Error {}

/// What a prefix of the stream (starting at an FPDU boundary) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix<'a> {
    /// At least `needed` more bytes must come (exactly that many once `ULPDU_Length` is in).
    Incomplete { needed: usize },
    /// A whole FPDU, checked, the first `len` bytes of the stream.
    Complete { ulpdu: &'a [u8], len: usize },
}

/// Reads the FPDU at the start of `stream`, refusing a `ULPDU_Length` above `max_ulpdu` as
/// soon as it is in, and checking the CRC when `crc`.
pub fn parse_prefix(stream: &[u8], crc: bool, max_ulpdu: usize) -> Result<Prefix<'_>, Error> {
    if stream.len() < LENGTH_LEN {
        return Ok(Prefix::Incomplete {
            needed: LENGTH_LEN - stream.len(),
        });
    }
    let ulpdu_len = be16(stream, 0) as usize;
    if ulpdu_len > max_ulpdu {
        return Err(Error::TooLong {
            len: ulpdu_len,
            max: max_ulpdu,
        });
    }
    let len = fpdu_len(ulpdu_len);
    if stream.len() < len {
        return Ok(Prefix::Incomplete {
            needed: len - stream.len(),
        });
    }
    if crc {
        let (covered, field) = stream[..len].split_at(len - CRC_LEN);
        let computed = crc_field(covered);
        if field != computed {
            return Err(Error::Crc {
                received: [field[0], field[1], field[2], field[3]],
                computed,
            });
        }
    }
    Ok(Prefix::Complete {
        ulpdu: &stream[LENGTH_LEN..LENGTH_LEN + ulpdu_len],
        len,
    })
}

/// One received FPDU, checked: borrowed from the bytes fed when it lay whole in them,
/// owned when it was gathered across feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fpdu<'a>(Cow<'a, [u8]>);

impl Fpdu<'_> {
    /// The ULPDU (the DDP segment).
    pub fn ulpdu(&self) -> &[u8] {
        let n = be16(&self.0, 0) as usize;
        &self.0[LENGTH_LEN..LENGTH_LEN + n]
    }

    /// The whole FPDU as it was in the stream.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether it was gathered across feeds (a copy) rather than borrowed.
    pub fn is_copy(&self) -> bool {
        matches!(self.0, Cow::Owned(_))
    }
}

/// Cuts one direction of an MPA connection (after the request or reply) back into FPDUs.
/// Feed it the in-order stream as TCP delivers it, in any pieces; FPDUs lying whole in what
/// is fed come back without a copy, the rest is gathered here (at most one FPDU, bounded by
/// the maximum ULPDU). After an error the stream is lost for good: every later feed reports
/// it again and yields nothing.
#[derive(Debug, Clone)]
pub struct Deframer {
    crc: bool,
    max_ulpdu: usize,
    /// Stream bytes not yet returned: the start of an FPDU, or (when the caller stopped
    /// iterating early) more.
    partial: Vec<u8>,
    failed: Option<Error>,
}

impl Deframer {
    /// A deframer checking CRCs when `crc` and refusing ULPDUs above `max_ulpdu` (capped at
    /// [`MAX_ULPDU`]).
    pub fn new(crc: bool, max_ulpdu: usize) -> Deframer {
        Deframer {
            crc,
            max_ulpdu: max_ulpdu.min(MAX_ULPDU),
            partial: Vec::new(),
            failed: None,
        }
    }

    /// The FPDUs completed by `data` (the next bytes of the stream), in order. Bytes of an
    /// FPDU still incomplete are kept for the next feed, and so are those the caller did
    /// not iterate to (the stream is never dropped by stopping early).
    pub fn feed<'d>(&'d mut self, data: &'d [u8]) -> Fpdus<'d> {
        Fpdus {
            deframer: self,
            rest: data,
            reported: false,
        }
    }

    /// Bytes held for an FPDU not yet complete.
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// The error that ended the stream, if one did.
    pub fn error(&self) -> Option<Error> {
        self.failed
    }
}

/// The FPDUs of one [`Deframer::feed`].
pub struct Fpdus<'d> {
    deframer: &'d mut Deframer,
    rest: &'d [u8],
    /// Whether the deframer's error was already yielded by this feed.
    reported: bool,
}

impl<'d> Fpdus<'d> {
    fn fail(&mut self, e: Error) -> Option<Result<Fpdu<'d>, Error>> {
        self.deframer.failed = Some(e);
        self.deframer.partial = Vec::new();
        self.rest = &[];
        self.reported = true;
        Some(Err(e))
    }
}

impl<'d> Iterator for Fpdus<'d> {
    type Item = Result<Fpdu<'d>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (crc, max) = (self.deframer.crc, self.deframer.max_ulpdu);
        if let Some(e) = self.deframer.failed {
            return (!std::mem::replace(&mut self.reported, true)).then_some(Err(e));
        }
        if self.deframer.partial.is_empty() {
            return match parse_prefix(self.rest, crc, max) {
                Ok(Prefix::Complete { len, .. }) => {
                    let (fpdu, rest) = self.rest.split_at(len);
                    self.rest = rest;
                    Some(Ok(Fpdu(Cow::Borrowed(fpdu))))
                }
                Ok(Prefix::Incomplete { .. }) => {
                    self.deframer.partial.extend_from_slice(self.rest);
                    self.rest = &[];
                    None
                }
                Err(e) => self.fail(e),
            };
        }
        // An FPDU begun in an earlier feed: top it up from this one, never past its end.
        loop {
            match parse_prefix(&self.deframer.partial, crc, max) {
                Ok(Prefix::Complete { len, .. }) => {
                    let tail = self.deframer.partial.split_off(len);
                    let fpdu = std::mem::replace(&mut self.deframer.partial, tail);
                    return Some(Ok(Fpdu(Cow::Owned(fpdu))));
                }
                Ok(Prefix::Incomplete { needed }) => {
                    if self.rest.is_empty() {
                        return None;
                    }
                    let (take, rest) = self.rest.split_at(needed.min(self.rest.len()));
                    self.deframer.partial.extend_from_slice(take);
                    self.rest = rest;
                }
                Err(e) => return self.fail(e),
            }
        }
    }
}

impl Drop for Fpdus<'_> {
    fn drop(&mut self) {
        if self.deframer.failed.is_none() {
            self.deframer.partial.extend_from_slice(self.rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_published_iscsi_vectors_as_sent() {
        // RFC 3720 appendix B.4 lists CRC32c results as the bytes sent: the same order as
        // MPA's CRC field.
        assert_eq!(crc_field(&[0u8; 32]), [0xaa, 0x36, 0x91, 0x8a]);
        assert_eq!(crc_field(&[0xffu8; 32]), [0x43, 0xab, 0xa8, 0x62]);
        let up: Vec<u8> = (0..32).collect();
        assert_eq!(crc_field(&up), [0x4e, 0x79, 0xdd, 0x46]);
        let down: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc_field(&down), [0x5c, 0xdb, 0x3f, 0x11]);
        // The usual check value, 0xe3069283, little-endian.
        assert_eq!(crc_field(b"123456789"), [0x83, 0x92, 0x06, 0xe3]);
    }

    #[test]
    fn handmade_fpdus_with_every_pad() {
        // ULPDU of 6 bytes: 2 + 6 = 8, no pad.
        let u6 = [1, 2, 3, 4, 5, 6];
        let mut f = vec![0x00, 0x06, 1, 2, 3, 4, 5, 6];
        f.extend_from_slice(&crc_field(&f.clone()));
        let mut out = Vec::new();
        build(&u6, true, &mut out).unwrap();
        assert_eq!(out, f);
        // ULPDU of 3 bytes: 2 + 3 = 5, three pad bytes; CRC off: a zero field.
        let mut out = Vec::new();
        build(&[9, 9, 9], false, &mut out).unwrap();
        assert_eq!(out, [0x00, 0x03, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0]);
        for (n, pad) in [(0, 2), (1, 1), (2, 0), (3, 3), (4, 2), (5, 1), (18, 0)] {
            assert_eq!(pad_len(n), pad, "ULPDU of {n}");
            assert_eq!(fpdu_len(n), 2 + n + pad + 4);
            let u: Vec<u8> = (0..n as u8).collect();
            let mut out = vec![0xee]; // emit appends
            build(&u, true, &mut out).unwrap();
            assert_eq!(out.len(), 1 + fpdu_len(n));
            match parse_prefix(&out[1..], true, 100).unwrap() {
                Prefix::Complete { ulpdu, len } => {
                    assert_eq!(ulpdu, &u[..]);
                    assert_eq!(len, fpdu_len(n));
                }
                p => panic!("{p:?}"),
            }
        }
    }

    #[test]
    fn mulpdu_is_the_largest_that_fits() {
        // Ethernet, IPv6, TCP without options: EMSS 1440, FPDU of 1440 exactly.
        assert_eq!(mulpdu(1440), 1434);
        assert_eq!(mulpdu(1428), 1422); // with timestamps
        assert_eq!(mulpdu(1429), 1422);
        assert_eq!(mulpdu(8), 2);
        assert_eq!(mulpdu(7), 0);
        assert_eq!(mulpdu(0), 0);
        assert_eq!(mulpdu(1 << 20), MAX_ULPDU);
        for emss in 8..70_000 {
            let m = mulpdu(emss);
            assert!(fpdu_len(m) <= emss, "EMSS {emss}: {m}");
            assert!(m == MAX_ULPDU || fpdu_len(m + 1) > emss, "EMSS {emss}: {m}");
        }
    }

    #[test]
    fn emit_refuses_what_the_length_cannot_say() {
        let mut out = Vec::new();
        assert_eq!(
            emit(MAX_ULPDU + 1, true, &mut out, |_| {}),
            Err(EmitError::UlpduTooLong(MAX_ULPDU + 1))
        );
        assert!(out.is_empty());
        emit(MAX_ULPDU, true, &mut out, |b| b.fill(7)).unwrap();
        assert_eq!(out.len(), fpdu_len(MAX_ULPDU));
    }

    #[test]
    fn prefix_errors() {
        let mut f = Vec::new();
        build(&[1, 2, 3, 4, 5, 6, 7, 8], true, &mut f).unwrap();
        assert_eq!(
            parse_prefix(&f, true, 7),
            Err(Error::TooLong { len: 8, max: 7 })
        );
        // Refused from its first two bytes.
        assert_eq!(
            parse_prefix(&f[..2], true, 7),
            Err(Error::TooLong { len: 8, max: 7 })
        );
        assert_eq!(
            parse_prefix(&f[..1], true, 7),
            Ok(Prefix::Incomplete { needed: 1 })
        );
        assert_eq!(
            parse_prefix(&f[..5], true, 8),
            Ok(Prefix::Incomplete { needed: 11 })
        );
        let mut bad = f.clone();
        bad[4] ^= 0x10;
        assert!(matches!(
            parse_prefix(&bad, true, 8),
            Err(Error::Crc { .. })
        ));
        // CRC off: the field is not looked at.
        assert!(matches!(
            parse_prefix(&bad, false, 8),
            Ok(Prefix::Complete { len: 16, .. })
        ));
        // A flipped pad bit is caught by the CRC too.
        let mut f = Vec::new();
        build(&[1], true, &mut f).unwrap();
        f[3] = 1;
        assert!(matches!(parse_prefix(&f, true, 8), Err(Error::Crc { .. })));
    }

    fn stream(ulpdus: &[Vec<u8>], crc: bool) -> Vec<u8> {
        let mut s = Vec::new();
        for u in ulpdus {
            build(u, crc, &mut s).unwrap();
        }
        s
    }

    fn ulpdus() -> Vec<Vec<u8>> {
        (0..40u8)
            .map(|i| (0..(i as usize * 7) % 61).map(|j| i ^ j as u8).collect())
            .collect()
    }

    #[test]
    fn deframes_any_chunking() {
        let us = ulpdus();
        for crc in [false, true] {
            let s = stream(&us, crc);
            for chunk in [1, 2, 3, 4, 5, 7, 13, 64, 1000, s.len()] {
                let mut d = Deframer::new(crc, 100);
                let mut got = Vec::new();
                let mut copies = 0;
                for c in s.chunks(chunk) {
                    for f in d.feed(c) {
                        let f = f.unwrap();
                        copies += f.is_copy() as usize;
                        got.push(f.ulpdu().to_vec());
                    }
                }
                assert_eq!(got, us, "chunks of {chunk}");
                assert_eq!(d.buffered(), 0);
                if chunk == s.len() {
                    assert_eq!(copies, 0, "a whole stream is deframed without copies");
                }
            }
        }
    }

    #[test]
    fn stopping_early_keeps_the_rest_of_the_stream() {
        let us = ulpdus();
        let s = stream(&us, true);
        let mut d = Deframer::new(true, 100);
        let mut got = Vec::new();
        for c in s.chunks(50) {
            // Take one FPDU per feed at most; the rest waits in the deframer.
            if let Some(f) = d.feed(c).next() {
                got.push(f.unwrap().ulpdu().to_vec());
            }
        }
        assert!(d.buffered() > 0);
        for f in d.feed(&[]) {
            got.push(f.unwrap().ulpdu().to_vec());
        }
        assert_eq!(got, us);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn an_error_ends_the_stream() {
        let us = ulpdus();
        let mut s = stream(&us[..3], true);
        let bad_at = s.len() + 3;
        s.extend_from_slice(&stream(&us[3..6], true));
        s[bad_at] ^= 1;
        let mut d = Deframer::new(true, 100);
        let got: Vec<_> = d.feed(&s).collect();
        assert_eq!(got.len(), 4);
        assert!(got[..3].iter().all(Result::is_ok));
        assert!(matches!(got[3], Err(Error::Crc { .. })));
        assert!(matches!(d.error(), Some(Error::Crc { .. })));
        // Reported once by each later feed, and nothing more comes out.
        let more = stream(&us[..2], true);
        let again: Vec<_> = d.feed(&more).collect();
        assert_eq!(again.len(), 1);
        assert!(again[0].is_err());
        assert_eq!(d.buffered(), 0);
        // Too long, seen across a feed boundary.
        let mut d = Deframer::new(false, 10);
        assert_eq!(d.feed(&[0x00]).count(), 0);
        let r: Vec<_> = d.feed(&[0x0b, 0, 0]).collect();
        assert_eq!(r, [Err(Error::TooLong { len: 11, max: 10 })]);
    }
}
