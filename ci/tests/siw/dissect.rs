//! Reading captures with tshark: each frame's TCP, MPA, DDP and RDMAP fields, each
//! connection's messages, and the checks of rping's exchanges on the wire.

use super::{Rping, PORT};
use qpip_lab::netns;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs tshark with `args`; its stdout.
///
/// Without TCP's sequence analysis: a capture on the lab bridge may hold the two
/// directions' frames out of order (each guest's frames cross the bridge on its own CPU),
/// e.g. the server's MPA reply after the client's ACK of it. The analysis then takes that
/// segment for a spurious retransmission and leaves its payload undissected, and the
/// whole exchange after it reads as no RDMAP at all (seen once in a run of the test). Each
/// direction is in order by itself, which is all the MPA and DDP dissectors need; the
/// committed golden capture dissects the same either way.
pub fn tshark(args: &[&str]) -> Result<String, String> {
    let out = Command::new("tshark")
        .args(["-o", "tcp.analyze_sequence_numbers:FALSE"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tshark: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tshark {args:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn have_tshark() -> bool {
    Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// RDMAP opcodes (RFC 5040, section 4.3).
const RDMA_WRITE: u8 = 0;
const READ_REQUEST: u8 = 1;
const READ_RESPONSE: u8 = 2;
const SEND: u8 = 3;

/// One frame of a capture, as tshark dissects it.
#[derive(Debug, Default)]
pub struct Frame {
    stream: u32,
    src: String,
    dst_port: u16,
    /// The raw TCP sequence number of the frame's first payload byte.
    seq: u32,
    tcp_len: u64,
    mpa_request: bool,
    mpa_reply: bool,
    /// The DDP segments (FPDUs) the frame carries: RDMAP opcode, DDP's Last flag, and the
    /// FPDU's length on the wire (MPA's length field, ULPDU, pad and CRC).
    fpdus: Vec<Fpdu>,
}

/// One FPDU of a frame.
#[derive(Debug, Clone, Copy)]
struct Fpdu {
    opcode: u8,
    last: bool,
    wire_len: u64,
}

/// Every TCP frame of `pcap`.
pub fn frames(pcap: &Path) -> Result<Vec<Frame>, String> {
    let path = pcap.to_str().ok_or("capture path is not UTF-8")?;
    let out = tshark(&[
        "-r",
        path,
        "-Y",
        "tcp",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
        "-e",
        "tcp.stream",
        "-e",
        "ipv6.src",
        "-e",
        "tcp.dstport",
        "-e",
        "tcp.seq_raw",
        "-e",
        "tcp.len",
        "-e",
        "iwarp_mpa.key.req",
        "-e",
        "iwarp_mpa.key.rep",
        "-e",
        "iwarp_rdma.opcode",
        "-e",
        "iwarp_ddp.last_flag",
        "-e",
        "iwarp_mpa.ulpdulength",
    ])?;
    let num = |s: &str| -> Result<u64, String> {
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        }
        .map_err(|_| format!("tshark printed {s:?} where a number belongs"))
    };
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut frames = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 10 {
            return Err(format!(
                "tshark printed {} fields, not 10: {line:?}",
                f.len()
            ));
        }
        let opcodes = list(f[7]);
        let lasts = list(f[8]);
        // A frame cut short by the capture's snap length may show MPA's length field
        // without the DDP header after it: no FPDU of it is read.
        let ulpdus = if opcodes.is_empty() {
            vec![]
        } else {
            list(f[9])
        };
        if opcodes.len() != lasts.len() || opcodes.len() != ulpdus.len() {
            return Err(format!(
                "opcodes, Last flags and ULPDU lengths do not pair up: {line:?}"
            ));
        }
        let mut fpdus = Vec::new();
        for ((op, last), ulpdu) in opcodes.iter().zip(&lasts).zip(&ulpdus) {
            // MPA (RFC 5044, 4.1): the 2-byte length, the ULPDU padded to 4 bytes, the CRC.
            let framed = 2 + num(ulpdu)?;
            fpdus.push(Fpdu {
                opcode: num(op)? as u8,
                last: matches!(last.as_str(), "1" | "True" | "true"),
                wire_len: framed.next_multiple_of(4) + 4,
            });
        }
        frames.push(Frame {
            stream: num(f[0])? as u32,
            src: f[1].to_string(),
            dst_port: num(f[2])? as u16,
            seq: num(f[3])? as u32,
            tcp_len: num(f[4])?,
            mpa_request: !f[5].is_empty(),
            mpa_reply: !f[6].is_empty(),
            fpdus,
        });
    }
    Ok(frames)
}

/// What one TCP connection of a capture carried, each byte counted once: a segment TCP
/// sent again (a retransmission, or a tail loss probe when an ACK was slow) adds nothing
/// but to `resent`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Connection {
    /// The client: the source address of its first frame (the SYN).
    pub client: String,
    /// Bytes of TCP payload, client to server and back.
    pub to_server: u64,
    pub to_client: u64,
    pub mpa_requests: u32,
    pub mpa_replies: u32,
    /// Complete RDMAP messages (DDP segments with Last set) by direction and opcode.
    pub to_server_msgs: BTreeMap<u8, u64>,
    pub to_client_msgs: BTreeMap<u8, u64>,
    /// DDP segments without Last: messages cut into several segments.
    pub not_last: u64,
    /// Payload bytes seen again, both directions.
    pub resent: u64,
}

/// Where one direction of a connection has got to in sequence space.
struct Direction {
    /// The first sequence number seen (the SYN's).
    base: u32,
    /// The end of the highest payload seen, relative to `base`.
    high: u64,
}

impl Direction {
    /// The frame's payload as a range relative to `base`.
    fn range(&self, f: &Frame) -> (u64, u64) {
        let start = u64::from(f.seq.wrapping_sub(self.base));
        (start, start + f.tcp_len)
    }
}

/// The capture's TCP connections to port 7174, in the order they began.
///
/// Each direction of a capture is in order by itself (see [`tshark`]), so a payload byte
/// at or below the highest one seen in its direction was seen before: only what lies
/// beyond it is counted, FPDU by FPDU (a retransmission may also carry new data).
pub fn connections(frames: &[Frame]) -> BTreeMap<u32, Connection> {
    let mut conns: BTreeMap<u32, Connection> = BTreeMap::new();
    let mut seen: BTreeMap<(u32, bool), Direction> = BTreeMap::new();
    for f in frames {
        let c = conns.entry(f.stream).or_insert_with(|| Connection {
            client: f.src.clone(),
            ..Connection::default()
        });
        let to_server = f.dst_port == PORT;
        let dir = seen.entry((f.stream, to_server)).or_insert(Direction {
            base: f.seq,
            high: 0,
        });
        let (start, end) = dir.range(f);
        let high = dir.high;
        dir.high = high.max(end);
        let new = end.saturating_sub(start.max(high));
        c.resent += f.tcp_len - new;
        *(if to_server {
            &mut c.to_server
        } else {
            &mut c.to_client
        }) += new;
        if new == 0 {
            continue;
        }
        c.mpa_requests += u32::from(f.mpa_request);
        c.mpa_replies += u32::from(f.mpa_reply);
        let mut at = start;
        for fpdu in &f.fpdus {
            at += fpdu.wire_len;
            if at <= high {
                continue; // this FPDU was counted when first sent
            }
            if fpdu.last {
                let msgs = if to_server {
                    &mut c.to_server_msgs
                } else {
                    &mut c.to_client_msgs
                };
                *msgs.entry(fpdu.opcode).or_default() += 1;
            } else {
                c.not_last += 1;
            }
        }
    }
    conns
}

/// Splits a capture's connections among `runs`, each of which had `stalls` attempts that
/// stalled before the one that ran (the stalled attempts' connections come first): the
/// stalled connections and the one that ran, by run.
pub fn by_run<'c>(
    conns: &'c [Connection],
    runs: &[(Rping, usize)],
) -> Result<Vec<(&'c [Connection], &'c Connection)>, String> {
    let want: usize = runs.iter().map(|(_, stalls)| stalls + 1).sum();
    if conns.len() != want {
        return Err(format!(
            "{} connections for {} rping runs with {} stalled attempts: {conns:#?}",
            conns.len(),
            runs.len(),
            want - runs.len()
        ));
    }
    let mut rest = conns;
    let mut out = Vec::new();
    for (r, stalls) in runs {
        let (stalled, after) = rest.split_at(*stalls);
        let (ran, after) = after.split_first().expect("counted above");
        for c in stalled.iter().chain([ran]) {
            if c.client != netns::virtio_addr(r.client) {
                return Err(format!(
                    "{}: a connection from the wrong guest: {c:#?}",
                    r.tag
                ));
            }
        }
        out.push((stalled, ran));
        rest = after;
    }
    Ok(out)
}

/// Checks a full capture of the `runs` exchanges (each with its stalled attempts, see
/// [`by_run`]): tshark finds no malformed frame and no error; each connection that ran
/// carried exactly rping's protocol `iters` times (client: two Sends and the Read Response
/// per iteration; server: the Read Request, the RDMA Write and two Sends) after one MPA
/// request and one reply; and each stalled one is siw's accept race as described at
/// [`HELPERS`]: the MPA exchange, the client's first Send, and nothing from the server.
/// Returns the connections.
pub fn check_full_capture(pcap: &Path, runs: &[(Rping, usize)]) -> Result<Vec<Connection>, String> {
    let path = pcap.to_str().ok_or("capture path is not UTF-8")?;
    let bad = tshark(&[
        "-r",
        path,
        "-Y",
        "_ws.malformed || _ws.expert.severity == error",
    ])?;
    if !bad.trim().is_empty() {
        return Err(format!("tshark flags malformed frames or errors:\n{bad}"));
    }
    let conns: Vec<Connection> = connections(&frames(pcap)?).into_values().collect();
    for ((r, _), (stalled, c)) in runs.iter().zip(by_run(&conns, runs)?) {
        let n = r.iters;
        let want_client: BTreeMap<u8, u64> = [(SEND, 2 * n), (READ_RESPONSE, n)].into();
        let want_server: BTreeMap<u8, u64> =
            [(READ_REQUEST, n), (RDMA_WRITE, n), (SEND, 2 * n)].into();
        let ok = (c.mpa_requests, c.mpa_replies) == (1, 1)
            && c.to_server_msgs == want_client
            && c.to_client_msgs == want_server;
        if !ok {
            return Err(format!(
                "{}: rping -C {n} -S {} should be one MPA request and reply, then \
                 client→server {want_client:?} and server→client {want_server:?} \
                 (opcodes: 0 Write, 1 Read Request, 2 Read Response, 3 Send); got {c:#?}",
                r.tag, r.size
            ));
        }
        // Data beyond one segment's room is cut into several DDP segments.
        if r.size > 1400 && c.not_last == 0 {
            return Err(format!(
                "{}: {}-byte messages, but no DDP segment without Last: {c:#?}",
                r.tag, r.size
            ));
        }
        for s in stalled {
            let first_send: BTreeMap<u8, u64> = [(SEND, 1)].into();
            if (s.mpa_requests, s.mpa_replies) != (1, 1)
                || s.to_server_msgs != first_send
                || !s.to_client_msgs.is_empty()
            {
                return Err(format!(
                    "{}: a stalled attempt that is not siw's accept race (MPA request and \
                     reply, the client's first Send, nothing from the server): {s:#?}",
                    r.tag
                ));
            }
        }
    }
    Ok(conns)
}
