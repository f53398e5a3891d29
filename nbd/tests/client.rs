//! The client's handshake (`qpip_nbd::client::Connection::open`) on the verbs library's
//! software provider: against `qpip-nbd serve`, and against servers on plain sockets that
//! answer as an older server would (no `NBD_OPT_GO`), refuse the export, or hang up.
//! The ublk side needs a kernel with `ublk_drv` and is tested in VMs (`ci/tests/storage.rs`).

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6, TcpListener};
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qpip::Context;
use qpip_nbd::backing::Backing;
use qpip_nbd::client::Connection;
use qpip_nbd::proto::*;
use qpip_nbd::serve::{ServeConfig, Server};

fn port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    22_000 + (std::process::id() % 2000) as u16 * 16 + NEXT.fetch_add(1, Relaxed)
}

fn local(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)
}

fn open(port: u16, name: &str) -> std::io::Result<qpip_nbd::client::Export> {
    let ctx = Context::open_soft().unwrap();
    Connection::open(&ctx, local(port), name, 8, Duration::from_secs(10)).map(|(_, e)| e)
}

/// A server on plain sockets: greets, then runs `then` on the connection.
fn fake_server(then: impl FnOnce(std::net::TcpStream) + Send + 'static) -> u16 {
    let l = TcpListener::bind(local(0)).unwrap();
    let p = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&greeting(handshake::FIXED_NEWSTYLE)).unwrap();
        let mut flags = [0u8; 4];
        s.read_exact(&mut flags).unwrap();
        then(s);
    });
    p
}

fn read_option(s: &mut std::net::TcpStream) -> (u32, Vec<u8>) {
    let mut h = [0u8; OPTION_HEADER_LEN];
    s.read_exact(&mut h).unwrap();
    let h = OptionHeader::parse(&h).unwrap();
    let mut d = vec![0u8; h.len as usize];
    s.read_exact(&mut d).unwrap();
    (h.option, d)
}

#[test]
fn it_negotiates_with_qpip_nbd_serve() {
    let dir = std::env::temp_dir().join(format!("qpip-nbd-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(3 << 20)
        .unwrap();
    let ctx = Arc::new(Context::open_soft().unwrap());
    let config = ServeConfig {
        name: "disk".into(),
        keepalive: None,
    };
    let backing = Arc::new(Backing::open(&path, true).unwrap());
    // Listeners take no port 0: ports of this process's own, the next if one is taken.
    let s = (0..64)
        .find_map(|_| Server::bind(ctx.clone(), backing.clone(), &config, local(port())).ok())
        .expect("a free port");
    let p = s.local_addr().port();
    std::thread::spawn(move || s.run());
    let e = open(p, "disk").unwrap();
    assert_eq!(e.size, 3 << 20);
    assert!(e.has(flags::READ_ONLY) && e.has(flags::SEND_FLUSH));
    assert_eq!(e.max_payload, MAX_PAYLOAD);
    let err = open(p, "other").unwrap_err().to_string();
    assert!(
        err.contains("refused export 'other'") && err.contains("'disk'"),
        "{err}"
    );
}

#[test]
fn it_falls_back_to_export_name_for_a_server_without_go() {
    let p = fake_server(|mut s| {
        let (o, _) = read_option(&mut s);
        assert_eq!(o, opt::GO);
        s.write_all(&option_reply(o, rep::ERR_UNSUP, b"")).unwrap();
        let (o, name) = read_option(&mut s);
        assert_eq!((o, &name[..]), (opt::EXPORT_NAME, &b"old"[..]));
        // No NO_ZEROES was offered: 124 zeroes follow.
        s.write_all(&export_name_reply(
            1 << 20,
            flags::HAS_FLAGS | flags::SEND_TRIM,
            true,
        ))
        .unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let e = open(p, "old").unwrap();
    assert_eq!(
        (e.size, e.flags),
        (1 << 20, flags::HAS_FLAGS | flags::SEND_TRIM)
    );
}

#[test]
fn a_server_that_hangs_up_or_says_nothing_fails_the_handshake_in_time() {
    let p = fake_server(|mut s| {
        let _ = read_option(&mut s);
        drop(s);
    });
    let err = open(p, "x").unwrap_err().to_string();
    assert!(err.contains("closed"), "{err}");
    let p = fake_server(|mut s| {
        let _ = read_option(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let ctx = Context::open_soft().unwrap();
    let t0 = Instant::now();
    let err = Connection::open(&ctx, local(p), "x", 8, Duration::from_secs(2))
        .map(|_| ())
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
}
