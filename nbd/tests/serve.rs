//! `qpip-nbd serve` against a client on plain TCP sockets that speaks the NBD protocol
//! byte by byte, as any NBD client would, and also gets it wrong on purpose: the server
//! runs on the verbs library's software provider (the same server code as on the device,
//! over kernel sockets), in this process.
//!
//! Covered: the handshake (GO with block sizes, the error replies), many requests in
//! flight with their replies matched by cookie, data written then read back, FLUSH, FUA,
//! TRIM and WRITE_ZEROES, and every kind of bad request (beyond the export, too long,
//! unknown command or flag, a write to a read-only export) getting the protocol's error
//! while the connection carries on; a request without the request magic ends that
//! connection only; a client that leaves mid-request leaves the server serving.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use qpip::Context;
use qpip_nbd::backing::Backing;
use qpip_nbd::proto::{self, *};
use qpip_nbd::serve::{ServeConfig, Server};

const SIZE: u64 = 16 << 20;

/// A server of a fresh `SIZE`-byte file, running in a thread; its port.
fn server(read_only: bool) -> u16 {
    let dir = std::env::temp_dir().join(format!("qpip-nbd-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!(
        "disk-{read_only}-{:?}",
        std::thread::current().id()
    ));
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(SIZE).unwrap();
    let backing = Backing::open(&path, read_only).unwrap();
    let ctx = Context::open_soft().unwrap();
    // Listeners take no port 0: ports of this process's own, the next if one is taken.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let (ctx, backing) = (Arc::new(ctx), Arc::new(backing));
    let config = ServeConfig {
        name: "disk".into(),
        keepalive: Some(ServeConfig::keepalive_for(120)),
    };
    let s = (0..64)
        .find_map(|_| {
            let port =
                20_000 + (std::process::id() % 2000) as u16 * 16 + NEXT.fetch_add(1, Relaxed);
            let any = SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
            Server::bind(ctx.clone(), backing.clone(), &config, any).ok()
        })
        .expect("a free port");
    let port = s.local_addr().port();
    std::thread::spawn(move || s.run());
    port
}

struct Client {
    s: TcpStream,
    flags: u16,
}

fn connect(port: u16) -> Client {
    let s = TcpStream::connect(SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = Client { s, flags: 0 };
    let mut g = [0u8; GREETING_LEN];
    c.s.read_exact(&mut g).unwrap();
    let hs = parse_greeting(&g).unwrap();
    assert_ne!(hs & handshake::FIXED_NEWSTYLE, 0);
    c.s.write_all(&(client::FIXED_NEWSTYLE | client::NO_ZEROES).to_be_bytes())
        .unwrap();
    c
}

impl Client {
    fn option(&mut self, option: u32, data: &[u8]) {
        let h = OptionHeader {
            option,
            len: data.len() as u32,
        };
        self.s.write_all(&h.encode()).unwrap();
        self.s.write_all(data).unwrap();
    }

    /// The next option reply: (type, data).
    fn option_reply(&mut self) -> (u32, Vec<u8>) {
        let mut h = [0u8; OPTION_REPLY_HEADER_LEN];
        self.s.read_exact(&mut h).unwrap();
        let h = OptionReplyHeader::parse(&h).unwrap();
        let mut d = vec![0u8; h.len as usize];
        self.s.read_exact(&mut d).unwrap();
        (h.reply, d)
    }

    /// GO for `name`, asking for block sizes: the replies' types.
    fn go(&mut self, name: &[u8]) -> Vec<u32> {
        let req = InfoRequest {
            name,
            infos: vec![info::BLOCK_SIZE],
        };
        self.option(opt::GO, &req.encode());
        let mut types = Vec::new();
        loop {
            let (t, d) = self.option_reply();
            types.push(t);
            if t == rep::INFO && d[..2] == info::EXPORT.to_be_bytes() {
                assert_eq!(u64::from_be_bytes(d[2..10].try_into().unwrap()), SIZE);
                self.flags = u16::from_be_bytes([d[10], d[11]]);
            }
            if t != rep::INFO {
                return types;
            }
        }
    }

    fn send(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, length: u32, data: &[u8]) {
        let r = Request {
            flags,
            kind,
            cookie,
            offset,
            length,
        };
        self.s.write_all(&r.encode()).unwrap();
        self.s.write_all(data).unwrap();
    }

    /// The next simple reply, and the data of a successful READ (`read_len` of the
    /// request it answers, by cookie).
    fn reply(&mut self, read_lens: &HashMap<u64, u32>) -> (SimpleReply, Vec<u8>) {
        let mut h = [0u8; SIMPLE_REPLY_LEN];
        self.s.read_exact(&mut h).unwrap();
        let r = SimpleReply::parse(&h).unwrap();
        let mut d = Vec::new();
        if r.error == 0 {
            if let Some(&n) = read_lens.get(&r.cookie) {
                d = vec![0u8; n as usize];
                self.s.read_exact(&mut d).unwrap();
            }
        }
        (r, d)
    }

    /// One request and its reply: the error and the data.
    fn call(
        &mut self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        data: &[u8],
    ) -> (u32, Vec<u8>) {
        self.send(kind, flags, 77, offset, length, data);
        let lens = HashMap::from([(77, if kind == cmd::READ { length } else { 0 })]);
        let (r, d) = self.reply(&lens);
        assert_eq!(r.cookie, 77);
        (r.error, d)
    }
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    (0..n).map(|i| (seed as usize * 31 + i * 7) as u8).collect()
}

#[test]
fn the_handshake_answers_go_and_refuses_what_it_does_not_offer() {
    let port = server(false);
    let mut c = connect(port);
    c.option(opt::STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().0, rep::ERR_UNSUP);
    c.option(opt::LIST, &[]);
    let (t, d) = c.option_reply();
    assert_eq!((t, &d[4..]), (rep::SERVER, &b"disk"[..]));
    assert_eq!(c.option_reply().0, rep::ACK);
    let req = InfoRequest {
        name: b"nope",
        infos: vec![],
    };
    c.option(opt::GO, &req.encode());
    let (t, msg) = c.option_reply();
    assert_eq!(t, rep::ERR_UNKNOWN);
    assert!(
        String::from_utf8_lossy(&msg).contains("disk"),
        "the message names the export"
    );
    assert_eq!(c.go(b"disk"), [rep::INFO, rep::INFO, rep::ACK]);
    for f in [
        flags::HAS_FLAGS,
        flags::SEND_FLUSH,
        flags::SEND_FUA,
        flags::SEND_TRIM,
    ] {
        assert_ne!(c.flags & f, 0, "flags {:#x}", c.flags);
    }
    assert_eq!(c.flags & flags::READ_ONLY, 0);
    // Transmission works after all that.
    assert_eq!(c.call(cmd::READ, 0, 0, 512, &[]).0, 0);
}

#[test]
fn many_requests_in_flight_are_answered_by_cookie() {
    let port = server(false);
    let mut c = connect(port);
    c.go(b"");
    const N: u64 = 96;
    const LEN: usize = 12_000; // not a multiple of anything the server uses
    let writer = {
        let mut w = c.s.try_clone().unwrap();
        std::thread::spawn(move || {
            for i in 0..N {
                let r = Request {
                    flags: if i % 5 == 0 { cmd_flags::FUA } else { 0 },
                    kind: cmd::WRITE,
                    cookie: 1000 + i,
                    offset: i * LEN as u64 + 3,
                    length: LEN as u32,
                };
                w.write_all(&r.encode()).unwrap();
                w.write_all(&pattern(i, LEN)).unwrap();
            }
        })
    };
    let mut seen = std::collections::HashSet::new();
    for _ in 0..N {
        let (r, _) = c.reply(&HashMap::new());
        assert_eq!(r.error, 0, "{r:?}");
        assert!(seen.insert(r.cookie), "one reply per cookie");
    }
    writer.join().unwrap();
    assert_eq!(c.call(cmd::FLUSH, 0, 0, 0, &[]).0, 0);
    // Read them all back, all in flight at once.
    let mut lens = HashMap::new();
    for i in 0..N {
        c.send(cmd::READ, 0, 5000 + i, i * LEN as u64 + 3, LEN as u32, &[]);
        lens.insert(5000 + i, LEN as u32);
    }
    for _ in 0..N {
        let (r, d) = c.reply(&lens);
        assert_eq!(r.error, 0);
        let i = r.cookie - 5000;
        assert!(
            d == pattern(i, LEN),
            "READ {i} returns what WRITE {i} wrote"
        );
    }
}

#[test]
fn bad_requests_get_error_replies_and_the_connection_carries_on() {
    let port = server(false);
    let mut c = connect(port);
    c.go(b"disk");
    let big = proto::MAX_PAYLOAD + 1;
    // Beyond the export: READ and TRIM are EINVAL, WRITE ENOSPC (its data is read and
    // dropped); offset + length overflowing 64 bits is beyond it too.
    assert_eq!(c.call(cmd::READ, 0, SIZE - 512, 1024, &[]).0, errno::EINVAL);
    assert_eq!(c.call(cmd::TRIM, 0, SIZE, 1, &[]).0, errno::EINVAL);
    assert_eq!(
        c.call(cmd::WRITE, 0, SIZE - 10, 20, &[9; 20]).0,
        errno::ENOSPC
    );
    assert_eq!(
        c.call(cmd::READ, 0, u64::MAX - 10, 512, &[]).0,
        errno::EINVAL
    );
    // Longer than the maximum payload: READ refused, WRITE's data drained.
    assert_eq!(c.call(cmd::READ, 0, 0, big, &[]).0, errno::EINVAL);
    assert_eq!(
        c.call(cmd::WRITE, 0, 0, big, &vec![1; big as usize]).0,
        errno::EINVAL
    );
    // Unknown command, a flag the command does not take.
    assert_eq!(c.call(99, 0, 0, 0, &[]).0, errno::EINVAL);
    assert_eq!(
        c.call(cmd::READ, cmd_flags::FUA, 0, 512, &[]).0,
        errno::EINVAL
    );
    assert_eq!(c.call(cmd::FLUSH, 0x8000, 0, 0, &[]).0, errno::EINVAL);
    // None of that wrote anything, and the connection still works.
    let (e, d) = c.call(cmd::READ, 0, 0, 4096, &[]);
    assert_eq!(e, 0);
    assert!(
        d.iter().all(|&b| b == 0),
        "the refused WRITEs wrote nothing"
    );
    assert_eq!(c.call(cmd::WRITE, 0, 0, 4096, &[5; 4096]).0, 0);
    assert_eq!(c.call(cmd::READ, 0, 0, 4096, &[]).1, vec![5; 4096]);
    // TRIM and WRITE_ZEROES (with and without NO_HOLE, with FUA) read back as zeroes.
    assert_eq!(c.call(cmd::WRITE, 0, 8192, 12288, &[7; 12288]).0, 0);
    assert_eq!(
        c.call(
            cmd::WRITE_ZEROES,
            cmd_flags::NO_HOLE | cmd_flags::FUA,
            8192,
            4096,
            &[]
        )
        .0,
        0
    );
    assert_eq!(c.call(cmd::WRITE_ZEROES, 0, 12288, 4096, &[]).0, 0);
    assert_eq!(c.call(cmd::TRIM, cmd_flags::FUA, 16384, 4096, &[]).0, 0);
    let (e, d) = c.call(cmd::READ, 0, 8192, 12288, &[]);
    assert_eq!(e, 0);
    assert!(d[..8192].iter().all(|&b| b == 0), "zeroed");
    // DISC: the server closes the connection.
    c.send(cmd::DISC, 0, 1, 0, 0, &[]);
    let mut rest = Vec::new();
    c.s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "no reply to DISC");
}

#[test]
fn a_read_only_export_refuses_writes() {
    let port = server(true);
    let mut c = connect(port);
    c.go(b"disk");
    assert_ne!(c.flags & flags::READ_ONLY, 0);
    assert_eq!(c.call(cmd::WRITE, 0, 0, 512, &[1; 512]).0, errno::EPERM);
    assert_eq!(c.call(cmd::TRIM, 0, 0, 512, &[]).0, errno::EPERM);
    assert_eq!(c.call(cmd::WRITE_ZEROES, 0, 0, 512, &[]).0, errno::EPERM);
    assert_eq!(c.call(cmd::READ, 0, 0, 512, &[]).0, 0);
}

#[test]
fn a_broken_client_ends_only_its_own_connection() {
    let port = server(false);
    // A request without the magic: nothing after it can be trusted; the server hangs up.
    let mut c = connect(port);
    c.go(b"disk");
    c.s.write_all(&[0xee; REQUEST_LEN]).unwrap();
    let mut rest = Vec::new();
    let r = c.s.read_to_end(&mut rest);
    assert!(r.is_ok() && rest.is_empty(), "closed: {r:?} {rest:?}");
    // A client that leaves halfway through a WRITE's data.
    let mut c = connect(port);
    c.go(b"disk");
    c.send(cmd::WRITE, 0, 1, 0, 1 << 20, &[3; 1000]);
    drop(c);
    // One that leaves during the handshake.
    let mut c = connect(port);
    c.option(opt::GO, &[0, 0]);
    drop(c);
    // The server still serves.
    let mut c = connect(port);
    c.go(b"disk");
    assert_eq!(c.call(cmd::WRITE, 0, 4096, 512, &[8; 512]).0, 0);
    assert_eq!(c.call(cmd::READ, 0, 4096, 512, &[]).1, vec![8; 512]);
}

/// Large READs asked all at once wait for buffer room in the server (which pins a bounded
/// amount for replies) rather than failing or stalling: every one is answered, right.
#[test]
fn many_large_reads_at_once_are_all_answered() {
    let port = server(false);
    let mut c = connect(port);
    c.go(b"disk");
    let half = SIZE / 2;
    for (at, seed) in [(0, 1u64), (half, 2)] {
        let data = pattern(seed, half as usize);
        assert_eq!(c.call(cmd::WRITE, 0, at, half as u32, &data).0, 0);
    }
    const N: u64 = 24;
    let mut lens = HashMap::new();
    for i in 0..N {
        c.send(cmd::READ, 0, 100 + i, (i % 2) * half, half as u32, &[]);
        lens.insert(100 + i, half as u32);
    }
    for _ in 0..N {
        let (r, d) = c.reply(&lens);
        assert_eq!(r.error, 0);
        let i = r.cookie - 100;
        assert!(d == pattern(1 + i % 2, half as usize), "READ {i}");
    }
}

/// The server turns keepalive on for each client's connection (on the software provider,
/// the kernel socket's: its keepalive timer runs while the connection is idle), so that a
/// client which vanished without a word does not hold its connection for ever.
#[test]
fn each_client_connection_has_keepalive() {
    let port = server(true);
    let mut c = connect(port);
    assert_eq!(c.go(b"disk"), [rep::INFO, rep::INFO, rep::ACK]);
    let me = c.s.local_addr().unwrap().port();
    // The server's socket: from its port to ours. Its timer column is 1 while what it
    // sent awaits an ACK, then 2 for keepalive (0 without).
    let (local, remote) = (format!(":{port:04X}"), format!(":{me:04X}"));
    let timer = || {
        let table = std::fs::read_to_string("/proc/net/tcp6").unwrap();
        table
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 5 && f[1].ends_with(&local) && f[2].ends_with(&remote))
            .map(|f| f[5][..2].to_string())
            .expect("the server's socket in /proc/net/tcp6")
    };
    let mut t = timer();
    for _ in 0..100 {
        if t != "01" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        t = timer();
    }
    let timer = t;
    assert_eq!(
        timer, "02",
        "the keepalive timer of the server's connection"
    );
}
