//! The wire formats against an independent decoder: Wireshark's `iwarp_mpa` and
//! `iwarp_ddp_rdmap` dissectors, run as the host's `tshark`.
//!
//! Two TCP connections over IPv6 (handshake included) carry what this module emits: an MPA
//! request and reply, then FPDUs of every message kind (Send, Send with SE and Invalidate,
//! Write, Read Request, Read Response, Terminate), one connection without CRCs and with
//! RFC 6581's enhanced setup, the other with CRCs and revision 1. The frames go into a pcap
//! through the `--pcap` writer, and tshark must decode the opcodes, STags, offsets and
//! lengths put there, find no malformed packet and no error (TCP checksums included), and
//! call every CRC good. A copy of the CRC connection with one CRC bit flipped must be
//! called bad (the check can fail). Wireshark tracks MPA per TCP conversation from the request and reply on and
//! assumes one FPDU per TCP segment, which is how these frames are cut.
//!
//! tshark is part of the host setup (`./qpip setup` installs it): the test fails when it
//! is missing.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::path::Path;
use std::process::Command;

use super::mpa::{self, EnhancedBlock, Flags, Kind};
use super::rdmap::{self, Message, Opcode, ReadRequest};
use super::terminate::{DdpTaggedCode, MpaCode, TermError, Terminate};
use super::{ddp, fpdu};
use crate::backend::pcap::PcapSink;
use crate::net::checksum;
use crate::net::tcp::wire::{self as tcp, flags};
use crate::net::wire::{self, Mac};

const CLIENT: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 2);
const CLIENT_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 1];
const SERVER_MAC: Mac = [0x02, 0x51, 0x50, 0, 0, 2];

/// One TCP connection's frames, built as its two ends would send them.
struct Connection {
    ports: [u16; 2],
    /// Next sequence number of the client (0) and the server (1).
    next: [u32; 2],
    frames: Vec<Vec<u8>>,
}

impl Connection {
    /// A connection from the client's `port` to the server's `port`, after its handshake.
    fn open(client_port: u16, server_port: u16) -> Connection {
        let mut c = Connection {
            ports: [client_port, server_port],
            next: [0x1000_0000, 0x2000_0000],
            frames: Vec::new(),
        };
        c.segment(0, flags::SYN, &[]);
        c.segment(1, flags::SYN | flags::ACK, &[]);
        c.segment(0, flags::ACK, &[]);
        c
    }

    fn segment(&mut self, from: usize, f: u8, payload: &[u8]) {
        let to = 1 - from;
        let (src, dst) = if from == 0 {
            (CLIENT, SERVER)
        } else {
            (SERVER, CLIENT)
        };
        let syn = f & flags::SYN != 0;
        let h = tcp::Header {
            src_port: self.ports[from],
            dst_port: self.ports[to],
            seq: self.next[from],
            ack: if f & flags::ACK != 0 {
                self.next[to]
            } else {
                0
            },
            flags: f,
            window: 65535,
            urgent: 0,
            options: tcp::Options {
                mss: syn.then_some(1440),
                ..tcp::Options::default()
            },
        };
        let segment = tcp::build(&src, &dst, &h, payload);
        let mut frame = wire::ipv6_packet(
            &src,
            &dst,
            wire::proto::TCP,
            wire::DEFAULT_HOP_LIMIT,
            &segment,
        );
        let (dst_mac, src_mac) = if from == 0 {
            (SERVER_MAC, CLIENT_MAC)
        } else {
            (CLIENT_MAC, SERVER_MAC)
        };
        wire::write_ethernet(&mut frame, &dst_mac, &src_mac);
        self.next[from] = self.next[from]
            .wrapping_add(payload.len() as u32)
            .wrapping_add(syn as u32);
        self.frames.push(frame);
    }

    /// One TCP segment of `payload` from the client (0) or the server (1); returns its
    /// frame number in a capture of this connection alone.
    fn send(&mut self, from: usize, payload: &[u8]) -> usize {
        self.segment(from, flags::PSH | flags::ACK, payload);
        self.frames.len()
    }

    /// One FPDU carrying `m`, in a segment of its own.
    fn fpdu(&mut self, from: usize, m: &Message, crc: bool) -> usize {
        let mut f = Vec::new();
        fpdu::emit(m.wire_len(), crc, &mut f, |b| {
            m.write_into(b);
        })
        .unwrap();
        self.send(from, &f)
    }
}

/// What tshark must show for one frame: field name to value (numbers compared as numbers,
/// whatever base tshark prints them in).
type Expect = BTreeMap<&'static str, u64>;
type Fields = Vec<(&'static str, u64)>;

fn expect(fields: &[(&'static str, u64)]) -> Expect {
    fields.iter().copied().collect()
}

/// The fields the test reads, in `-e` order.
const FIELDS: [&str; 22] = [
    "frame.number",
    "iwarp_mpa.rev",
    "iwarp_mpa.pdlength",
    "iwarp_mpa.ulpdulength",
    "iwarp_mpa.crc",
    "iwarp_ddp.dv",
    "iwarp_ddp.stag",
    "iwarp_ddp.tagged_offset",
    "iwarp_ddp.qn",
    "iwarp_ddp.msn",
    "iwarp_ddp.mo",
    "iwarp_rdma.version",
    "iwarp_rdma.opcode",
    "iwarp_rdma.inval_stag",
    "iwarp_rdma.sinkstag",
    "iwarp_rdma.sinkto",
    "iwarp_rdma.rdmardsz",
    "iwarp_rdma.srcstag",
    "iwarp_rdma.srcto",
    "iwarp_rdma.term_layer",
    "iwarp_rdma.term_etype_ddp",
    "iwarp_rdma.term_errcode_ddp_tagged",
];

/// The common fields of an FPDU carrying `m`.
fn fpdu_fields(m: &Message) -> Fields {
    let mut f = vec![
        ("iwarp_mpa.ulpdulength", m.wire_len() as u64),
        ("iwarp_ddp.dv", ddp::VERSION as u64),
        ("iwarp_rdma.version", rdmap::VERSION as u64),
        ("iwarp_rdma.opcode", m.opcode as u64),
    ];
    match m.header.buffer {
        ddp::Buffer::Tagged { stag, to } => {
            f.push(("iwarp_ddp.stag", stag as u64));
            f.push(("iwarp_ddp.tagged_offset", to));
        }
        ddp::Buffer::Untagged { qn, msn, mo, .. } => {
            f.push(("iwarp_ddp.qn", qn as u64));
            f.push(("iwarp_ddp.msn", msn as u64));
            f.push(("iwarp_ddp.mo", mo as u64));
        }
    }
    f
}

/// One connection's frames: the handshake, an MPA request and reply with `flags` and
/// `revision` (and, for revision 2, RFC 6581's block; a request that offers qpip's
/// immediate data gets the reply's answer bit instead of the offer's), one FPDU of every message kind with
/// CRCs when `flags.crc`, and a Terminate reporting `error` about `failed` (a ULPDU). With
/// them, by frame number within the connection, what tshark must show.
fn connection(
    ports: (u16, u16),
    flags: Flags,
    revision: u8,
    error: TermError,
    failed: &[u8],
) -> (Vec<Vec<u8>>, BTreeMap<usize, Expect>) {
    let mut c = Connection::open(ports.0, ports.1);
    let mut want = BTreeMap::new();
    let crc = flags.crc;
    // siw initiates with revision 2 and IRD/ORD, asking for a read as ready-to-receive.
    let block = (revision == mpa::REVISION_2).then_some(EnhancedBlock {
        ird: 16,
        ord: 16,
        read_rtr: true,
        ..EnhancedBlock::default()
    });
    let req = mpa::build(Kind::Request, flags, revision, block.as_ref(), b"qpip").unwrap();
    let pd = 4 + 4 * block.is_some() as u64;
    let mpa = |pd| {
        expect(&[
            ("iwarp_mpa.rev", revision as u64),
            ("iwarp_mpa.pdlength", pd),
        ])
    };
    want.insert(c.send(0, &req), mpa(pd));
    let answer = match flags.reserved & mpa::flags::QPIP_IMMEDIATE_OFFER {
        0 => 0,
        _ => mpa::flags::QPIP_IMMEDIATE_AGREE,
    };
    let rep_flags = Flags {
        reserved: answer,
        ..flags
    };
    let rep = mpa::build(Kind::Reply, rep_flags, revision, block.as_ref(), &[]).unwrap();
    want.insert(c.send(1, &rep), mpa(pd - 4));

    let data: Vec<u8> = (0..100u8).collect();
    let rr = ReadRequest {
        sink_stag: 0xaaaa,
        sink_to: 0x2000,
        size: 64,
        source_stag: 0xbbbb,
        source_to: 0x3000,
    };
    let terminate = rdmap::terminate(1, Terminate::about(error, failed));
    let (layer, etype, code) = error.raw();
    let messages: [(usize, Message, Fields); 6] = [
        (
            0,
            rdmap::send(Opcode::Send, 0, 1, 0, true, b"hello, iwarp"),
            vec![],
        ),
        (
            0,
            rdmap::send(Opcode::SendSeInvalidate, 0xcafe, 2, 0, true, &data[..7]),
            vec![("iwarp_rdma.inval_stag", 0xcafe)],
        ),
        (1, rdmap::write(0x1234, 0x1000, true, &data[..99]), vec![]),
        (
            0,
            rdmap::read_request(1, rr),
            vec![
                ("iwarp_rdma.sinkstag", 0xaaaa),
                ("iwarp_rdma.sinkto", 0x2000),
                ("iwarp_rdma.rdmardsz", 64),
                ("iwarp_rdma.srcstag", 0xbbbb),
                ("iwarp_rdma.srcto", 0x3000),
            ],
        ),
        (
            1,
            rdmap::read_response(0xaaaa, 0x2000, true, &data[..64]),
            vec![],
        ),
        (
            0,
            terminate,
            // tshark names the type and code fields by layer; these two connections
            // report a DDP tagged buffer error and an MPA error.
            match layer {
                1 => vec![
                    ("iwarp_rdma.term_layer", 1),
                    ("iwarp_rdma.term_etype_ddp", etype as u64),
                    ("iwarp_rdma.term_errcode_ddp_tagged", code as u64),
                ],
                _ => vec![("iwarp_rdma.term_layer", layer as u64)],
            },
        ),
    ];
    for (from, m, extra) in messages {
        let n = c.fpdu(from, &m, crc);
        let mut f = fpdu_fields(&m);
        f.extend(extra);
        want.insert(n, expect(&f));
    }
    (c.frames, want)
}

struct Capture {
    a: Vec<Vec<u8>>,
    b: Vec<Vec<u8>>,
    /// By frame number (from 1) of `a` then `b`.
    want: BTreeMap<usize, Expect>,
    crc_fpdus: usize,
}

/// The capture: a connection without CRCs and with enhanced setup (as siw initiates), whose
/// ends offer and agree to immediate data in qpip's reserved header bits (as qpip_ib's
/// do), its Terminate about a Write that named an unknown STag (the Write's header
/// copied), then one with CRCs and revision 1 (RFC 5044), its Terminate reporting a CRC
/// error.
fn capture() -> Capture {
    let mut failed = Vec::new();
    rdmap::write(0x5151, 0, true, b"nowhere").write(&mut failed);
    let qpip_offer = Flags {
        reserved: mpa::flags::QPIP_IMMEDIATE_OFFER,
        ..Flags::default()
    };
    let (a, mut want) = connection(
        (40001, 7174),
        qpip_offer,
        mpa::REVISION_2,
        TermError::DdpTagged(DdpTaggedCode::InvalidStag),
        &failed,
    );
    let crc = Flags {
        crc: true,
        ..Flags::default()
    };
    let (b, want_b) = connection(
        (40002, 7175),
        crc,
        mpa::REVISION_1,
        TermError::Mpa(MpaCode::Crc),
        &[],
    );
    let crc_fpdus = want_b
        .values()
        .filter(|f| f.contains_key("iwarp_rdma.opcode"))
        .count();
    want.extend(want_b.into_iter().map(|(n, f)| (a.len() + n, f)));
    Capture {
        a,
        b,
        want,
        crc_fpdus,
    }
}

fn write_pcap(path: &Path, frames: &[&Vec<u8>]) {
    let mut sink = PcapSink::create(path).unwrap();
    for f in frames {
        sink.record(f);
    }
}

/// Recomputes the TCP checksum of a frame built by [`Connection`] after an edit.
fn fix_tcp_checksum(frame: &mut [u8]) {
    let at = wire::ETH_LEN + wire::IPV6_LEN;
    let (src, dst) = if frame[6..12] == CLIENT_MAC {
        (CLIENT, SERVER)
    } else {
        (SERVER, CLIENT)
    };
    frame[at + 16..at + 18].fill(0);
    let segment = &frame[at..];
    let pseudo = checksum::pseudo_header(&src, &dst, wire::proto::TCP, segment.len() as u32);
    let sum = !checksum::sum(pseudo, segment);
    frame[at + 16..at + 18].copy_from_slice(&sum.to_be_bytes());
    assert!(tcp::checksum_ok(&src, &dst, &frame[at..]));
}

/// `tshark -r pcap -n` with `args`. MPA has no port of its own: Wireshark finds it with a
/// heuristic (on by default; enabled here in case a profile turned it off), as the first
/// bytes of a TCP conversation that are an MPA request (tshark 4.0 has no `-d tcp.port`
/// binding for it). The guesses at what runs over RDMAP Sends (RPC-over-RDMA, SMB Direct)
/// are turned off: they take the test's payloads for theirs and then call them malformed,
/// a finding about the guess, not about the frame.
fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-n", "--enable-heuristic", "iwarp_mpa_tcp"])
        .args(["--disable-heuristic", "rpcrdma_iwarp"])
        .args(["--disable-heuristic", "smb_direct_iwarp"])
        .args(args)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "tshark is not installed: this test checks the iWARP formats against Wireshark's \
             dissectors (`./qpip setup` installs it, or `apt-get install tshark`)"
        ),
        Err(e) => panic!("tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A number as tshark prints it (decimal, or hex with 0x).
fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[test]
fn tshark_decodes_what_we_emit() {
    let dir = std::env::temp_dir().join(format!("qpip-iwarp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Capture {
        a,
        b,
        want,
        crc_fpdus,
    } = capture();
    let good = dir.join("iwarp.pcap");
    write_pcap(&good, &a.iter().chain(&b).collect::<Vec<_>>());

    let mut args = vec!["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"];
    for f in FIELDS {
        args.extend(["-e", f]);
    }
    let out = tshark(&good, &args);
    let rows: BTreeMap<usize, Vec<&str>> = out
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('|').collect();
            (cols[0].parse().expect("frame number"), cols)
        })
        .collect();
    assert_eq!(rows.len(), a.len() + b.len(), "tshark output:\n{out}");
    for (frame, fields) in &want {
        let cols = &rows[frame];
        for (name, value) in fields {
            let i = FIELDS.iter().position(|f| f == name).unwrap();
            assert_eq!(
                number(cols[i]),
                Some(*value),
                "frame {frame}: {name} is '{}', want {value:#x}\n{out}",
                cols[i]
            );
        }
        // A field we did not expect is one tshark decoded from bytes we did not mean.
        for (i, name) in FIELDS.iter().enumerate().skip(1) {
            if !fields.contains_key(name) && *name != "iwarp_mpa.crc" {
                assert!(
                    cols[i].is_empty(),
                    "frame {frame}: tshark sees {name} = {}\n{out}",
                    cols[i]
                );
            }
        }
    }

    println!("capture: {}", good.display());
    let bad = tshark(
        &good,
        &[
            "-o",
            "tcp.check_checksum:TRUE",
            "-Y",
            "_ws.malformed || _ws.expert.severity == error",
        ],
    );
    assert!(bad.trim().is_empty(), "tshark finds problems:\n{bad}");
    let verbose = tshark(&good, &["-V", "-O", "iwarp_mpa"]);
    assert_eq!(
        verbose.matches("(Good CRC32)").count(),
        crc_fpdus,
        "{verbose}"
    );
    assert!(!verbose.contains("Bad CRC32"), "{verbose}");

    // One CRC bit flipped in the CRC connection's Write: tshark must see it.
    let mut b_bad = b.clone();
    let write = want
        .iter()
        .filter(|(&n, f)| n > a.len() && f.get("iwarp_rdma.opcode") == Some(&0))
        .map(|(&n, _)| n - a.len() - 1)
        .next()
        .unwrap();
    let last = b_bad[write].len() - 1;
    b_bad[write][last] ^= 0x01;
    fix_tcp_checksum(&mut b_bad[write]);
    let flipped = dir.join("iwarp-bad-crc.pcap");
    write_pcap(&flipped, &b_bad.iter().collect::<Vec<_>>());
    let verbose = tshark(&flipped, &["-V", "-O", "iwarp_mpa"]);
    assert_eq!(verbose.matches("Bad CRC32").count(), 1, "{verbose}");
    // Kept when a check fails, to look at.
    let _ = std::fs::remove_dir_all(&dir);
}
