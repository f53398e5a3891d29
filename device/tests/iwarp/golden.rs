//! The golden capture of Linux siw ⇄ siw (`tests/data/iwarp/siw-rping.pcap`) replayed
//! through the device's iWARP formats: each connection's two byte streams, rebuilt from the
//! TCP segments, must read as the MPA request and reply and then FPDUs that parse as the
//! RDMAP messages of rping's protocol — and every frame the device would build for the same
//! message is byte for byte siw's (MPA frames, FPDU framing, DDP and RDMAP headers).

use std::collections::BTreeMap;

use qpip_device::net::iwarp::wire::fpdu::{self, Deframer};
use qpip_device::net::iwarp::wire::mpa::{self, Kind, Prefix};
use qpip_device::net::iwarp::wire::rdmap::{self, Opcode};

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/iwarp/siw-rping.pcap"
);
/// rping's port.
const PORT: u16 = 7174;

/// The TCP header fields the replay needs.
struct Tcp {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    syn: bool,
    ack: bool,
}

/// One direction of one connection: its stream, by offset from the SYN.
#[derive(Default)]
struct Stream {
    isn: Option<u32>,
    bytes: BTreeMap<u32, Vec<u8>>,
}

impl Stream {
    fn whole(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (&off, b) in &self.bytes {
            let off = off as usize;
            if off + b.len() <= out.len() {
                continue; // a retransmission
            }
            assert!(off <= out.len(), "a hole in the captured stream at {off}");
            out.extend_from_slice(&b[out.len() - off..]);
        }
        out
    }
}

/// Each connection's (client → server, server → client) streams, in capture order.
fn streams() -> Vec<(Vec<u8>, Vec<u8>)> {
    let file = std::fs::File::open(GOLDEN).expect("the golden capture");
    let mut r = pcap_file::pcap::PcapReader::new(file).expect("a pcap file");
    // By (client port): the two directions.
    let mut conns: Vec<(u16, Stream, Stream)> = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.expect("a packet");
        let f = &p.data[..];
        assert_eq!(&f[12..14], &[0x86, 0xdd], "IPv6 over Ethernet");
        let ip = &f[14..];
        assert_eq!(ip[6], 6, "TCP");
        // The guests' NICs left checksums to offload: the fields are read, not checked.
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
        let t = &ip[40..40 + plen];
        let h = Tcp {
            src_port: u16::from_be_bytes([t[0], t[1]]),
            dst_port: u16::from_be_bytes([t[2], t[3]]),
            seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
            syn: t[13] & 0x02 != 0,
            ack: t[13] & 0x10 != 0,
        };
        let payload = &t[(t[12] >> 4) as usize * 4..];
        let (client, to_server) = if h.dst_port == PORT {
            (h.src_port, true)
        } else {
            (h.dst_port, false)
        };
        if h.syn && !h.ack {
            conns.push((client, Stream::default(), Stream::default()));
        }
        let c = conns
            .iter_mut()
            .rev()
            .find(|c| c.0 == client)
            .expect("a SYN first");
        let s = if to_server { &mut c.1 } else { &mut c.2 };
        if h.syn {
            s.isn = Some(h.seq);
            continue;
        }
        if !payload.is_empty() {
            let off = h.seq.wrapping_sub(s.isn.expect("the SYN") + 1);
            s.bytes.insert(off, payload.to_vec());
        }
    }
    conns.iter().map(|c| (c.1.whole(), c.2.whole())).collect()
}

/// Reads one direction: its MPA frame (re-emitted to the same bytes), then its FPDUs
/// (each re-framed and re-emitted to the same bytes). Returns the opcodes and Last flags.
fn replay(stream: &[u8], kind: Kind) -> Vec<(Opcode, bool)> {
    let Ok(Prefix::Complete { frame, len }) = mpa::parse_prefix(stream, kind) else {
        panic!("{kind:?}: not an MPA frame");
    };
    let (block, pd) = frame.split_enhanced().unwrap();
    let block = block.expect("siw sends the enhanced block");
    assert_eq!((block.ird, block.ord), (1, 1), "rping's IRD and ORD");
    assert!(pd.is_empty(), "rping sends no private data of its own");
    assert!(!frame.flags.markers && !frame.flags.crc);
    let again = mpa::build(kind, frame.flags, frame.revision, Some(&block), pd).unwrap();
    assert_eq!(
        again,
        &stream[..len],
        "the {kind:?} re-emits to siw's bytes"
    );
    let mut out = Vec::new();
    let mut d = Deframer::new(false, fpdu::MAX_ULPDU);
    let mut at = len;
    for f in d.feed(&stream[len..]) {
        let f = f.expect("an FPDU");
        let u = f.ulpdu();
        let m = rdmap::parse(u).unwrap_or_else(|e| panic!("{kind:?} stream at {at}: {e}"));
        let mut again = Vec::new();
        m.write(&mut again);
        assert_eq!(again, u, "{:?} re-emits to siw's ULPDU", m.opcode);
        let mut framed = Vec::new();
        fpdu::build(u, false, &mut framed).unwrap();
        assert_eq!(framed, f.bytes(), "the FPDU framing is siw's");
        at += f.bytes().len();
        out.push((m.opcode, m.header.last));
    }
    assert_eq!(d.buffered(), 0, "nothing left over");
    out
}

#[test]
fn siws_rping_reads_as_rpings_messages_and_reemits_byte_for_byte() {
    let conns = streams();
    assert_eq!(
        conns.len(),
        2,
        "two rping runs: 64 and 2000 bytes, 3 pings each"
    );
    for (i, (up, down)) in conns.iter().enumerate() {
        let client = replay(up, Kind::Request);
        let server = replay(down, Kind::Reply);
        let count = |v: &[(Opcode, bool)], op: Opcode| v.iter().filter(|m| m.0 == op).count();
        let messages =
            |v: &[(Opcode, bool)], op: Opcode| v.iter().filter(|m| m.0 == op && m.1).count();
        // Per ping: the client Sends twice and answers one Read; the server Reads once,
        // Writes once and Sends twice.
        assert_eq!(count(&client, Opcode::Send), 6, "connection {i}");
        assert_eq!(messages(&client, Opcode::ReadResponse), 3, "connection {i}");
        assert_eq!(count(&server, Opcode::ReadRequest), 3, "connection {i}");
        assert_eq!(messages(&server, Opcode::Write), 3, "connection {i}");
        assert_eq!(count(&server, Opcode::Send), 6, "connection {i}");
        if i == 1 {
            // 2000 bytes: cut into two DDP segments each way (1404 + 596).
            assert_eq!(count(&client, Opcode::ReadResponse), 6);
            assert_eq!(count(&server, Opcode::Write), 6);
        }
    }
}
