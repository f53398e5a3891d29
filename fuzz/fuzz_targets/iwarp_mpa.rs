//! MPA's two stream parsers on any bytes, cut any way: the request/reply parser
//! (`net::iwarp::wire::mpa::parse_prefix`) and the FPDU deframer (`fpdu::Deframer`), as
//! the engine will run them over what a TCP connection delivers.
//!
//! Input: a control byte (bit 0: a reply is expected rather than a request; bit 1: CRCs
//! on), the deframer's maximum ULPDU (u16), a count and that many chunk sizes (u8, the
//! stream is fed in these sizes, round and round), then the stream.
//!
//! Checked:
//! * nothing panics (arithmetic overflow included);
//! * the MPA parser agrees with itself over every prefix of the stream: shorter prefixes
//!   of a whole frame ask for more (exactly the missing count once the header is in), an
//!   error stays the same error as bytes arrive, a whole frame re-emits to its own bytes
//!   and its enhanced block to its own four bytes;
//! * the deframer yields the same FPDUs and the same error whether the stream comes whole,
//!   in the fuzzed chunks, byte by byte, or with the caller taking one FPDU per feed; these
//!   are the FPDUs (and error) of `fpdu::parse_prefix` walked over the stream; each
//!   re-emits to its own bytes (with CRCs off: all but the pad and the CRC field, which are
//!   not looked at).
//!
//! The deframer runs over the whole stream and, when the stream opens with a whole MPA
//! frame, over what follows it (the realistic case).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_device::net::iwarp::wire::fpdu::{self, Deframer};
use qpip_device::net::iwarp::wire::mpa::{self, Kind, Prefix};
use qpip_fuzz::{trace, Input};

fuzz_target!(|data: &[u8]| {
    let mut i = Input::new(data);
    let ctl = i.u8();
    let kind = if ctl & 1 == 0 {
        Kind::Request
    } else {
        Kind::Reply
    };
    let crc = ctl & 2 != 0;
    let max_ulpdu = i.u16() as usize;
    let n = i.u8() as usize % 16;
    let chunks: Vec<usize> = (0..n).map(|_| i.u8() as usize + 1).collect();
    let stream = i.rest();
    trace!(
        "{kind:?}, crc {crc}, max ULPDU {max_ulpdu}, chunks {chunks:?}, {} bytes",
        stream.len()
    );

    let mpa_len = check_mpa(stream, kind);
    check_deframer(stream, crc, max_ulpdu, &chunks);
    if let Some(len) = mpa_len {
        check_deframer(&stream[len..], crc, max_ulpdu, &chunks);
    }
});

/// Checks the MPA parser over every prefix; the frame's length if the stream opens with one.
fn check_mpa(stream: &[u8], kind: Kind) -> Option<usize> {
    let full = mpa::parse_prefix(stream, kind);
    trace!("MPA: {full:?}");
    let mut first_error = None;
    for k in 0..=stream.len() {
        let p = mpa::parse_prefix(&stream[..k], kind);
        match p {
            Ok(Prefix::Incomplete { needed }) => {
                assert!(needed > 0);
                assert!(
                    first_error.is_none(),
                    "{k} bytes: Incomplete after an error"
                );
                if let Ok(Prefix::Complete { len, .. }) = full {
                    assert!(k < len && needed <= len - k, "{k} bytes: needs {needed}");
                    if k >= mpa::HEADER_LEN {
                        assert_eq!(needed, len - k);
                    }
                }
            }
            Ok(Prefix::Complete { frame, len }) => {
                assert!(len <= k);
                assert_eq!(p, full, "{k} bytes");
                if k == len {
                    let mut out = Vec::new();
                    frame.emit(&mut out).expect("a parsed frame emits");
                    assert_eq!(out, &stream[..len]);
                    if let Ok((Some(block), ulp)) = frame.split_enhanced() {
                        let b = block.to_bytes().expect("a parsed block emits");
                        assert_eq!(&b[..], &frame.private_data[..mpa::ENHANCED_BLOCK_LEN]);
                        assert_eq!(ulp, &frame.private_data[mpa::ENHANCED_BLOCK_LEN..]);
                    }
                }
            }
            Err(e) => {
                assert_eq!(*first_error.get_or_insert(e), e, "{k} bytes");
                assert_eq!(full, Err(e));
            }
        }
    }
    match full {
        Ok(Prefix::Complete { len, .. }) => Some(len),
        _ => None,
    }
}

/// What the deframer must yield: ULPDUs, then an error or how many bytes stay buffered.
#[derive(Debug, PartialEq)]
struct Outcome {
    ulpdus: Vec<Vec<u8>>,
    error: Option<fpdu::Error>,
    buffered: usize,
}

fn reference(stream: &[u8], crc: bool, max: usize) -> Outcome {
    let mut o = Outcome {
        ulpdus: Vec::new(),
        error: None,
        buffered: 0,
    };
    let mut rest = stream;
    loop {
        match fpdu::parse_prefix(rest, crc, max) {
            Ok(fpdu::Prefix::Complete { ulpdu, len }) => {
                o.ulpdus.push(ulpdu.to_vec());
                rest = &rest[len..];
            }
            Ok(fpdu::Prefix::Incomplete { .. }) => {
                o.buffered = rest.len();
                return o;
            }
            Err(e) => {
                o.error = Some(e);
                return o;
            }
        }
    }
}

/// Collects what one feed yields, checking each FPDU against its re-emission.
fn take(o: &mut Outcome, item: Result<fpdu::Fpdu<'_>, fpdu::Error>, crc: bool) {
    match item {
        Ok(f) => {
            assert!(o.error.is_none(), "an FPDU after the error");
            let u = f.ulpdu();
            let mut again = Vec::new();
            fpdu::build(u, crc, &mut again).expect("a received ULPDU emits");
            assert_eq!(again.len(), f.bytes().len());
            // The pad bytes must be sent as zero but are ignored on receipt (RFC 5044
            // §4.1) though covered by the CRC: the CRC re-emits only over a zero pad.
            let body = 2 + u.len();
            let pad = (4 - body % 4) % 4;
            let zero_pad = f.bytes()[body..body + pad].iter().all(|&b| b == 0);
            let checked = if crc && zero_pad { again.len() } else { body };
            assert_eq!(again[..checked], f.bytes()[..checked]);
            o.ulpdus.push(u.to_vec());
        }
        Err(e) => {
            assert!(o.error.is_none(), "the error twice in one run");
            o.error = Some(e);
        }
    }
}

fn run(stream: &[u8], crc: bool, max: usize, cut: &mut dyn Iterator<Item = usize>) -> Outcome {
    let mut d = Deframer::new(crc, max);
    let mut o = Outcome {
        ulpdus: Vec::new(),
        error: None,
        buffered: 0,
    };
    let mut rest = stream;
    while !rest.is_empty() {
        let (chunk, r) = rest.split_at(cut.next().unwrap_or(rest.len()).min(rest.len()));
        rest = r;
        let before = o.error;
        let mut n = 0;
        for item in d.feed(chunk) {
            if before.is_some() {
                // Every feed after the error reports it again, once, and nothing else.
                assert_eq!(item.err(), before);
                n += 1;
                continue;
            }
            take(&mut o, item, crc);
        }
        assert!(n <= 1);
    }
    assert_eq!(d.error(), o.error);
    o.buffered = d.buffered();
    o
}

fn check_deframer(stream: &[u8], crc: bool, max: usize, chunks: &[usize]) {
    let want = reference(stream, crc, max.min(fpdu::MAX_ULPDU));
    trace!(
        "FPDUs: {} ULPDUs, error {:?}, {} bytes left",
        want.ulpdus.len(),
        want.error,
        want.buffered
    );
    let whole = run(stream, crc, max, &mut std::iter::empty());
    assert_eq!(whole, want, "whole");
    if !chunks.is_empty() {
        let got = run(stream, crc, max, &mut chunks.iter().copied().cycle());
        assert_eq!(got, want, "chunks {chunks:?}");
    }
    if stream.len() <= 512 {
        let got = run(stream, crc, max, &mut std::iter::repeat(1));
        assert_eq!(got, want, "byte by byte");
    }
    // The caller takes at most one FPDU a feed; the rest must wait, not vanish.
    let mut d = Deframer::new(crc, max);
    let mut o = Outcome {
        ulpdus: Vec::new(),
        error: None,
        buffered: 0,
    };
    let size = chunks.first().copied().unwrap_or(64);
    for chunk in stream.chunks(size) {
        if o.error.is_some() {
            break;
        }
        if let Some(item) = d.feed(chunk).next() {
            take(&mut o, item, crc);
        }
    }
    while o.error.is_none() {
        match d.feed(&[]).next() {
            Some(item) => take(&mut o, item, crc),
            None => break,
        }
    }
    o.buffered = d.buffered();
    assert_eq!(o, want, "one FPDU a feed");
}
