//! Closing: active, passive and simultaneous closes through FIN-WAIT, CLOSING, TIME-WAIT,
//! CLOSE-WAIT and LAST-ACK, FINs out of order and retransmitted, the abort, and the end a
//! silent peer meets through keepalive.

use qpip_device::net::tcp;

use super::*;
use crate::harness::ms;

#[test]
fn active_close_through_time_wait() {
    let mut t = T::established(&cfg());
    let w = WINDOW;
    t.c.close();
    assert_eq!(t.c.state(), State::FinWait1);
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 1, IRS + 1, w));
    assert!(t.c.queue_send(1).is_err());
    t.ack(ISS + 2);
    assert_eq!(t.c.state(), State::FinWait2);
    // Data may still arrive in FIN-WAIT-2, then the FIN.
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), b"bye");
    assert_eq!(t.c.state(), State::TimeWait);
    // The right edge stays where it was (the FIN took one sequence number).
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 5, w - 4));
    assert_eq!(
        t.take_events(),
        vec![
            Event::DataArrived {
                upto: 3,
                push: None
            },
            Event::PeerClosed
        ]
    );
    // The FIN again (our ACK lost): ACK again, 2 MSL restarted.
    t.now += ms(600);
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), b"bye");
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 5, w - 4));
    assert_eq!(t.wait_deadline(), ms(1000));
    t.ended_with(Event::Closed);
}

#[test]
fn passive_close() {
    let mut t = T::established(&cfg());
    let w = WINDOW;
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.state(), State::CloseWait);
    assert_eq!(t.take_events(), vec![Event::PeerClosed]);
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 2, w - 1));
    // We may still send, then close.
    t.queue(10);
    assert_eq!(t.recv1().0, out(ACK | PSH, ISS + 1, IRS + 2, w - 1));
    t.c.close();
    assert_eq!(t.c.state(), State::LastAck);
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 11, IRS + 2, w - 1));
    t.send(hdr(ACK, IRS + 2, ISS + 12, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(
        t.take_events(),
        vec![Event::Acked { upto: 10 }, Event::Closed]
    );
}

#[test]
fn simultaneous_close() {
    let mut t = T::established(&cfg());
    let w = WINDOW;
    t.c.close();
    assert_eq!(t.recv1().0, out(ACK | FIN, ISS + 1, IRS + 1, w));
    // Their FIN crosses ours (it does not acknowledge our FIN).
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closing);
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 2, w - 1));
    t.send(hdr(ACK, IRS + 2, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::TimeWait);
    t.wait_deadline();
    assert_eq!(t.c.state(), State::Closed);
}

#[test]
fn fin_wait_1_to_time_wait_when_the_fin_acks_ours() {
    let mut t = T::established(&cfg());
    t.c.close();
    t.recv1();
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::TimeWait);
    assert_eq!(t.recv1().0, out(ACK, ISS + 2, IRS + 2, WINDOW - 1));
}

#[test]
fn fin_retransmitted_on_timeout_and_out_of_order_fin_waits() {
    let mut t = T::established(&cfg());
    // A FIN beyond a hole: held until the hole fills.
    t.send(hdr(ACK | FIN, IRS + 11, ISS + 1, 30_000), b"world");
    assert_eq!(t.c.state(), State::Established);
    t.recv1();
    t.send(hdr(ACK, IRS + 1, ISS + 1, 30_000), b"hello, the");
    assert_eq!(t.c.state(), State::CloseWait);
    assert_eq!(t.app.data, b"hello, theworld");
    t.recv1();
    t.c.close();
    let fin = t.recv1().0;
    assert!(fin.fin());
    t.wait_deadline();
    assert_eq!(t.recv1().0, fin, "the FIN again after the RTO");
}

#[test]
fn abort_sends_reset() {
    let mut t = T::established(&cfg());
    t.queue(100);
    t.recv1();
    t.c.abort();
    assert_eq!(t.recv1().0, out(RST, ISS + 101, 0, 0));
    assert_eq!(t.take_events(), vec![Event::Closed]);
    assert!(t.c.is_closed());
    assert_eq!(t.c.next_deadline(), None);
}

#[test]
fn keepalive_probes_then_gives_up() {
    let keepalive = tcp::Keepalive {
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(1),
        probes: 2,
    };
    let mut t = T::established(&Config {
        keepalive: Some(keepalive),
        ..cfg()
    });
    assert_eq!(t.wait_deadline(), Duration::from_secs(10));
    assert_eq!(t.recv1().0, out(ACK, ISS, IRS + 1, WINDOW));
    // An answer restarts the idle time.
    t.ack(ISS + 1);
    assert_eq!(t.wait_deadline(), Duration::from_secs(10));
    t.recv1();
    assert_eq!(t.wait_deadline(), Duration::from_secs(1));
    t.recv1();
    assert_eq!(t.wait_deadline(), Duration::from_secs(1));
    t.ended_with(Event::TimedOut);
}

#[test]
fn last_ack_retransmits_fin_and_close_wait_ignores_more_data() {
    let mut t = T::established(&cfg());
    let w = WINDOW - 1;
    t.send(hdr(ACK | FIN, IRS + 1, ISS + 1, 30_000), &[]);
    t.recv1();
    // Data after the FIN cannot exist: ACKed, not taken.
    t.send(hdr(ACK, IRS + 2, ISS + 1, 30_000), b"ghost");
    assert_eq!(t.recv1().0, out(ACK, ISS + 1, IRS + 2, w));
    assert!(t.app.data.is_empty());
    t.c.close();
    let fin = t.recv1().0;
    assert_eq!(fin, out(ACK | FIN, ISS + 1, IRS + 2, w));
    assert_eq!(t.wait_deadline(), ms(200));
    assert_eq!(t.recv1().0, fin);
    t.send(hdr(ACK, IRS + 2, ISS + 2, 30_000), &[]);
    assert_eq!(t.c.state(), State::Closed);
    assert_eq!(t.take_events(), vec![Event::PeerClosed, Event::Closed]);
}
