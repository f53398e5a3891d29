//! The server's side of the handshake: greeting, client flags and option haggling, as a
//! state machine fed with bytes. It holds no connection: the caller feeds what the
//! client sent ([`Negotiation::input`]) and sends what it is given
//! ([`Negotiation::take_output`]) until the negotiation ends in the transmission phase or
//! in a disconnect.
//!
//! Memory stays bounded whatever the client sends: option data beyond
//! [`MAX_OPTION_DATA`] is read and dropped (`NBD_REP_ERR_TOO_BIG`), and a caller that
//! feeds input only once the last output is taken holds at most one reply.

use crate::proto::{self, client, handshake, info, opt, rep, OptionHeader, OPTION_HEADER_LEN};

/// Option data kept whole: an export name of up to 4 KiB (the protocol's limit on
/// names) with room to spare. Longer options are dropped as they arrive.
pub const MAX_OPTION_DATA: usize = 8192;

/// What the server offers: one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Its name; a client asking for the empty name (the default export) gets it too.
    pub name: String,
    pub size: u64,
    /// Transmission flags ([`proto::flags`]).
    pub flags: u16,
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_payload: u32,
}

/// How the negotiation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The export was chosen: requests follow.
    Transmission,
    /// The connection is to be closed, for this reason.
    Disconnect(String),
}

enum State {
    ClientFlags,
    Header,
    Data(OptionHeader),
    /// Dropping `left` bytes of an option too long to keep.
    Discard(OptionHeader, u64),
    Ended(End),
}

/// One connection's handshake.
pub struct Negotiation {
    export: ExportInfo,
    state: State,
    no_zeroes: bool,
    /// The part of a fixed-size field or of an option's data received so far.
    partial: Vec<u8>,
    out: Vec<u8>,
}

impl Negotiation {
    /// A negotiation for `export`; the greeting is the first output.
    pub fn new(export: ExportInfo) -> Negotiation {
        Negotiation {
            export,
            state: State::ClientFlags,
            no_zeroes: false,
            partial: Vec::new(),
            out: proto::greeting(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_vec(),
        }
    }

    /// The bytes to send to the client now (empty: none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// How it ended, once it has.
    pub fn end(&self) -> Option<&End> {
        match &self.state {
            State::Ended(e) => Some(e),
            _ => None,
        }
    }

    /// Takes bytes the client sent; returns how many it consumed, which is all of them
    /// unless the negotiation ended (what follows the end belongs to the transmission
    /// phase).
    pub fn input(&mut self, bytes: &[u8]) -> usize {
        let mut used = 0;
        while used < bytes.len() {
            let rest = &bytes[used..];
            used += match self.state {
                State::Ended(_) => break,
                State::ClientFlags => self.fill(rest, 4),
                State::Header => self.fill(rest, OPTION_HEADER_LEN),
                State::Data(h) => self.fill(rest, h.len as usize),
                State::Discard(h, left) => {
                    let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    if n as u64 == left {
                        self.too_big(h);
                    } else {
                        self.state = State::Discard(h, left - n as u64);
                    }
                    n
                }
            };
            if !matches!(self.state, State::Discard(..)) && self.partial_complete() {
                self.step();
            }
        }
        used
    }

    /// Appends up to what the current field still needs; returns the bytes taken.
    fn fill(&mut self, rest: &[u8], want: usize) -> usize {
        let n = (want - self.partial.len()).min(rest.len());
        self.partial.extend_from_slice(&rest[..n]);
        n
    }

    fn partial_complete(&self) -> bool {
        let want = match self.state {
            State::ClientFlags => 4,
            State::Header => OPTION_HEADER_LEN,
            State::Data(h) => h.len as usize,
            State::Discard(..) | State::Ended(_) => return false,
        };
        self.partial.len() == want
    }

    /// Acts on a complete field.
    fn step(&mut self) {
        let field = std::mem::take(&mut self.partial);
        match self.state {
            State::ClientFlags => {
                let f = u32::from_be_bytes(field[..4].try_into().expect("4 bytes"));
                let known = client::FIXED_NEWSTYLE | client::NO_ZEROES;
                if f & !known != 0 {
                    return self.disconnect(format!("unknown client flags {f:#x}"));
                }
                self.no_zeroes = f & client::NO_ZEROES != 0;
                self.state = State::Header;
            }
            State::Header => {
                let h = match OptionHeader::parse(field[..].try_into().expect("16 bytes")) {
                    Ok(h) => h,
                    Err(e) => return self.disconnect(format!("option: {e}")),
                };
                if h.len as usize > MAX_OPTION_DATA {
                    self.state = State::Discard(h, h.len.into());
                } else {
                    self.state = State::Data(h);
                    // An option without data is complete at once.
                    if h.len == 0 {
                        self.step();
                    }
                }
            }
            State::Data(h) => {
                self.state = State::Header;
                self.option(h.option, &field);
            }
            State::Discard(..) | State::Ended(_) => {}
        }
    }

    fn disconnect(&mut self, why: String) {
        self.state = State::Ended(End::Disconnect(why));
    }

    fn reply(&mut self, option: u32, reply: u32, data: &[u8]) {
        self.out
            .extend_from_slice(&proto::option_reply(option, reply, data));
    }

    /// An option whose data was too long to keep has been dropped.
    fn too_big(&mut self, h: OptionHeader) {
        if h.option == opt::EXPORT_NAME {
            // EXPORT_NAME has no error reply: the session must end.
            return self.disconnect(format!("export name of {} bytes", h.len));
        }
        self.state = State::Header;
        let msg = format!("option data of {} bytes exceeds {MAX_OPTION_DATA}", h.len);
        self.reply(h.option, rep::ERR_TOO_BIG, msg.as_bytes());
    }

    fn is_ours(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.export.name.as_bytes()
    }

    fn unknown(&mut self, option: u32, name: &[u8]) {
        let msg = format!(
            "no export named '{}' (this server exports '{}')",
            String::from_utf8_lossy(name),
            self.export.name
        );
        self.reply(option, rep::ERR_UNKNOWN, msg.as_bytes());
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        let e = &self.export;
        match option {
            opt::EXPORT_NAME => {
                if !self.is_ours(data) {
                    let name = String::from_utf8_lossy(data).into_owned();
                    return self.disconnect(format!("EXPORT_NAME of unknown export '{name}'"));
                }
                let r = proto::export_name_reply(e.size, e.flags, !self.no_zeroes);
                self.out.extend_from_slice(&r);
                self.state = State::Ended(End::Transmission);
            }
            opt::ABORT => {
                self.reply(option, rep::ACK, &[]);
                self.disconnect("the client aborted the negotiation".into());
            }
            opt::LIST if !data.is_empty() => {
                self.reply(option, rep::ERR_INVALID, b"LIST takes no data");
            }
            opt::LIST => {
                let name = e.name.clone().into_bytes();
                let mut d = (name.len() as u32).to_be_bytes().to_vec();
                d.extend_from_slice(&name);
                self.reply(option, rep::SERVER, &d);
                self.reply(option, rep::ACK, &[]);
            }
            opt::INFO | opt::GO => {
                let req = match proto::InfoRequest::parse(data) {
                    Ok(r) => r,
                    Err(err) => {
                        let msg = format!("malformed INFO/GO data: {err}");
                        return self.reply(option, rep::ERR_INVALID, msg.as_bytes());
                    }
                };
                if !self.is_ours(req.name) {
                    return self.unknown(option, req.name);
                }
                let export = proto::info_export(e.size, e.flags);
                let block = req
                    .infos
                    .contains(&info::BLOCK_SIZE)
                    .then(|| proto::info_block_size(e.min_block, e.preferred_block, e.max_payload));
                let name = req.infos.contains(&info::NAME).then(|| {
                    let mut d = info::NAME.to_be_bytes().to_vec();
                    d.extend_from_slice(e.name.as_bytes());
                    d
                });
                self.reply(option, rep::INFO, &export);
                if let Some(b) = block {
                    self.reply(option, rep::INFO, &b);
                }
                if let Some(n) = name {
                    self.reply(option, rep::INFO, &n);
                }
                self.reply(option, rep::ACK, &[]);
                if option == opt::GO {
                    self.state = State::Ended(End::Transmission);
                }
            }
            // Structured replies, TLS, metadata contexts and extended headers are not
            // offered: the client falls back to simple replies over plain TCP.
            _ => {
                let msg = format!("option {option} is not supported");
                self.reply(option, rep::ERR_UNSUP, msg.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{flags, OptionReplyHeader, OPTION_REPLY_HEADER_LEN};

    fn export() -> ExportInfo {
        ExportInfo {
            name: "disk".into(),
            size: 1 << 30,
            flags: flags::HAS_FLAGS | flags::SEND_FLUSH,
            min_block: 1,
            preferred_block: 4096,
            max_payload: proto::MAX_PAYLOAD,
        }
    }

    fn started(client_flags: u32) -> Negotiation {
        let mut n = Negotiation::new(export());
        assert_eq!(n.take_output().len(), proto::GREETING_LEN);
        assert_eq!(n.input(&client_flags.to_be_bytes()), 4);
        n
    }

    fn option(option: u32, data: &[u8]) -> Vec<u8> {
        proto::option(option, data)
    }

    /// The replies in `out`: (reply type, data).
    fn replies(mut out: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut r = Vec::new();
        while !out.is_empty() {
            let h = OptionReplyHeader::parse(out[..OPTION_REPLY_HEADER_LEN].try_into().unwrap())
                .unwrap();
            let end = OPTION_REPLY_HEADER_LEN + h.len as usize;
            r.push((h.reply, out[OPTION_REPLY_HEADER_LEN..end].to_vec()));
            out = &out[end..];
        }
        r
    }

    fn go(name: &[u8], infos: Vec<u16>) -> Vec<u8> {
        option(opt::GO, &proto::InfoRequest { name, infos }.encode())
    }

    #[test]
    fn go_with_block_size_enters_transmission_and_leaves_what_follows() {
        let mut n = started(client::FIXED_NEWSTYLE | client::NO_ZEROES);
        let mut bytes = go(b"disk", vec![info::BLOCK_SIZE]);
        bytes.extend_from_slice(b"REQ");
        assert_eq!(
            n.input(&bytes),
            bytes.len() - 3,
            "the request is not consumed"
        );
        assert_eq!(n.end(), Some(&End::Transmission));
        let r = replies(&n.take_output());
        let types: Vec<u32> = r.iter().map(|x| x.0).collect();
        assert_eq!(types, [rep::INFO, rep::INFO, rep::ACK]);
        assert_eq!(r[0].1, proto::info_export(1 << 30, export().flags));
        assert_eq!(r[1].1, proto::info_block_size(1, 4096, proto::MAX_PAYLOAD));
    }

    #[test]
    fn bytes_may_arrive_one_at_a_time() {
        let mut n = Negotiation::new(export());
        let mut all = client::FIXED_NEWSTYLE.to_be_bytes().to_vec();
        all.extend_from_slice(&option(opt::LIST, &[]));
        all.extend_from_slice(&go(b"", vec![]));
        for b in &all {
            assert_eq!(n.input(std::slice::from_ref(b)), 1);
        }
        assert_eq!(n.end(), Some(&End::Transmission));
        let out = n.take_output();
        let r = replies(&out[proto::GREETING_LEN..]);
        let types: Vec<u32> = r.iter().map(|x| x.0).collect();
        assert_eq!(types, [rep::SERVER, rep::ACK, rep::INFO, rep::ACK]);
        assert_eq!(&r[0].1[4..], b"disk");
    }

    #[test]
    fn export_name_answers_with_or_without_zeroes() {
        for (flags, len) in [(client::FIXED_NEWSTYLE, 134), (client::NO_ZEROES, 10)] {
            let mut n = started(flags);
            n.input(&option(opt::EXPORT_NAME, b"disk"));
            assert_eq!(n.end(), Some(&End::Transmission));
            assert_eq!(n.take_output().len(), len);
        }
        let mut n = started(0);
        n.input(&option(opt::EXPORT_NAME, b"other"));
        assert!(matches!(n.end(), Some(End::Disconnect(_))));
    }

    #[test]
    fn bad_input_gets_error_replies_or_a_disconnect() {
        let mut n = started(client::FIXED_NEWSTYLE);
        n.input(&go(b"nope", vec![]));
        n.input(&option(opt::GO, &[0, 0, 0, 9, 0]));
        n.input(&option(opt::STRUCTURED_REPLY, &[]));
        n.input(&option(opt::LIST, b"x"));
        n.input(&option(opt::STARTTLS, &[]));
        assert_eq!(n.end(), None, "errors do not end the negotiation");
        let types: Vec<u32> = replies(&n.take_output()).iter().map(|x| x.0).collect();
        assert_eq!(
            types,
            [
                rep::ERR_UNKNOWN,
                rep::ERR_INVALID,
                rep::ERR_UNSUP,
                rep::ERR_INVALID,
                rep::ERR_UNSUP
            ]
        );
        // Unknown client flags, a bad option magic: the session ends.
        let mut n = Negotiation::new(export());
        n.input(&8u32.to_be_bytes());
        assert!(matches!(n.end(), Some(End::Disconnect(_))));
        let mut n = started(0);
        n.input(&[0u8; 16]);
        assert!(matches!(n.end(), Some(End::Disconnect(_))));
    }

    #[test]
    fn an_option_too_long_is_dropped_as_it_arrives() {
        let mut n = started(client::FIXED_NEWSTYLE);
        let len = 1 << 20;
        n.input(
            &OptionHeader {
                option: opt::GO,
                len,
            }
            .encode(),
        );
        let chunk = vec![0u8; 4096];
        for _ in 0..len / 4096 {
            assert_eq!(n.input(&chunk), chunk.len());
            assert!(n.partial.len() <= MAX_OPTION_DATA, "nothing is kept");
        }
        let r = replies(&n.take_output());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, rep::ERR_TOO_BIG);
        n.input(&go(b"disk", vec![]));
        assert_eq!(n.end(), Some(&End::Transmission), "the session goes on");
        // An export name that long cannot get an error reply: the session ends.
        let mut n = started(0);
        n.input(
            &OptionHeader {
                option: opt::EXPORT_NAME,
                len: 9000,
            }
            .encode(),
        );
        n.input(&vec![b'a'; 9000]);
        assert!(matches!(n.end(), Some(End::Disconnect(_))));
    }

    #[test]
    fn abort_is_acknowledged() {
        let mut n = started(0);
        n.input(&option(opt::ABORT, &[]));
        assert!(matches!(n.end(), Some(End::Disconnect(_))));
        assert_eq!(replies(&n.take_output())[0].0, rep::ACK);
    }
}
