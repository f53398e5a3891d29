//! A thousand connections from Linux sockets held on one guest's QPs, traffic both ways.

use std::time::{Duration, Instant};

use qpip_testkit::*;

use crate::echo_server::{adapter_on_a_tap, linux_clients, EchoServer};

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn a_thousand_linux_connections_held_on_one_guest() {
    const CONNS: usize = 1_000;
    let hold = Duration::from_secs(
        std::env::var("QPIP_STRESS_HOLD_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    );
    let Some((ns, ad)) = adapter_on_a_tap("a thousand Linux connections", "qpipstress", "qstr0")
    else {
        return;
    };
    let mut g = ad.guest_with_ram(0, 256 << 20);
    let mut server = EchoServer::new(&mut g, CONNS, 9100, 1024);
    let start = Instant::now();
    let streams = server.connect_all(&mut g, &ns);
    let connected = start.elapsed();
    let until = Instant::now() + hold;
    let clients = linux_clients(streams, until);
    // The server echoes until the clients are done, then a little longer for the last.
    let (mut echoed, mut closed, mut idle_since) = (0u64, 0usize, None::<Instant>);
    loop {
        let p = server.pump(&mut g, until);
        (echoed, closed) = (echoed + p.echoed, closed + p.closed);
        assert!(
            Instant::now() < until + Duration::from_secs(60),
            "{closed} of {CONNS} connections closed a minute after the clients stopped"
        );
        if p.any {
            idle_since = None;
            continue;
        }
        if closed == CONNS {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let verified: u64 = clients
        .into_iter()
        .map(|h| h.join().expect("a client"))
        .sum();
    let s = g.query_stats().counters;
    println!(
        "stress: {CONNS} connections from Linux sockets to one guest's QP server through the \
         adapter's uplink (a TAP): connected in {:.1} s, held {} s with traffic both ways \
         (an echo), none lost, {verified} bytes verified by the clients ({echoed} echoed); \
         TCP retransmissions {}",
        connected.as_secs_f64(),
        hold.as_secs(),
        s[STAT_TCP_RETRANS_SEGS as usize],
    );
    assert_eq!(verified, echoed, "every byte echoed came back verified");
    assert!(verified > 0);
}
