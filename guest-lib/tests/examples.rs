//! The examples (`guest-lib/examples/`) run here with the software provider: their code is
//! included as modules, so what `cargo run --example` runs is what is tested.

#[allow(dead_code)]
#[path = "../examples/echo_server.rs"]
mod echo_server;
#[allow(dead_code)]
#[path = "../examples/ping_pong.rs"]
mod ping_pong;
#[allow(dead_code)]
#[path = "../examples/udp_fanout.rs"]
mod udp_fanout;

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6, TcpListener, TcpStream};

use qpip::Context;

#[test]
fn echo_server_echoes_a_plain_socket() {
    let ctx = Context::open_soft().unwrap();
    let port = TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listener = ctx
        .listen(SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0), 2)
        .unwrap();
    let server = std::thread::spawn(move || {
        let a = echo_server::echo_one(&ctx, &listener).unwrap();
        let b = echo_server::echo_one(&ctx, &listener).unwrap();
        (a, b)
    });
    let data: Vec<u8> = (0..500_000u32).map(|i| (i * 31 % 251) as u8).collect();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("::1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut r = s.try_clone().unwrap();
        let reader = std::thread::spawn(move || {
            let mut back = Vec::new();
            r.read_to_end(&mut back).unwrap();
            back
        });
        s.write_all(&data).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let back = reader.join().unwrap();
        assert!(
            back == data,
            "{} bytes came back of {}",
            back.len(),
            data.len()
        );
    }
    assert_eq!(server.join().unwrap(), (500_000, 500_000));
}

#[test]
fn ping_pong_round_trips() {
    let ctx = Context::open_soft().unwrap();
    let rtts = ping_pong::ping_pong(&ctx, 300).unwrap();
    assert_eq!(rtts.len(), 300);
}

#[test]
fn udp_fanout_reaches_every_receiver() {
    let ctx = Context::open_soft().unwrap();
    let got = udp_fanout::fan_out(&ctx, 6, 10).unwrap();
    assert_eq!(got, vec![10; 6]);
}
