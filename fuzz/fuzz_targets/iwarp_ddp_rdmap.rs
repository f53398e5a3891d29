//! The iWARP segment parsers on any ULPDU (the bytes an FPDU carries): DDP
//! (`net::iwarp::wire::ddp::parse`), RDMAP with its checks against the opcode
//! (`rdmap::parse`), the Terminate body (`terminate::Terminate::parse`), and the small
//! fixed-size ones (Read Request body, RFC 6581's IRD/ORD block, Terminate error codes)
//! on the input's first bytes.
//!
//! Checked:
//! * nothing panics (arithmetic overflow included);
//! * whatever parses re-emits to the same bytes, but for the bits a parser does not keep
//!   (reserved bits, sent as zero, and a Terminate's DDP Segment Length when M says it is
//!   not valid, sent as zero), and parses again to the same value;
//! * a parsed message is consistent with its opcode (buffer model, queue, body);
//! * for a segment that fails to parse, the Terminate the engine would answer with (the
//!   error's `term_error`, the failed segment's headers copied by `Terminate::about`)
//!   builds, goes into an FPDU with a CRC and comes back out of it unchanged; the same for
//!   a few errors about a segment that does parse (placement errors found later).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_device::net::iwarp::wire::ddp::{self, UNTAGGED_HEADER_LEN};
use qpip_device::net::iwarp::wire::fpdu;
use qpip_device::net::iwarp::wire::mpa::EnhancedBlock;
use qpip_device::net::iwarp::wire::rdmap::{self, Body, ReadRequest, READ_REQUEST_LEN};
use qpip_device::net::iwarp::wire::terminate::{
    hdrct, DdpTaggedCode, DdpUntaggedCode, RdmapCode, RdmapType, TermError, Terminate,
};
use qpip_fuzz::trace;

fuzz_target!(|data: &[u8]| {
    check_ddp(data);
    check_rdmap(data);
    check_terminate_body(data);
    check_fixed(data);
});

fn check_ddp(data: &[u8]) {
    match ddp::parse(data) {
        Ok(seg) => {
            trace!(
                "DDP: {:?}, {} bytes of payload",
                seg.header,
                seg.payload.len()
            );
            assert_eq!(seg.wire_len(), data.len());
            let mut out = vec![0u8; seg.wire_len()];
            assert_eq!(seg.write_into(&mut out), data.len());
            let mut canonical = data.to_vec();
            canonical[0] &= !ddp::control::RESERVED;
            assert_eq!(out, canonical);
            assert_eq!(ddp::parse(&out), Ok(seg));
        }
        Err(e) => trace!("DDP: {e}"),
    }
}

/// A Terminate body with the bits the parser does not keep cleared.
fn canonical_terminate(body: &mut [u8]) {
    // A body in Linux siw's x86 bit order (see `Terminate::parse`) re-emits in RFC 5040's.
    let siw = body[2] & !0x07 == 0 && body[2] & 0x02 != 0 && body.len() > 4;
    if siw {
        body[0] = body[0].rotate_left(4);
        let (m, d, r) = (body[2] & 1 != 0, body[2] & 2 != 0, body[2] & 4 != 0);
        body[2] = (m as u8) * hdrct::M | (d as u8) * hdrct::D | (r as u8) * hdrct::R;
    }
    body[2] &= hdrct::M | hdrct::D | hdrct::R;
    body[3] = 0;
    if body[2] & hdrct::D != 0 && body[2] & hdrct::M == 0 {
        body[4] = 0;
        body[5] = 0;
    }
}

fn check_rdmap(data: &[u8]) {
    let m = match rdmap::parse(data) {
        Ok(m) => m,
        Err(e) => {
            trace!("RDMAP: {e}");
            check_terminate_about(e.term_error(), data);
            return;
        }
    };
    trace!("RDMAP: {m:?}");
    assert_eq!(m.wire_len(), data.len());
    assert_eq!(m.opcode.tagged(), m.header.tagged());
    assert_eq!(m.header.ulp_control & 0x0f, m.opcode as u8);
    if let ddp::Buffer::Untagged { qn, mo, .. } = m.header.buffer {
        assert_eq!(Some(qn), m.opcode.queue());
        if m.opcode.single_segment() {
            assert!(m.header.last && mo == 0);
        }
    }
    let mut out = Vec::new();
    m.write(&mut out);
    let mut canonical = data.to_vec();
    canonical[0] &= !ddp::control::RESERVED;
    match m.body {
        Body::ReadRequest(rr) => {
            assert_eq!(rr.to_bytes()[..], data[UNTAGGED_HEADER_LEN..]);
        }
        Body::Terminate(t) => {
            canonical_terminate(&mut canonical[UNTAGGED_HEADER_LEN..]);
            if let Some(c) = t.copied {
                let _ = c.ddp();
            }
        }
        Body::Data(d) => assert_eq!(d, &data[m.header.wire_len()..]),
        Body::Immediate(d) => assert_eq!(d[..], data[UNTAGGED_HEADER_LEN..]),
    }
    assert_eq!(out, canonical);
    assert_eq!(rdmap::parse(&out), Ok(m));
    // Errors the engine finds only when placing the segment.
    for e in [
        TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::AccessRights),
        TermError::Rdmap(RdmapType::RemoteOperation, RdmapCode::CatastrophicStream),
        TermError::DdpTagged(DdpTaggedCode::BaseOrBounds),
        TermError::DdpUntagged(DdpUntaggedCode::NoBuffer),
    ] {
        check_terminate_about(e, data);
    }
}

/// The Terminate answering `failed` with `error`, through an FPDU with a CRC and back.
fn check_terminate_about(error: TermError, failed: &[u8]) {
    let t = Terminate::about(error, failed);
    let m = rdmap::terminate(1, t);
    let mut f = Vec::new();
    fpdu::emit(m.wire_len(), true, &mut f, |b| {
        m.write_into(b);
    })
    .expect("a Terminate fits an FPDU");
    match fpdu::parse_prefix(&f, true, fpdu::MAX_ULPDU) {
        Ok(fpdu::Prefix::Complete { ulpdu, len }) => {
            assert_eq!(len, f.len());
            assert_eq!(rdmap::parse(ulpdu), Ok(m));
        }
        other => panic!("a Terminate's FPDU: {other:?}"),
    }
    if let Some(c) = t.copied {
        assert_eq!(c.ddp_header, &failed[..c.ddp_header.len()]);
    }
}

fn check_terminate_body(data: &[u8]) {
    let Ok(t) = Terminate::parse(data) else {
        return;
    };
    trace!("Terminate body: {t:?}");
    assert_eq!(t.wire_len(), data.len());
    let mut out = Vec::new();
    t.write(&mut out);
    let mut canonical = data.to_vec();
    canonical_terminate(&mut canonical);
    assert_eq!(out, canonical);
    assert_eq!(Terminate::parse(&out), Ok(t));
}

fn check_fixed(data: &[u8]) {
    if let Some(rr) = data.get(..READ_REQUEST_LEN).and_then(ReadRequest::parse) {
        assert_eq!(rr.to_bytes()[..], data[..READ_REQUEST_LEN]);
    }
    if let Ok(b) = EnhancedBlock::parse(data) {
        assert_eq!(b.to_bytes().expect("14-bit values")[..], data[..4]);
    }
    if let [lt, code, ..] = *data {
        let e = TermError::from_raw(lt >> 4, lt & 0x0f, code);
        assert_eq!(e.raw(), (lt >> 4, lt & 0x0f, code));
    }
}
