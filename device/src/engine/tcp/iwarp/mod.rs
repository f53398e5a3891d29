//! iWARP queue pairs: a TCP QP with `FRAMING_IWARP` speaks MPA, DDP and RDMAP on its
//! connection (the formats are `crate::net::iwarp::wire`; this is the protocol state).
//!
//! - **Setup** (this file): after the TCP handshake the initiator sends the MPA request
//!   and nothing more until the reply has come; the responder answers the request and
//!   sends no FPDU before the initiator's first one (both as Linux's siw requires). CRC
//!   is on when either end asks; IRD and ORD come from RFC 6581's block; a peer-to-peer
//!   request gets the ready-to-receive message the initiator offered. Only then does the
//!   CONNECT or ACCEPT complete, and `QUERY_CONN` tells what was agreed.
//! - **Transmit** ([`tx`]): records of the connection's stream, FPDUs built from guest
//!   memory when the connection sends them.
//! - **Receive** ([`rx`]): FPDUs deframed from the in-order stream and acted on.
//!
//! **In the engine's turns** (`drive`): work requests taken from the rings feed this, and
//! what comes out — a finished setup, completions, new records, a Terminate — becomes
//! command completions, CQEs and segments.

mod drive;
mod requests;
pub(super) mod rx;
pub(super) mod tx;
// A fuzz fixture (the placement path fed whatever a peer may send): built for the fuzz
// crate, through this crate's `fuzzing` feature, and for the unit tests; never in qpipd.
#[cfg(any(test, feature = "fuzzing"))]
pub mod untrusted;

use std::collections::VecDeque;
use std::sync::Arc;

use qpip_abi::admin::*;
use qpip_abi::cqe::Cqe;
use zerocopy::FromZeros;

use crate::net::iwarp::wire::fpdu::{self, Deframer};
use crate::net::iwarp::wire::mpa::{self, EnhancedBlock, Flags, Frame, Kind, Prefix};
use crate::net::iwarp::wire::rdmap::{Body, Message, ReadRequest};
use crate::net::iwarp::wire::terminate::{MpaCode, TermError, Terminate};

pub(in crate::engine) use requests::Requests;
use rx::{Env, RecvWr};
use tx::{Data, OutRead, Tx};

/// What this end brings to the MPA exchange (the CONNECT's or ACCEPT's parameters).
#[derive(Debug, Clone, Default)]
pub(in crate::engine) struct Local {
    pub(in crate::engine) private_data: Vec<u8>,
    pub(in crate::engine) ird: u8,
    pub(in crate::engine) ord: u8,
    pub(in crate::engine) crc: bool,
    pub(in crate::engine) peer_to_peer: bool,
    /// Offer RFC 7306 Immediate Data to a qpip peer ([`offers_immediate`]).
    pub(in crate::engine) immediate: bool,
}

/// Whether MPA request `f` offers RFC 7306 Immediate Data: qpip's reserved bit in the
/// header ([`mpa::flags::QPIP_IMMEDIATE_OFFER`]), which a peer that is not qpip neither
/// sets nor reads; the private data is the application's, untouched.
pub(super) fn offers_immediate(f: &Frame<'_>) -> bool {
    f.flags.reserved & mpa::flags::QPIP_IMMEDIATE_OFFER != 0
}

/// Whether MPA reply `f` agrees to the request's offer
/// ([`mpa::flags::QPIP_IMMEDIATE_AGREE`]; the offer's own bit in a reply means nothing:
/// siw sends the request's bits back).
fn agrees_immediate(f: &Frame<'_>) -> bool {
    f.flags.reserved & mpa::flags::QPIP_IMMEDIATE_AGREE != 0
}

/// `flags` with qpip's reserved bit `bit` set when `on`.
fn with_qpip_bit(flags: Flags, bit: u8, on: bool) -> Flags {
    Flags {
        reserved: if on { bit } else { 0 },
        ..flags
    }
}

/// Where the connection's setup stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No connection yet.
    Idle,
    /// Initiator: the request is out, the reply not in yet.
    AwaitReply,
    /// Responder: the request is not in yet.
    AwaitRequest,
    /// Responder: replied; the initiator's first FPDU has not come (nothing may be sent).
    AwaitFirstFpdu,
    Running,
    /// Refused, rejected or terminated: nothing more is taken or placed.
    Over,
}

/// How the setup ended, for the engine to complete the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The CONNECT or ACCEPT succeeds.
    Up,
    /// It fails: a reject (either way), or frames that are not MPA's.
    Refused,
}

/// The ready-to-receive message of peer-to-peer setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rtr {
    Send,
    Write,
    Read,
}

/// A Terminate sent (found an error in what the peer sent) or received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) error: TermError,
    pub(super) received: bool,
}

/// The iWARP state of a TCP QP.
#[derive(Debug)]
pub(in crate::engine) struct IwarpQp {
    local: Local,
    phase: Phase,
    /// The MPA frame received so far.
    setup: Vec<u8>,
    deframer: Deframer,
    tx: Tx,
    recv_wrs: VecDeque<RecvWr>,
    /// Receive completions made, for the engine to write.
    recv_done: Vec<Cqe>,
    /// Next MSN expected on the untagged queues Send and Read Request.
    rx_msn: [u32; 2],
    /// The connection's IRD and ORD.
    conn_ird: u8,
    conn_ord: u8,
    /// Tagged segments placed.
    placed: u64,
    /// Tripwires placements touched, for the engine to fire those armed.
    trips: Vec<crate::engine::tripwire::Hit>,
    /// Tagged FPDUs placed out of order, and the stream ranges they took (until the
    /// in-order point passes them).
    placed_ahead: u64,
    ahead_ranges: VecDeque<(u64, u64)>,
    /// Responder: the ready-to-receive Send that will come first (swallowed).
    rtr_send: bool,
    /// Both ends agreed to RFC 7306 Immediate Data.
    immediate: bool,
    info: ConnInfo,
    outcome: Option<Outcome>,
    failure: Option<Failure>,
}

/// The receive window an iWARP QP offers: its data is placed as it arrives (or the
/// connection ends), so only the deframer's partial FPDU waits in the device.
pub(super) const WINDOW: usize = 256 * 1024;

impl IwarpQp {
    /// Whether a WR, a Read's sink or a record of the stream lies in region `key`.
    pub(in crate::engine) fn uses_region(&self, key: u32) -> bool {
        self.tx.uses_region(key)
            || self.recv_wrs.iter().any(|w| {
                w.spans
                    .as_ref()
                    .is_ok_and(|s| crate::engine::memory::spans_use(s, key))
            })
    }

    /// Region `key` is gone: what lies in it fails when the QP flushes, and no byte is
    /// read from or placed into it again.
    pub(in crate::engine) fn region_gone(&mut self, key: u32) {
        self.tx.region_gone(key);
        for w in &mut self.recv_wrs {
            if w.spans
                .as_ref()
                .is_ok_and(|s| crate::engine::memory::spans_use(s, key))
            {
                w.spans = Err((
                    qpip_abi::cqe::CQE_STATUS_LOCAL_PROTECTION,
                    qpip_abi::cqe::CQE_DETAIL_REGION_GONE,
                ));
            }
        }
    }

    pub(super) fn new() -> IwarpQp {
        IwarpQp {
            local: Local::default(),
            phase: Phase::Idle,
            setup: Vec::new(),
            deframer: Deframer::new(false, fpdu::MAX_ULPDU),
            tx: Tx::new(),
            recv_wrs: VecDeque::new(),
            recv_done: Vec::new(),
            rx_msn: [1; 2],
            conn_ird: 0,
            conn_ord: 0,
            placed: 0,
            trips: Vec::new(),
            placed_ahead: 0,
            ahead_ranges: VecDeque::new(),
            rtr_send: false,
            immediate: false,
            info: ConnInfo::new_zeroed(),
            outcome: None,
            failure: None,
        }
    }

    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// The records of the stream, as the connection's source of bytes.
    pub(super) fn source<'a>(
        &'a self,
        mem: &'a vm_memory::GuestMemoryMmap,
    ) -> impl crate::net::tcp::SendSource + 'a {
        tx::Source { mem, tx: &self.tx }
    }

    /// Whether send WRs may go on the wire.
    pub(super) fn may_send(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Whether the setup is done (`QUERY_CONN` has something to say).
    pub(super) fn set_up(&self) -> bool {
        self.info.mpa_revision != 0
    }

    /// The parameters of the CONNECT or ACCEPT that will set the connection up.
    pub(super) fn set_local(&mut self, local: Local) {
        self.local = local;
    }

    /// Initiator, once TCP is established: the MPA request goes out.
    pub(super) fn start_initiator(&mut self, mss: usize) {
        self.tx.mulpdu = fpdu::mulpdu(mss);
        let local = &self.local;
        let block = EnhancedBlock {
            ird: local.ird as u16,
            ord: local.ord as u16,
            peer_to_peer: local.peer_to_peer,
            write_rtr: local.peer_to_peer,
            read_rtr: local.peer_to_peer,
            zero_length_send_rtr: false,
        };
        let flags = Flags {
            crc: local.crc,
            ..Flags::default()
        };
        let flags = with_qpip_bit(flags, mpa::flags::QPIP_IMMEDIATE_OFFER, local.immediate);
        let frame = mpa::build(
            Kind::Request,
            flags,
            mpa::REVISION_2,
            Some(&block),
            &local.private_data,
        )
        .expect("private data and IRD/ORD were checked");
        self.tx.push_raw(frame);
        self.phase = Phase::AwaitReply;
    }

    /// Responder, once its QP has the connection: the request is awaited.
    pub(super) fn start_responder(&mut self, mss: usize) {
        self.tx.mulpdu = fpdu::mulpdu(mss);
        self.phase = Phase::AwaitRequest;
    }

    /// In-order bytes of the peer's stream.
    pub(super) fn receive(&mut self, env: &Env<'_>, data: &[u8]) {
        let kind = match self.phase {
            Phase::AwaitReply => Kind::Reply,
            Phase::AwaitRequest => Kind::Request,
            Phase::AwaitFirstFpdu | Phase::Running => return self.feed(env, data),
            // Bytes after the end (or before a role) are dropped.
            Phase::Idle | Phase::Over => return,
        };
        self.setup.extend_from_slice(data);
        let setup = std::mem::take(&mut self.setup);
        let (len, ok) = match mpa::parse_prefix(&setup, kind) {
            Ok(Prefix::Incomplete { .. }) => {
                self.setup = setup;
                return;
            }
            Ok(Prefix::Complete { frame, len }) => (
                len,
                match kind {
                    Kind::Reply => self.on_reply(&frame),
                    Kind::Request => self.on_request(&frame),
                },
            ),
            Err(_) => (setup.len(), false),
        };
        if !ok {
            self.phase = Phase::Over;
            self.outcome.get_or_insert(Outcome::Refused);
            return;
        }
        // Whatever followed the frame is the peer's first FPDUs.
        if len < setup.len() {
            self.feed(env, &setup[len..]);
        }
    }

    fn feed(&mut self, env: &Env<'_>, data: &[u8]) {
        // The deframer is taken out while its FPDUs are acted on (they may borrow it).
        let mut deframer = std::mem::replace(&mut self.deframer, Deframer::new(false, 0));
        for f in deframer.feed(data) {
            match f {
                Ok(f) => self.ulpdu(env, f.ulpdu()),
                Err(e) => {
                    let code = match e {
                        fpdu::Error::Crc { .. } => MpaCode::Crc,
                        fpdu::Error::TooLong { .. } => MpaCode::FpduStart,
                    };
                    self.fail(TermError::Mpa(code), None);
                }
            }
            if self.phase == Phase::Over {
                break;
            }
        }
        self.deframer = deframer;
    }

    /// The peer's reply: true if the connection goes on (accepted, CRC and IRD/ORD as
    /// agreed); false if it was rejected or is not a reply this end can take.
    fn on_reply(&mut self, f: &Frame<'_>) -> bool {
        let Ok((block, pd)) = f.split_enhanced() else {
            return false;
        };
        self.keep_private_data(pd);
        if f.flags.reject {
            self.info.flags |= CONN_INFO_REJECTED;
            return false;
        }
        if f.flags.markers || !(mpa::REVISION_1..=mpa::REVISION_2).contains(&f.revision) {
            return false;
        }
        let crc = self.local.crc || f.flags.crc;
        self.agree(f.revision, crc, block);
        // Only a qpip responder that saw this end's offer and offers too agrees.
        self.immediate = self.local.immediate && agrees_immediate(f);
        if self.immediate {
            self.info.flags |= CONN_INFO_IMMEDIATE;
        }
        self.outcome = Some(Outcome::Up);
        self.phase = Phase::Running;
        match block {
            Some(b) if self.local.peer_to_peer && b.peer_to_peer => {
                self.info.flags |= CONN_INFO_PEER_TO_PEER;
                self.send_rtr(if b.write_rtr {
                    Rtr::Write
                } else if b.read_rtr {
                    Rtr::Read
                } else {
                    Rtr::Send
                });
            }
            _ => {}
        }
        true
    }

    /// The initiator's request: true if it is accepted (the reply is queued); false if it
    /// is refused (a reject reply is queued when it was an MPA request at all).
    fn on_request(&mut self, f: &Frame<'_>) -> bool {
        let Ok((block, pd)) = f.split_enhanced() else {
            return false;
        };
        self.keep_private_data(pd);
        // A qpip initiator's offer is agreed to only when this end offers too.
        let immediate = self.local.immediate && offers_immediate(f);
        let revision = f.revision.min(mpa::REVISION_2);
        if f.flags.markers || f.revision < mpa::REVISION_1 {
            // Markers are never used here: refused with a reject reply.
            let reject = Flags {
                reject: true,
                ..Flags::default()
            };
            let frame = mpa::build(
                Kind::Reply,
                reject,
                revision,
                None,
                &self.local.private_data,
            )
            .expect("checked private data");
            self.tx.push_raw(frame);
            return false;
        }
        let crc = self.local.crc || f.flags.crc;
        self.agree(revision, crc, block);
        // Peer-to-peer: the initiator's ready-to-receive message is awaited, of a kind it
        // offered (a Write, then a Read, then a Send).
        let rtr = block.filter(|b| b.peer_to_peer).map(|b| {
            if b.write_rtr {
                Rtr::Write
            } else if b.read_rtr {
                Rtr::Read
            } else {
                Rtr::Send
            }
        });
        if rtr.is_some() {
            self.info.flags |= CONN_INFO_PEER_TO_PEER;
        }
        self.rtr_send = rtr == Some(Rtr::Send);
        // The reply's IRD covers the reads the initiator says it will issue (its ORD, up
        // to the device's limit), and a Read RTR, even when the accepting program asked
        // for fewer: an initiator whose ORD exceeds the reply's IRD may refuse the
        // connection rather than lower its ORD (RFC 6581 leaves it the choice; qpip's own
        // initiator lowers it), while serving reads is the device's work, bounded by its
        // limit, and what they may read is still what the program registered for remote
        // reads.
        if let Some(b) = block {
            let mut ird = b.ord.min(IWARP_MAX_IRD_ORD as u16) as u8;
            if rtr == Some(Rtr::Read) {
                ird = ird.max(1);
            }
            if ird > self.conn_ird {
                self.conn_ird = ird;
                self.info.ird = ird as u16;
            }
        }
        let reply_block = block.map(|_| EnhancedBlock {
            ird: self.conn_ird as u16,
            ord: self.conn_ord as u16,
            peer_to_peer: rtr.is_some(),
            zero_length_send_rtr: rtr == Some(Rtr::Send),
            write_rtr: rtr == Some(Rtr::Write),
            read_rtr: rtr == Some(Rtr::Read),
        });
        let flags = Flags {
            crc,
            ..Flags::default()
        };
        let flags = with_qpip_bit(flags, mpa::flags::QPIP_IMMEDIATE_AGREE, immediate);
        let frame = mpa::build(
            Kind::Reply,
            flags,
            revision,
            reply_block.as_ref(),
            &self.local.private_data,
        )
        .expect("checked private data");
        self.tx.push_raw(frame);
        self.immediate = immediate;
        if immediate {
            self.info.flags |= CONN_INFO_IMMEDIATE;
        }
        self.outcome = Some(Outcome::Up);
        self.phase = Phase::AwaitFirstFpdu;
        true
    }

    /// What both ends agreed: revision, CRC, IRD and ORD (this end serves its own IRD's
    /// worth of reads, and issues no more than the peer serves).
    /// Whether RDMA Writes may carry immediate data (both ends agreed).
    pub(super) fn immediate(&self) -> bool {
        self.immediate
    }

    fn agree(&mut self, revision: u8, crc: bool, block: Option<EnhancedBlock>) {
        self.conn_ird = self.local.ird;
        self.conn_ord = match block {
            Some(b) => self
                .local
                .ord
                .min(b.ird.min(IWARP_MAX_IRD_ORD as u16) as u8),
            None => self.local.ord,
        };
        self.tx.crc = crc;
        self.deframer = Deframer::new(crc, fpdu::MAX_ULPDU);
        self.info.mpa_revision = revision;
        self.info.ird = self.conn_ird as u16;
        self.info.ord = self.conn_ord as u16;
        if crc {
            self.info.flags |= CONN_INFO_CRC;
        }
    }

    fn keep_private_data(&mut self, pd: &[u8]) {
        let n = pd.len().min(self.info.private_data.len());
        self.info.private_data[..n].copy_from_slice(&pd[..n]);
        self.info.pd_len = n as u16;
    }

    /// Initiator in peer-to-peer mode: the ready-to-receive message the responder chose.
    fn send_rtr(&mut self, rtr: Rtr) {
        match rtr {
            Rtr::Write => self.tx.push_write(Data::None, 0, 0),
            Rtr::Send => self.tx.push_send(Data::None, false),
            Rtr::Read => {
                // Answered by an empty Read Response, taken without a completion.
                self.tx.reads.push_back(OutRead {
                    stag: 0,
                    to: 0,
                    size: 0,
                    sink: Arc::from([]),
                    placed: 0,
                    for_wr: false,
                });
                self.tx.push_read_request(ReadRequest::default());
            }
        }
    }

    /// Whether the deframer holds part of an FPDU.
    fn deframer_partial(&self) -> bool {
        self.deframer.buffered() > 0
    }

    /// Tagged FPDUs placed out of order since the last call.
    pub(super) fn take_placed_ahead(&mut self) -> u64 {
        std::mem::take(&mut self.placed_ahead)
    }

    fn awaiting_first_fpdu(&self) -> bool {
        self.phase == Phase::AwaitFirstFpdu
    }

    fn first_fpdu_arrived(&mut self) {
        self.phase = Phase::Running;
    }

    /// The responder's ready-to-receive Send, which takes no receive WR.
    fn is_rtr(&mut self, m: &Message<'_>) -> bool {
        let rtr = std::mem::take(&mut self.rtr_send)
            && m.opcode.is_send()
            && m.header.last
            && matches!(m.body, Body::Data(d) if d.is_empty());
        if rtr {
            self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        }
        rtr
    }

    /// An error in what the peer sent (`ulpdu`, when it is the culprit): a Terminate says
    /// so, and the connection ends after it.
    pub(super) fn fail(&mut self, error: TermError, ulpdu: Option<&[u8]>) {
        if self.phase == Phase::Over {
            return;
        }
        let t = match ulpdu {
            Some(u) => Terminate::about(error, u),
            None => Terminate {
                error,
                copied: None,
            },
        };
        self.tx.push_terminate(t);
        self.end(error, false);
    }

    /// The setup waited too long for the peer's frame: nothing more happens here.
    pub(super) fn expire(&mut self) {
        self.phase = Phase::Over;
        self.outcome = None;
    }

    /// The peer sent a Terminate.
    pub(super) fn terminated(&mut self, error: TermError) {
        self.end(error, true);
    }

    fn end(&mut self, error: TermError, received: bool) {
        self.phase = Phase::Over;
        let (layer, etype, code) = error.raw();
        self.info.terminate = (layer as u32) << 12 | (etype as u32) << 8 | code as u32;
        if received {
            self.info.flags |= CONN_INFO_TERMINATE_RECEIVED;
        }
        self.failure = Some(Failure { error, received });
    }
}
