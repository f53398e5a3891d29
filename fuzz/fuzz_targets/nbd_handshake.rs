//! The NBD server's side of the handshake (`qpip_nbd::negotiate::Negotiation`) on any
//! bytes a client may send, cut any way, and the request header parser on what follows.
//!
//! Input: a count and that many chunk sizes (u8, the bytes are fed in these sizes, round
//! and round), then the client's bytes.
//!
//! Checked:
//! * nothing panics (arithmetic overflow included);
//! * it consumes every byte it is given until the negotiation ends, and none after;
//! * it ends the same way, having written the same replies, whether the bytes come whole,
//!   in the fuzzed chunks or one at a time;
//! * what it writes is the greeting and then well-formed option replies (magic, lengths
//!   that add up) or one EXPORT_NAME answer that ends the negotiation;
//! * request headers after a transmission phase start parse or are refused, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_fuzz::Input;
use qpip_nbd::negotiate::{End, ExportInfo, Negotiation};
use qpip_nbd::proto::{self, OptionReplyHeader, Request, OPTION_REPLY_HEADER_LEN, REQUEST_LEN};

fn export() -> ExportInfo {
    ExportInfo {
        name: "disk".into(),
        size: 1 << 30,
        flags: proto::flags::HAS_FLAGS | proto::flags::SEND_FLUSH,
        min_block: 1,
        preferred_block: 4096,
        max_payload: proto::MAX_PAYLOAD,
    }
}

/// Feeds `bytes` in chunks of `sizes` (round and round); returns the bytes consumed, the
/// output and the end.
fn run(bytes: &[u8], sizes: &[usize]) -> (usize, Vec<u8>, Option<End>) {
    let mut n = Negotiation::new(export());
    let mut out = n.take_output();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let size = sizes[i % sizes.len()].max(1);
        i += 1;
        let chunk = &bytes[at..(at + size).min(bytes.len())];
        let used = n.input(chunk);
        assert!(used <= chunk.len());
        out.extend_from_slice(&n.take_output());
        at += used;
        if n.end().is_some() {
            // Nothing more is consumed once it ended.
            assert_eq!(n.input(&bytes[at..]), 0);
            break;
        }
        assert_eq!(used, chunk.len(), "all of it consumed before the end");
    }
    (at, out, n.end().cloned())
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let count = input.u8() as usize % 8 + 1;
    let sizes: Vec<usize> = (0..count).map(|_| input.u8() as usize).collect();
    let bytes = input.rest();
    let whole = run(bytes, &[usize::MAX]);
    let chunked = run(bytes, &sizes);
    let single = run(bytes, &[1]);
    assert_eq!(whole, chunked, "the same whatever the chunks");
    assert_eq!(whole, single, "the same byte by byte");
    let (used, out, end) = whole;
    // The greeting, then replies.
    assert_eq!(&out[..8], b"NBDMAGIC");
    let mut rest = &out[proto::GREETING_LEN..];
    while rest.len() >= OPTION_REPLY_HEADER_LEN {
        let Ok(h) = OptionReplyHeader::parse(rest[..OPTION_REPLY_HEADER_LEN].try_into().unwrap())
        else {
            break;
        };
        let len = OPTION_REPLY_HEADER_LEN + h.len as usize;
        assert!(rest.len() >= len, "a reply's data is all there");
        rest = &rest[len..];
    }
    // What is left is the EXPORT_NAME answer (size, flags and maybe 124 zeroes), and only
    // when the negotiation went to transmission.
    if !rest.is_empty() {
        assert_eq!(end, Some(End::Transmission), "{rest:?}");
        assert!(rest.len() == 10 || rest.len() == 134, "{}", rest.len());
    }
    if end == Some(End::Transmission) {
        for h in bytes[used..].chunks_exact(REQUEST_LEN) {
            let _ = Request::parse(h.try_into().unwrap());
        }
    }
});
