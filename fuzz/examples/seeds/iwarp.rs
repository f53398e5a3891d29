//! Seeds of the iWARP targets: MPA streams, single ULPDUs, and FPDUs fed to a running QP.

use std::path::Path;

use qpip_fuzz::Seed;

use crate::save;

// ---- iwarp_mpa: control byte, max ULPDU, chunk sizes, then the stream ---------------------

/// One segment of each RDMAP message kind, as ULPDUs.
fn iwarp_messages() -> Vec<Vec<u8>> {
    use qpip_device::net::iwarp::wire::rdmap::{self, Body, Message, Opcode, ReadRequest};
    use qpip_device::net::iwarp::wire::terminate::{
        DdpTaggedCode, MpaCode, RdmapCode, RdmapType, TermError, Terminate,
    };
    let rr = ReadRequest {
        sink_stag: 0x100,
        sink_to: 0x2000,
        size: 4096,
        source_stag: 0x200,
        source_to: 0x8000,
    };
    let write = rdmap::write(0x200, 0x8000, true, b"written");
    let mut failed_write = Vec::new();
    write.write(&mut failed_write);
    let mut failed_read = Vec::new();
    rdmap::read_request(1, rr).write(&mut failed_read);
    let protection = TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::InvalidStag);
    // RFC 7306's Immediate Data, which siw does not speak.
    let immediate = Message {
        opcode: Opcode::ImmediateData,
        header: rdmap::untagged_header(Opcode::ImmediateData, 0, 3, 0, true),
        body: Body::Immediate([1, 2, 3, 4, 5, 6, 7, 8]),
    };
    let messages = [
        rdmap::send(Opcode::Send, 0, 1, 0, false, b"first half "),
        rdmap::send(Opcode::Send, 0, 1, 11, true, b"second half"),
        rdmap::send(Opcode::SendInvalidate, 0x300, 2, 0, true, b"and invalidate"),
        rdmap::send(Opcode::SendSeInvalidate, 0x301, 3, 0, true, b""),
        write,
        rdmap::read_request(1, rr),
        rdmap::read_response(0x100, 0x2000, true, &[0xab; 100]),
        rdmap::terminate(
            1,
            Terminate::about(
                TermError::DdpTagged(DdpTaggedCode::InvalidStag),
                &failed_write,
            ),
        ),
        rdmap::terminate(1, Terminate::about(protection, &failed_read)),
        rdmap::terminate(1, Terminate::about(TermError::Mpa(MpaCode::Crc), &[])),
        immediate,
    ];
    messages
        .iter()
        .map(|m| {
            let mut b = Vec::new();
            m.write(&mut b);
            b
        })
        .collect()
}

pub(crate) fn iwarp_mpa(dir: &Path) {
    use qpip_device::net::iwarp::wire::fpdu;
    use qpip_device::net::iwarp::wire::mpa::{self, EnhancedBlock, Flags, Kind};
    let fpdus = |crc: bool| {
        let mut s = Vec::new();
        for u in iwarp_messages() {
            fpdu::build(&u, crc, &mut s).unwrap();
        }
        s
    };
    // siw's request (revision 2, IRD/ORD, read RTR), then FPDUs without CRCs, in 1460-byte
    // pieces.
    let block = EnhancedBlock {
        ird: 16,
        ord: 16,
        read_rtr: true,
        ..EnhancedBlock::default()
    };
    let req = mpa::build(Kind::Request, Flags::default(), 2, Some(&block), b"rping").unwrap();
    let mut s = Seed::default();
    s.u8(0)
        .u16(1434)
        .u8(1)
        .u8(255)
        .bytes(&req)
        .bytes(&fpdus(false));
    save(dir, "enhanced-request-then-fpdus", &s);
    // A revision 1 reply with CRCs, FPDUs with CRCs in odd pieces.
    let crc = Flags {
        crc: true,
        ..Flags::default()
    };
    let rep = mpa::build(Kind::Reply, crc, 1, None, &[]).unwrap();
    let mut s = Seed::default();
    s.u8(3)
        .u16(1434)
        .u8(3)
        .u8(0)
        .u8(6)
        .u8(12)
        .bytes(&rep)
        .bytes(&fpdus(true));
    save(dir, "crc-reply-then-fpdus", &s);
    // A rejecting reply with private data, and a request carrying 512 bytes of it.
    let rej = Flags {
        reject: true,
        ..Flags::default()
    };
    let rep = mpa::build(Kind::Reply, rej, 2, Some(&block), b"no").unwrap();
    let mut s = Seed::default();
    s.u8(1).u16(100).u8(0).bytes(&rep);
    save(dir, "reject", &s);
    let req = mpa::build(Kind::Request, Flags::default(), 1, None, &[0x5a; 512]).unwrap();
    let mut s = Seed::default();
    s.u8(0).u16(100).u8(1).u8(16).bytes(&req);
    save(dir, "largest-private-data", &s);
}

// ---- iwarp_ddp_rdmap: one ULPDU -----------------------------------------------------------

pub(crate) fn iwarp_ddp_rdmap(dir: &Path) {
    let names = [
        "send-first",
        "send-last",
        "send-invalidate",
        "send-se-invalidate-empty",
        "write",
        "read-request",
        "read-response",
        "terminate-tagged-error",
        "terminate-read-request",
        "terminate-crc",
        "immediate-data",
    ];
    for (name, ulpdu) in names.iter().zip(iwarp_messages()) {
        let mut s = Seed::default();
        s.bytes(&ulpdu);
        save(dir, name, &s);
    }
}

// ---- iwarp_placement: a running QP fed FPDUs ---------------------------------------------

pub(crate) fn iwarp_placement(dir: &Path) {
    // Operation 2: a crafted FPDU in order (opcode, target, TO, MSN, MO, last, length);
    // operation 3: the same ahead of a hole (gap first).
    let write = |s: &mut Seed, target: u8, len: u16| {
        s.u8(2).u8(0).u8(target).u32(64).u8(0).u16(0).u8(1).u16(len);
    };
    for crc in [0u8, 1] {
        let mut s = Seed::default();
        s.u8(crc);
        write(&mut s, 0, 1000);
        // A Send of two segments, then a Read Request of the writable region.
        s.u8(2).u8(3).u8(0).u32(0).u8(1).u16(0).u8(0).u16(600);
        s.u8(2).u8(3).u8(0).u32(0).u8(1).u16(600).u8(1).u16(300);
        s.u8(2).u8(1).u8(0).u32(0).u8(1).u16(0).u8(1).u16(2000);
        // Response segments for the outstanding Read, one ahead of a hole.
        s.u8(3)
            .u16(500)
            .u8(2)
            .u8(3)
            .u32(1024)
            .u8(0)
            .u16(0)
            .u8(0)
            .u16(1024);
        s.u8(2).u8(2).u8(3).u32(0).u8(0).u16(0).u8(1).u16(1024);
        save(dir, &format!("write-send-read-crc{crc}"), &s);
        let mut s = Seed::default();
        s.u8(crc);
        write(&mut s, 1, 100);
        save(dir, &format!("write-read-only-crc{crc}"), &s);
        let mut s = Seed::default();
        s.u8(crc);
        s.u8(3)
            .u16(1)
            .u8(0)
            .u8(0)
            .u32(8000)
            .u8(0)
            .u16(0)
            .u8(1)
            .u16(500);
        s.u8(1).u16(10).u16(4).bytes(&[0, 2, 0x41, 0x40]);
        save(dir, &format!("ahead-crc{crc}"), &s);
    }
}
