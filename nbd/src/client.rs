//! The client's connection to an NBD server over a TCP QP in stream framing: connect, the
//! fixed newstyle handshake (`NBD_OPT_GO` asking for block sizes, falling back to
//! `NBD_OPT_EXPORT_NAME` for servers without it), then the transmission phase's
//! requests, sent from registered memory (a WRITE's header and data in one send, the data
//! where the block layer's copy put it), and replies read from the receive stream.

use std::io;
use std::net::SocketAddrV6;
use std::time::{Duration, Instant};

use log::debug;
use qpip::{
    Completion, Context, Cq, Framing, MemoryRegion, Qp, QpInit, QpKind, SendWr, Sge, Status,
};

use crate::proto::{self, client, flags, handshake, info, opt, rep, InfoRequest};
use crate::proto::{OptionReplyHeader, Request, OPTION_REPLY_HEADER_LEN};
use crate::stream::{RecvStream, RECV_TAG};

/// Receive buffers of a connection: slots and their size.
const RECV_SLOTS: usize = 64;
const RECV_SLOT_LEN: usize = 64 * 1024;
/// Bytes of handshake messages this client sends at most at once (an option and a name of
/// up to 4 KiB).
const CONTROL_LEN: usize = 8192;

/// Send tags: requests carry their own (below this bit); the handshake's have it.
pub const SEND_CONTROL: u64 = 1 << 62;

/// What the server said of its export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    pub size: u64,
    pub flags: u16,
    /// The largest READ or WRITE payload it takes.
    pub max_payload: u32,
}

impl Export {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// A connection in the transmission phase.
pub struct Connection {
    pub cq: Cq,
    pub qp: Qp,
    pub stream: RecvStream,
    control: MemoryRegion,
    /// Sends posted and not completed.
    pub sends: u32,
    pub sq_depth: u32,
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

impl Connection {
    /// Connects to `server` and negotiates export `name`, within `timeout`.
    pub fn open(
        ctx: &Context,
        server: SocketAddrV6,
        name: &str,
        sq_depth: u32,
        timeout: Duration,
    ) -> io::Result<(Connection, Export)> {
        let deadline = Instant::now() + timeout;
        let cq = ctx
            .create_cq((RECV_SLOTS as u32 + sq_depth).next_power_of_two())
            .map_err(io::Error::other)?;
        let qp = ctx
            .create_qp(
                &QpInit::new(QpKind::Tcp(Framing::Stream), &cq).depth(sq_depth, RECV_SLOTS as u32),
            )
            .map_err(io::Error::other)?;
        let stream = RecvStream::new(ctx, RECV_SLOTS, RECV_SLOT_LEN).map_err(io::Error::other)?;
        stream.post_all(&qp).map_err(io::Error::other)?;
        qp.connect_wait(server, timeout).map_err(|e| {
            err(format!(
                "connect to [{}]:{}: {e}",
                server.ip(),
                server.port()
            ))
        })?;
        let mut c = Connection {
            cq,
            qp,
            stream,
            control: ctx.alloc(CONTROL_LEN).map_err(io::Error::other)?,
            sends: 0,
            sq_depth,
        };
        let export = c.handshake(name, deadline)?;
        Ok((c, export))
    }

    fn handshake(&mut self, name: &str, deadline: Instant) -> io::Result<Export> {
        let mut g = [0u8; proto::GREETING_LEN];
        self.read_exact(&mut g, deadline)?;
        let hs = proto::parse_greeting(&g).map_err(|e| err(format!("greeting: {e}")))?;
        if hs & handshake::FIXED_NEWSTYLE == 0 {
            return Err(err(
                "the server does not speak the fixed newstyle handshake",
            ));
        }
        let no_zeroes = hs & handshake::NO_ZEROES != 0;
        let cf = client::FIXED_NEWSTYLE | if no_zeroes { client::NO_ZEROES } else { 0 };
        self.send_control(&cf.to_be_bytes(), deadline)?;
        let go = InfoRequest {
            name: name.as_bytes(),
            infos: vec![info::BLOCK_SIZE],
        }
        .encode();
        self.send_option(opt::GO, &go, deadline)?;
        let mut export = Export {
            size: 0,
            flags: 0,
            max_payload: proto::MAX_PAYLOAD,
        };
        let mut have_export = false;
        loop {
            let mut h = [0u8; OPTION_REPLY_HEADER_LEN];
            self.read_exact(&mut h, deadline)?;
            let h = OptionReplyHeader::parse(&h).map_err(|e| err(format!("option reply: {e}")))?;
            if h.len > 64 * 1024 {
                return Err(err(format!("an option reply of {} bytes", h.len)));
            }
            let mut data = vec![0u8; h.len as usize];
            self.read_exact(&mut data, deadline)?;
            match h.reply {
                rep::INFO if data.len() >= 2 => {
                    let kind = u16::from_be_bytes([data[0], data[1]]);
                    if kind == info::EXPORT && data.len() == 12 {
                        export.size = u64::from_be_bytes(data[2..10].try_into().expect("8"));
                        export.flags = u16::from_be_bytes([data[10], data[11]]);
                        have_export = true;
                    } else if kind == info::BLOCK_SIZE && data.len() == 14 {
                        let max = u32::from_be_bytes(data[10..14].try_into().expect("4"));
                        export.max_payload = max.clamp(4096, proto::MAX_PAYLOAD);
                    }
                }
                rep::INFO => {}
                rep::ACK if have_export => break,
                rep::ACK => {
                    return Err(err("the server accepted GO without describing the export"))
                }
                rep::ERR_UNSUP => {
                    // An older server: EXPORT_NAME, which has no error reply.
                    debug!("the server does not know GO; asking with EXPORT_NAME");
                    self.send_option(opt::EXPORT_NAME, name.as_bytes(), deadline)?;
                    let mut r = vec![0u8; if no_zeroes { 10 } else { 134 }];
                    self.read_exact(&mut r, deadline)
                        .map_err(|e| err(format!("EXPORT_NAME '{name}': {e} (no such export?)")))?;
                    export.size = u64::from_be_bytes(r[..8].try_into().expect("8"));
                    export.flags = u16::from_be_bytes([r[8], r[9]]);
                    break;
                }
                e if rep::is_error(e) => {
                    return Err(err(format!(
                        "the server refused export '{name}' (reply {:#x}): {}",
                        e,
                        String::from_utf8_lossy(&data)
                    )));
                }
                _ => {}
            }
        }
        if export.flags & flags::HAS_FLAGS == 0 {
            export.flags = 0;
        }
        Ok(export)
    }

    fn send_option(&mut self, option: u32, data: &[u8], deadline: Instant) -> io::Result<()> {
        self.send_control(&proto::option(option, data), deadline)
    }

    /// Sends handshake bytes from the control buffer and waits until they are sent.
    fn send_control(&mut self, bytes: &[u8], deadline: Instant) -> io::Result<()> {
        if bytes.len() > CONTROL_LEN {
            return Err(err("a handshake message too long"));
        }
        self.control[..bytes.len()].copy_from_slice(bytes);
        let sge = self.control.sge(0, bytes.len());
        self.qp
            .post_send(&SendWr::new(SEND_CONTROL, &[sge]))
            .map_err(io::Error::other)?;
        self.sends += 1;
        while self.sends > 0 {
            self.wait(deadline)?;
        }
        Ok(())
    }

    /// Reads exactly `out.len()` bytes of the stream (the handshake's).
    fn read_exact(&mut self, out: &mut [u8], deadline: Instant) -> io::Result<()> {
        loop {
            if self
                .stream
                .copy_out(&self.qp, out)
                .map_err(io::Error::other)?
            {
                return Ok(());
            }
            if self.stream.eof() {
                return Err(err("the server closed the connection"));
            }
            self.wait(deadline)?;
        }
    }

    /// Waits for completions until `deadline`, taking receives into the stream and
    /// counting sends done.
    fn wait(&mut self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the server did not answer in time",
            ));
        }
        let mut cs = [Completion::default(); 16];
        let n = self
            .cq
            .wait(&mut cs, Some(left))
            .map_err(io::Error::other)?;
        for c in &cs[..n] {
            self.completion(c)?;
        }
        Ok(())
    }

    /// Takes one completion of the handshake: receives into the stream, sends counted.
    fn completion(&mut self, c: &Completion) -> io::Result<()> {
        if c.status != Status::Success {
            return Err(err(format!("the connection failed ({:?})", c.status)));
        }
        if c.wr_id & RECV_TAG != 0 {
            self.stream.received(c.wr_id, c.byte_len);
        } else {
            self.sends = self.sends.saturating_sub(1);
        }
        Ok(())
    }

    /// Whether another request may be sent now.
    pub fn has_room(&self) -> bool {
        self.sends < self.sq_depth
    }

    /// Sends a request: its header from `hdr` (28 bytes of registered memory) and, for a
    /// WRITE, its data.
    pub fn send_request(
        &mut self,
        tag: u64,
        hdr: Sge<'_>,
        data: Option<Sge<'_>>,
    ) -> io::Result<()> {
        let r = match data {
            Some(d) => self.qp.post_send(&SendWr::new(tag, &[hdr, d])),
            None => self.qp.post_send(&SendWr::new(tag, &[hdr])),
        };
        r.map_err(io::Error::other)?;
        self.sends += 1;
        Ok(())
    }

    /// Ends the session politely (NBD_CMD_DISC) and closes the connection.
    pub fn disconnect(mut self, hdr_buf: &mut MemoryRegion, at: usize) {
        let req = Request {
            flags: 0,
            kind: proto::cmd::DISC,
            cookie: 0,
            offset: 0,
            length: 0,
        };
        hdr_buf[at..at + proto::REQUEST_LEN].copy_from_slice(&req.encode());
        let sge = hdr_buf.sge(at, proto::REQUEST_LEN);
        if self.send_request(SEND_CONTROL, sge, None).is_ok() {
            let _ = self.wait(Instant::now() + Duration::from_secs(2));
        }
        let _ = self.qp.close_wait(Duration::from_secs(2));
    }
}
