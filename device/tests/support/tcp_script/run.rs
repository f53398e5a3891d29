//! Running a script: `>` lines built and injected, `<` lines checked against what the
//! device sends, `< nothing` proved with a barrier, `@` commands done by the guest.

use std::time::{Duration, Instant};

use etherparse::TcpHeader;

use super::line::{parse_line, Line, Num, OptSpec};
use super::segment::{opt_bytes, Opt, Seg};

use super::*;

impl Peer {
    /// Runs a script (see the module's documentation).
    #[track_caller]
    pub fn run(&mut self, script: &str) {
        for raw in script.lines() {
            let line = raw.split('#').next().unwrap().trim();
            if line.is_empty() {
                continue;
            }
            self.line = line.to_string();
            if let Some(cmd) = line.strip_prefix('@') {
                self.command(cmd);
            } else if let Some(rest) = line.strip_prefix('>') {
                self.inject_line(&parse_line(rest.trim()));
            } else if let Some(rest) = line.strip_prefix('<') {
                let rest = rest.trim();
                if rest == "nothing" {
                    self.nothing();
                } else {
                    let l = parse_line(rest);
                    let s = self.next_seg();
                    if let Err(e) = self.check(&l, &s) {
                        panic!("line `{line}`: {e}\n  the device sent {}", self.show(&s));
                    }
                }
            } else {
                panic!("script line `{line}`: starts with >, < or @");
            }
        }
    }

    #[track_caller]
    fn command(&mut self, cmd: &str) {
        let w: Vec<&str> = cmd.split_whitespace().collect();
        let n = || -> u64 { w[1].parse().expect("a number of bytes") };
        match w[0] {
            "post" => self.post_recv(n()),
            "send" => self.send(n()),
            "close" => {
                let id = self.g.submit_close(self.ctx, self.end.qp.id);
                self.pending_cmd = Some(id);
            }
            "accepted" | "connected" | "closed" => {
                let id = self.pending_cmd.take().expect("a command to wait for");
                self.g.admin_wait_ok(id, w[0]);
            }
            "refused" => assert_eq!(
                self.cmd_done(),
                ADMIN_STATUS_REFUSED,
                "the command was refused"
            ),
            "received" => self.received(n() as usize),
            "eof" => {
                assert_eq!(
                    self.recv_done(),
                    CQE_STATUS_SUCCESS,
                    "the end of the stream"
                );
                assert!(self.eof, "the end of the stream: a receive of 0 bytes");
            }
            "sent" => assert_eq!(self.send_done(), CQE_STATUS_SUCCESS, "the send"),
            c => panic!("unknown command @{c}"),
        }
    }

    /// The relative sequence of a `>` line as an absolute one.
    fn abs_ack(&self, n: u64) -> u32 {
        self.iss
            .expect("the device's ISN is not known yet")
            .wrapping_add(n as u32)
    }

    fn inject_line(&mut self, l: &Line) {
        let b = self.build_line(l, None);
        self.inject_ip(TCP, &b);
    }

    /// Injects the segment of a `>` line carrying `payload` instead of the test's stream
    /// pattern (an upper protocol's bytes, such as an MPA request); the line's length must
    /// be the payload's.
    #[allow(dead_code)] // each binary that includes the scripts uses what it needs
    #[track_caller]
    pub fn inject_bytes(&mut self, line: &str, payload: &[u8]) {
        self.line = line.to_string();
        let l = parse_line(line.trim().trim_start_matches('>').trim());
        assert_eq!(l.len, payload.len(), "`{line}`: the payload's length");
        let b = self.build_line(&l, Some(payload));
        self.inject_ip(TCP, &b);
    }

    /// The bytes of the TCP segment a `>` line describes (header, checksum, payload),
    /// for the caller to wrap (fragments, extension headers). It counts as sent.
    pub fn tcp(&mut self, line: &str) -> Vec<u8> {
        self.build_line(
            &parse_line(line.trim().trim_start_matches('>').trim()),
            None,
        )
    }

    /// The bytes of `l`'s segment; its payload is `payload` if given, else the test's
    /// stream pattern at the line's offset.
    fn build_line(&mut self, l: &Line, payload: Option<&[u8]>) -> Vec<u8> {
        let Num::N(seq) = l.seq else {
            panic!("an injected segment needs its seq")
        };
        let win = match l.win {
            Some(Num::N(w)) => w as u16,
            None => 65535,
            _ => panic!("win of an injected segment"),
        };
        let mut h = TcpHeader::new(
            self.port,
            self.dev_port,
            PEER_ISN.wrapping_add(seq as u32),
            win,
        );
        for c in l.flags.chars() {
            match c {
                'S' => h.syn = true,
                'F' => h.fin = true,
                'R' => h.rst = true,
                'P' => h.psh = true,
                '.' => h.ack = true,
                _ => unreachable!(),
            }
        }
        if let Some(a) = l.ack {
            let Num::N(a) = a else {
                panic!("ack of an injected segment")
            };
            h.acknowledgment_number = self.abs_ack(a);
            self.last_ack = a as u32;
        }
        let mut opts = Vec::new();
        for o in l.opts.iter().flatten() {
            opts.push(match o {
                OptSpec::Mss(Num::N(m)) => Opt::Mss(*m as u16),
                OptSpec::Wscale(Num::N(s)) => Opt::Wscale(*s as u8),
                OptSpec::SackOk => Opt::SackOk,
                OptSpec::Ts(v, e) => {
                    let Num::N(v) = v else { panic!("TS val") };
                    let e = match e {
                        Num::N(e) => *e as u32,
                        Num::Last => self.last_ts,
                        Num::Any => panic!("TS ecr"),
                    };
                    Opt::Ts(*v as u32, e)
                }
                OptSpec::Sack(b) => Opt::Sack(
                    b.iter()
                        .map(|&(s, e)| (self.abs_ack(s as u64), self.abs_ack(e as u64)))
                        .collect(),
                ),
                OptSpec::Nop => Opt::Nop,
                OptSpec::Eol => Opt::Eol,
                OptSpec::Raw(r) => Opt::Raw(r.clone()),
                o => panic!("option {o:?} of an injected segment"),
            });
        }
        h.set_options_raw(&opt_bytes(&opts)).expect("options fit");
        // Stream offset of the first byte: the SYN takes sequence 0.
        let start = seq.saturating_sub(1);
        let payload: Vec<u8> = match payload {
            Some(p) => p.to_vec(),
            None => (start..start + l.len as u64).map(peer_byte).collect(),
        };
        self.peer_end = self
            .peer_end
            .max(seq + l.len as u64 + h.syn as u64 + h.fin as u64);
        self.tcp_bytes(&h, &payload)
    }

    fn show(&self, s: &Seg) -> String {
        let iss = self.iss.unwrap_or(0);
        format!(
            "{} {}:{}({}) ack {} win {} {:?}",
            s.flags(),
            s.h.sequence_number.wrapping_sub(iss),
            s.h.sequence_number
                .wrapping_sub(iss)
                .wrapping_add(s.payload.len() as u32),
            s.payload.len(),
            s.h.acknowledgment_number.wrapping_sub(PEER_ISN),
            s.h.window_size,
            s.opts
        )
    }

    /// Checks a segment against an expected line (learning the device's ISN from its
    /// first SYN).
    fn check(&mut self, l: &Line, s: &Seg) -> Result<(), String> {
        if s.flags() != l.flags {
            return Err(format!("flags {} instead of {}", s.flags(), l.flags));
        }
        if s.h.syn && self.iss.is_none() {
            let Num::N(rel) = l.seq else {
                return Err("a SYN's seq must be given".into());
            };
            self.iss = Some(s.h.sequence_number.wrapping_sub(rel as u32));
            // An active open's port is the device's choice.
            self.dev_port = s.h.source_port;
        }
        let iss = self.iss.ok_or("the device's ISN is not known yet")?;
        let cmp = |what: &str, want: Num, got: u64| -> Result<(), String> {
            match want {
                Num::N(n) if n != got => Err(format!("{what} {got} instead of {n}")),
                _ => Ok(()),
            }
        };
        cmp("seq", l.seq, s.h.sequence_number.wrapping_sub(iss) as u64)?;
        if s.payload.len() != l.len {
            return Err(format!("{} bytes instead of {}", s.payload.len(), l.len));
        }
        if let Some(a) = l.ack {
            cmp(
                "ack",
                a,
                s.h.acknowledgment_number.wrapping_sub(PEER_ISN) as u64,
            )?;
        }
        if let Some(w) = l.win {
            cmp("win", w, s.h.window_size as u64)?;
        }
        if let Some(want) = &l.opts {
            let got: Vec<&Opt> = s
                .opts
                .iter()
                .filter(|o| !matches!(o, Opt::Nop | Opt::Eol))
                .collect();
            let want: Vec<&OptSpec> = want
                .iter()
                .filter(|o| !matches!(o, OptSpec::Nop | OptSpec::Eol))
                .collect();
            if got.len() != want.len() {
                return Err(format!("options {got:?} instead of {want:?}"));
            }
            for w in want {
                let ok = got.iter().any(|g| match (w, g) {
                    (OptSpec::Mss(n), Opt::Mss(m)) => cmp("mss", *n, *m as u64).is_ok(),
                    (OptSpec::Wscale(n), Opt::Wscale(m)) => cmp("ws", *n, *m as u64).is_ok(),
                    (OptSpec::SackOk, Opt::SackOk) => true,
                    (OptSpec::Ts(v, e), Opt::Ts(a, b)) => {
                        cmp("val", *v, *a as u64).is_ok() && cmp("ecr", *e, *b as u64).is_ok()
                    }
                    (OptSpec::Sack(want), Opt::Sack(got)) => {
                        let rel: Vec<(u32, u32)> = got
                            .iter()
                            .map(|&(a, b)| (a.wrapping_sub(PEER_ISN), b.wrapping_sub(PEER_ISN)))
                            .collect();
                        rel == *want
                    }
                    _ => false,
                });
                if !ok {
                    return Err(format!("no option {w:?} among {got:?}"));
                }
            }
        }
        Ok(())
    }

    /// `< nothing`: the device sent nothing since the last segment taken. An old,
    /// out-of-window segment is injected as a barrier (RFC 9293 §3.10.7.4: answered with
    /// an ACK, or a RST where no connection is); its answer must be the first segment,
    /// and the device's count of segments sent (STAT_TCP_SEGS_OUT) must show no other.
    #[track_caller]
    pub fn nothing(&mut self) {
        self.pump();
        if let Some(f) = self.inbox.iter().find(|f| matches!(f, Frame::Tcp(_))) {
            panic!("the device sent {f:?}");
        }
        let before = self.tcp_seen;
        // Far below anything in the window, so never acceptable.
        let seq = PEER_ISN
            .wrapping_add(self.peer_end as u32)
            .wrapping_sub(100_000);
        let mut h = TcpHeader::new(self.port, self.dev_port, seq, 65535);
        h.ack = true;
        h.acknowledgment_number = self.iss.map_or(0, |i| i.wrapping_add(self.last_ack));
        self.inject_tcp(&h, &[]);
        let s = self.next_seg();
        let answer = if s.h.rst {
            s.h.sequence_number == h.acknowledgment_number
        } else {
            s.h.ack && !s.h.syn && !s.h.fin && s.payload.is_empty()
        };
        assert!(
            answer,
            "the device sent {} before answering the barrier",
            self.show(&s)
        );
        let n = self.stat(STAT_TCP_SEGS_OUT);
        let deadline = Instant::now() + WAIT;
        while self.tcp_seen < n {
            assert!(Instant::now() < deadline, "segments counted never came");
            std::thread::sleep(Duration::from_micros(200));
            self.pump();
        }
        if self.tcp_seen - before != 1 {
            panic!(
                "the device sent {} segments around the barrier: {:?}",
                self.tcp_seen - before,
                self.inbox
            );
        }
    }

    /// Expects `n` data segments of `size` bytes, in order from relative sequence `from`
    /// (ACK set, PSH as the device likes). Returns them.
    #[track_caller]
    pub fn expect_data(&mut self, from: u32, n: usize, size: usize) -> Vec<Seg> {
        let iss = self.iss.expect("the device's ISN");
        (0..n)
            .map(|i| {
                let s = self.next_seg();
                let want = from + (i * size) as u32;
                assert!(
                    s.h.ack && !s.h.syn && !s.h.fin && !s.h.rst,
                    "data segment {i}: {}",
                    self.show(&s)
                );
                assert_eq!(
                    (s.h.sequence_number.wrapping_sub(iss), s.payload.len()),
                    (want, size),
                    "data segment {i}: {}",
                    self.show(&s)
                );
                let off = (want - 1) as u64;
                for (k, &b) in s.payload.iter().enumerate() {
                    assert_eq!(b, dev_byte(off + k as u64), "byte {k} of segment {i}");
                }
                s
            })
            .collect()
    }
}
