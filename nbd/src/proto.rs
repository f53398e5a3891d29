//! The NBD wire format: the fixed newstyle handshake, option haggling and the transmission
//! phase's requests and simple replies (the NBD protocol, `doc/proto.md` of the
//! reference implementation). Everything is big-endian. No state lives here; parsers take
//! untrusted bytes and say what was wrong, emitters return the bytes to send.

/// The first 8 bytes the server sends (`NBDMAGIC`).
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// The newstyle magic (`IHAVEOPT`): after `NBDMAGIC` in the greeting, and before every
/// option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Before every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Before every request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Before every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (server to client, 16 bits).
pub mod handshake {
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags (32 bits): the client's answer to the handshake flags.
pub mod client {
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const NO_ZEROES: u32 = 1 << 1;
}

/// Transmission flags (16 bits): what the export supports.
pub mod flags {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Option types.
pub mod opt {
    pub const EXPORT_NAME: u32 = 1;
    pub const ABORT: u32 = 2;
    pub const LIST: u32 = 3;
    pub const STARTTLS: u32 = 5;
    pub const INFO: u32 = 6;
    pub const GO: u32 = 7;
    pub const STRUCTURED_REPLY: u32 = 8;
}

/// Option reply types; errors have bit 31 set.
pub mod rep {
    pub const ACK: u32 = 1;
    pub const SERVER: u32 = 2;
    pub const INFO: u32 = 3;
    pub const ERR_UNSUP: u32 = 1 << 31 | 1;
    pub const ERR_POLICY: u32 = 1 << 31 | 2;
    pub const ERR_INVALID: u32 = 1 << 31 | 3;
    pub const ERR_UNKNOWN: u32 = 1 << 31 | 6;
    pub const ERR_TOO_BIG: u32 = 1 << 31 | 9;

    /// Whether reply type `r` is an error.
    pub fn is_error(r: u32) -> bool {
        r & 1 << 31 != 0
    }
}

/// Information types of `NBD_REP_INFO` (and the requests of `NBD_OPT_INFO`/`GO`).
pub mod info {
    pub const EXPORT: u16 = 0;
    pub const NAME: u16 = 1;
    pub const DESCRIPTION: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
}

/// Request types.
pub mod cmd {
    pub const READ: u16 = 0;
    pub const WRITE: u16 = 1;
    pub const DISC: u16 = 2;
    pub const FLUSH: u16 = 3;
    pub const TRIM: u16 = 4;
    pub const CACHE: u16 = 5;
    pub const WRITE_ZEROES: u16 = 6;
}

/// Command flags.
pub mod cmd_flags {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Error values of replies (the protocol's, which are Linux's errno values).
pub mod errno {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

/// The largest READ or WRITE payload the protocol promises to carry (2^25); what the
/// server advertises as its maximum payload.
pub const MAX_PAYLOAD: u32 = 1 << 25;

/// What a message was wrong in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// A magic number that is not the one this message starts with.
    Magic(u64),
    /// Fewer bytes than the message needs.
    Short,
    /// A length field larger than the bytes it describes.
    Length,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Magic(m) => write!(f, "bad magic {m:#x}"),
            WireError::Short => write!(f, "message too short"),
            WireError::Length => write!(f, "a length field exceeds the message"),
        }
    }
}

impl std::error::Error for WireError {}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

// ---- handshake ----------------------------------------------------------------------------

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub const GREETING_LEN: usize = 18;

pub fn greeting(handshake_flags: u16) -> [u8; GREETING_LEN] {
    let mut b = [0u8; GREETING_LEN];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&handshake_flags.to_be_bytes());
    b
}

/// The handshake flags of a greeting.
pub fn parse_greeting(b: &[u8; GREETING_LEN]) -> Result<u16, WireError> {
    for (at, want) in [(0, NBDMAGIC), (8, IHAVEOPT)] {
        let m = be64(&b[at..]);
        if m != want {
            return Err(WireError::Magic(m));
        }
    }
    Ok(be16(&b[16..]))
}

/// An option's header (`IHAVEOPT`, option, length of its data).
pub const OPTION_HEADER_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

impl OptionHeader {
    pub fn parse(b: &[u8; OPTION_HEADER_LEN]) -> Result<OptionHeader, WireError> {
        let m = be64(b);
        if m != IHAVEOPT {
            return Err(WireError::Magic(m));
        }
        Ok(OptionHeader {
            option: be32(&b[8..]),
            len: be32(&b[12..]),
        })
    }

    pub fn encode(&self) -> [u8; OPTION_HEADER_LEN] {
        let mut b = [0u8; OPTION_HEADER_LEN];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// A whole option as the client sends it: header and data.
pub fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut b = OptionHeader {
        option,
        len: data.len() as u32,
    }
    .encode()
    .to_vec();
    b.extend_from_slice(data);
    b
}

/// An option reply's header (magic, option, reply type, length of its data).
pub const OPTION_REPLY_HEADER_LEN: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    pub option: u32,
    pub reply: u32,
    pub len: u32,
}

impl OptionReplyHeader {
    pub fn parse(b: &[u8; OPTION_REPLY_HEADER_LEN]) -> Result<OptionReplyHeader, WireError> {
        let m = be64(b);
        if m != OPTION_REPLY_MAGIC {
            return Err(WireError::Magic(m));
        }
        Ok(OptionReplyHeader {
            option: be32(&b[8..]),
            reply: be32(&b[12..]),
            len: be32(&b[16..]),
        })
    }
}

/// A whole option reply: header and data.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(OPTION_REPLY_HEADER_LEN + data.len());
    b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO`: an export name and the information the
/// client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a [u8],
    pub infos: Vec<u16>,
}

impl<'a> InfoRequest<'a> {
    pub fn parse(data: &'a [u8]) -> Result<InfoRequest<'a>, WireError> {
        if data.len() < 6 {
            return Err(WireError::Short);
        }
        let name_len = be32(data) as usize;
        let rest = &data[4..];
        if name_len > rest.len() - 2 {
            return Err(WireError::Length);
        }
        let name = &rest[..name_len];
        let rest = &rest[name_len..];
        let n = be16(rest) as usize;
        let list = &rest[2..];
        if list.len() != 2 * n {
            return Err(WireError::Length);
        }
        Ok(InfoRequest {
            name,
            infos: list.chunks_exact(2).map(be16).collect(),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(6 + self.name.len() + 2 * self.infos.len());
        b.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        b.extend_from_slice(self.name);
        b.extend_from_slice(&(self.infos.len() as u16).to_be_bytes());
        for i in &self.infos {
            b.extend_from_slice(&i.to_be_bytes());
        }
        b
    }
}

/// `NBD_INFO_EXPORT`'s data: size and transmission flags.
pub fn info_export(size: u64, transmission_flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..2].copy_from_slice(&info::EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..].copy_from_slice(&transmission_flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE`'s data: minimum, preferred and maximum payload sizes.
pub fn info_block_size(min: u32, preferred: u32, max_payload: u32) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..2].copy_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&min.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..].copy_from_slice(&max_payload.to_be_bytes());
    b
}

/// The answer to `NBD_OPT_EXPORT_NAME`: size, transmission flags and, unless the client
/// asked for none, 124 zero bytes.
pub fn export_name_reply(size: u64, transmission_flags: u16, zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&transmission_flags.to_be_bytes());
    if zeroes {
        b.resize(134, 0);
    }
    b
}

// ---- transmission ---------------------------------------------------------------------------

/// A request's header; a WRITE's `length` bytes of data follow it.
pub const REQUEST_LEN: usize = 28;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub fn parse(b: &[u8; REQUEST_LEN]) -> Result<Request, WireError> {
        let m = be32(b);
        if m != REQUEST_MAGIC {
            return Err(WireError::Magic(m.into()));
        }
        Ok(Request {
            flags: be16(&b[4..]),
            kind: be16(&b[6..]),
            cookie: be64(&b[8..]),
            offset: be64(&b[16..]),
            length: be32(&b[24..]),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Bytes of data that follow the header on the wire.
    pub fn payload_len(&self) -> u32 {
        if self.kind == cmd::WRITE {
            self.length
        } else {
            0
        }
    }
}

/// A simple reply's header; a successful READ's data follows it.
pub const SIMPLE_REPLY_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    pub error: u32,
    pub cookie: u64,
}

impl SimpleReply {
    pub fn parse(b: &[u8; SIMPLE_REPLY_LEN]) -> Result<SimpleReply, WireError> {
        let m = be32(b);
        if m != SIMPLE_REPLY_MAGIC {
            return Err(WireError::Magic(m.into()));
        }
        Ok(SimpleReply {
            error: be32(&b[4..]),
            cookie: be64(&b[8..]),
        })
    }

    pub fn encode(&self) -> [u8; SIMPLE_REPLY_LEN] {
        let mut b = [0u8; SIMPLE_REPLY_LEN];
        b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.error.to_be_bytes());
        b[8..].copy_from_slice(&self.cookie.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_greeting_is_the_protocols_bytes() {
        let g = greeting(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES);
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..], &[0, 3]);
        assert_eq!(parse_greeting(&g), Ok(3));
        let mut bad = g;
        bad[0] = b'X';
        assert!(matches!(parse_greeting(&bad), Err(WireError::Magic(_))));
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let r = Request {
            flags: cmd_flags::FUA,
            kind: cmd::WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let b = r.encode();
        assert_eq!(&b[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(Request::parse(&b), Ok(r));
        assert_eq!(r.payload_len(), 4096);
        let read = Request {
            kind: cmd::READ,
            ..r
        };
        assert_eq!(read.payload_len(), 0);
        let s = SimpleReply {
            error: errno::EIO,
            cookie: 7,
        };
        assert_eq!(SimpleReply::parse(&s.encode()), Ok(s));
        let mut bad = b;
        bad[3] ^= 1;
        assert_eq!(Request::parse(&bad), Err(WireError::Magic(0x2560_9512)));
    }

    #[test]
    fn info_requests_check_their_lengths() {
        let r = InfoRequest {
            name: b"disk",
            infos: vec![info::BLOCK_SIZE, info::NAME],
        };
        let b = r.encode();
        assert_eq!(InfoRequest::parse(&b), Ok(r));
        // The name may not run past the data (it must leave room for the count).
        let mut long = b.clone();
        long[3] = 200;
        assert_eq!(InfoRequest::parse(&long), Err(WireError::Length));
        // The count must match the list.
        assert_eq!(
            InfoRequest::parse(&b[..b.len() - 1]),
            Err(WireError::Length)
        );
        assert_eq!(InfoRequest::parse(&b[..5]), Err(WireError::Short));
        // An empty name and no requests: the default export.
        let d = InfoRequest::parse(&[0, 0, 0, 0, 0, 0]).unwrap();
        assert!(d.name.is_empty() && d.infos.is_empty());
    }

    #[test]
    fn option_messages_have_their_magics() {
        let h = OptionHeader {
            option: opt::GO,
            len: 10,
        };
        assert_eq!(OptionHeader::parse(&h.encode()), Ok(h));
        let r = option_reply(opt::GO, rep::ERR_UNKNOWN, b"no");
        let hdr = OptionReplyHeader::parse(r[..20].try_into().unwrap()).unwrap();
        assert_eq!(
            (hdr.option, hdr.reply, hdr.len),
            (opt::GO, rep::ERR_UNKNOWN, 2)
        );
        assert!(rep::is_error(hdr.reply) && !rep::is_error(rep::ACK));
        assert_eq!(export_name_reply(1, 1, true).len(), 134);
        assert_eq!(export_name_reply(1, 1, false).len(), 10);
    }
}
