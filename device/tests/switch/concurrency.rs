//! Engines on several threads at once: concurrent senders, a ping-pong that needs every
//! wake-up, and two engines pumping the uplink together.

use std::sync::atomic::{AtomicBool, Ordering};

use qpip_device::backend::switch::{SwitchPort, PORT_QUEUE};
use qpip_device::backend::Backend;

use crate::{drain, drain_all, frame, poll_in, switch, tag, A, B, BROADCAST, C, H};

/// Every poll(2) below gives up after this long, so that a lost wake-up fails the test
/// instead of hanging it; it is far beyond how long a wake-up takes.
const HANG_GUARD_MS: i32 = 20_000;

/// The tags of `frames`, by sender (A or B).
fn by_sender(frames: &[Vec<u8>]) -> [Vec<u32>; 2] {
    let mut out = [Vec::new(), Vec::new()];
    for f in frames {
        let who = if f[6..12] == A { 0 } else { 1 };
        assert!(who == 0 || f[6..12] == B);
        out[who].push(tag(f));
    }
    out
}

#[test]
fn two_senders_at_once_lose_nothing() {
    let (sw, mut p, _) = switch(3, false);
    p[2].send(&frame(&BROADCAST, &C, 0)).unwrap();
    drain_all(&mut p);
    let n = (PORT_QUEUE / 2) as u32;
    let (senders, receiver) = p.split_at_mut(2);
    std::thread::scope(|s| {
        for (port, mac) in senders.iter_mut().zip([A, B]) {
            s.spawn(move || {
                for i in 0..n {
                    port.send(&frame(&C, &mac, i)).unwrap();
                }
            });
        }
    });
    let got = drain(&mut receiver[0]);
    assert_eq!(got.len(), 2 * n as usize);
    for tags in by_sender(&got) {
        assert_eq!(tags, (0..n).collect::<Vec<_>>());
    }
    assert_eq!(sw.port_stats(2).unwrap().queue_full, 0);
}

/// Many more frames than a queue holds, with a receiver sleeping in poll(2): each frame
/// is either received, in its sender's order, or counted as dropped.
#[test]
fn senders_and_a_sleeping_receiver_account_for_every_frame() {
    let (sw, mut p, _) = switch(3, false);
    p[2].send(&frame(&BROADCAST, &C, 0)).unwrap();
    drain_all(&mut p);
    let n = 20_000u32;
    let done = AtomicBool::new(false);
    let (senders, receiver) = p.split_at_mut(2);
    let got = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let port = &mut receiver[0];
            let mut got = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                poll_in(port.fd(), 100);
                got.extend(drain(port));
                if finished {
                    return got; // everything was sent before `finished` was read
                }
            }
        });
        std::thread::scope(|t| {
            for (port, mac) in senders.iter_mut().zip([A, B]) {
                t.spawn(move || {
                    for i in 0..n {
                        port.send(&frame(&C, &mac, i)).unwrap();
                    }
                });
            }
        });
        done.store(true, Ordering::Release);
        rx.join().unwrap()
    });
    let s = sw.port_stats(2).unwrap();
    assert_eq!(got.len() as u64 + s.queue_full, 2 * n as u64, "{s:?}");
    assert_eq!(got.len() as u64, s.frames_out);
    for tags in by_sender(&got) {
        assert!(tags.windows(2).all(|w| w[0] < w[1]), "out of order");
    }
}

/// Two engines answer each other frame by frame, each sleeping in poll(2) until the other
/// frame arrives: a lost wake-up would leave one asleep.
#[test]
fn ping_pong_between_two_sleeping_engines() {
    let (_sw, mut p, _) = switch(2, false);
    p[0].send(&frame(&BROADCAST, &A, 0)).unwrap();
    p[1].send(&frame(&BROADCAST, &B, 0)).unwrap();
    drain_all(&mut p);
    let rounds = 2000u32;
    let (a, b) = p.split_at_mut(1);
    let play = |port: &mut SwitchPort, me: [u8; 6], peer: [u8; 6], serve: bool| {
        if serve {
            port.send(&frame(&peer, &me, 0)).unwrap();
        }
        let mut expect = 0;
        while expect < rounds {
            assert!(poll_in(port.fd(), HANG_GUARD_MS), "asleep at {expect}");
            for f in drain(port) {
                assert_eq!(tag(&f), expect);
                // The server's k-th frame is answered with k; the other's k with k + 1.
                let next = if serve { expect + 1 } else { expect };
                if next < rounds {
                    port.send(&frame(&peer, &me, next)).unwrap();
                }
                expect += 1;
            }
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| play(&mut a[0], A, B, true));
        s.spawn(|| play(&mut b[0], B, A, false));
    });
}

/// Frames from the uplink for two functions, each on its own thread: whichever pumps, each
/// gets all of its own, in order.
#[test]
fn two_engines_pump_the_uplink_together() {
    let (sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].send(&frame(&BROADCAST, &A, 0)).unwrap();
    p[1].send(&frame(&BROADCAST, &B, 0)).unwrap();
    drain_all(&mut p);
    drain(&mut far);
    let n = 600u32;
    for i in 0..n {
        far.send(&frame(&A, &H, i)).unwrap();
        far.send(&frame(&B, &H, i)).unwrap();
    }
    let got: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = p
            .iter_mut()
            .map(|port| {
                s.spawn(move || {
                    let mut got = Vec::new();
                    while got.len() < n as usize {
                        if !poll_in(port.fd(), HANG_GUARD_MS) {
                            break;
                        }
                        got.extend(drain(port).iter().map(|f| tag(f)));
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for tags in got {
        assert_eq!(tags, (0..n).collect::<Vec<_>>());
    }
    assert_eq!(sw.uplink_stats().unwrap().frames_in, 2 * n as u64);
}
