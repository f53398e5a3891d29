//! Forwarding by MAC among the functions' ports: learning, floods, moves, no hairpin, the
//! bounded queues, and bytes that are no frame (the table's bounds and who may send as
//! whom: `identity`).

use qpip_device::backend::switch::{PortId, PortStats, SwitchConfig, PORT_QUEUE};
use qpip_device::backend::{Backend, MAX_FRAME};

use crate::{
    drain, drain_all, frame, switch, switch_with, tag, tags, A, B, BROADCAST, C, H, MULTICAST,
    UNKNOWN,
};

#[test]
fn learns_senders_and_delivers_unicast_to_one_port() {
    let (sw, mut p, _) = switch(3, false);
    // A's broadcast teaches the switch where A is.
    p[0].send(&frame(&BROADCAST, &A, 1)).unwrap();
    assert_eq!(sw.lookup(&A), Some(PortId::Port(0)));
    assert_eq!(tags(&mut p[1]), [1]);
    assert_eq!(tags(&mut p[2]), [1]);
    assert_eq!(tags(&mut p[0]), [] as [u32; 0]);
    // B's answer goes to A's port alone.
    p[1].send(&frame(&A, &B, 2)).unwrap();
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    assert_eq!(tags(&mut p[0]), [2]);
    assert_eq!(tags(&mut p[2]), [] as [u32; 0]);
    assert_eq!(
        sw.port_stats(0).unwrap(),
        PortStats {
            frames_in: 1,
            bytes_in: 60,
            frames_out: 1,
            bytes_out: 60,
            flooded: 1,
            ..PortStats::default()
        }
    );
    let b = p[1].stats();
    assert_eq!((b.frames_in, b.flooded, b.frames_out), (1, 0, 1));
    let c = p[2].stats();
    assert_eq!((c.frames_in, c.frames_out), (0, 1));
    // The functions' own addresses are pinned, nothing is learned.
    let t = sw.table_stats();
    assert_eq!((t.learned, t.pinned), (0, 3));
}

#[test]
fn unknown_unicast_broadcast_and_multicast_flood_everywhere_but_back() {
    let (sw, mut p, far) = switch(3, true);
    let mut far = far.unwrap();
    for (i, dst) in [UNKNOWN, BROADCAST, MULTICAST].iter().enumerate() {
        p[0].send(&frame(dst, &A, i as u32)).unwrap();
        for (port, other) in p.iter_mut().enumerate().skip(1) {
            assert_eq!(tags(other), [i as u32], "{dst:x?} to port {port}");
        }
        assert_eq!(tags(&mut far), [i as u32], "{dst:x?} to the uplink");
        assert_eq!(tags(&mut p[0]), [] as [u32; 0], "{dst:x?} back");
    }
    assert_eq!(p[0].stats().flooded, 3);
    assert_eq!(sw.uplink_stats().unwrap().frames_out, 3);
    // A group address as a source is not learned (no sender has one).
    far.send(&frame(&UNKNOWN, &MULTICAST, 9)).unwrap();
    assert_eq!(
        drain_all(&mut p)[0]
            .iter()
            .map(|f| tag(f))
            .collect::<Vec<_>>(),
        [9]
    );
    assert_eq!(sw.lookup(&MULTICAST), None);
}

/// A learned address (a host bridged behind trusted functions) moves to the port it
/// appears on; a function's own never does (`identity`).
#[test]
fn a_learned_mac_moves_to_the_port_it_appears_on() {
    let (sw, mut p, _) = switch_with(3, false, SwitchConfig::default(), &[0, 1]);
    p[0].send(&frame(&BROADCAST, &H, 1)).unwrap();
    assert_eq!(sw.lookup(&H), Some(PortId::Port(0)));
    p[1].send(&frame(&BROADCAST, &H, 2)).unwrap();
    assert_eq!(sw.lookup(&H), Some(PortId::Port(1)));
    drain(&mut p[0]);
    drain(&mut p[1]);
    drain(&mut p[2]);
    p[2].send(&frame(&H, &C, 3)).unwrap();
    assert_eq!(tags(&mut p[1]), [3]);
    assert_eq!(tags(&mut p[0]), [] as [u32; 0]);
    assert_eq!(sw.table_stats().learned, 1);
}

#[test]
fn a_functions_mac_stays_pinned_against_the_uplink() {
    let (sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].send(&frame(&BROADCAST, &A, 1)).unwrap();
    drain(&mut p[1]);
    drain(&mut far);
    // Someone outside claims function 0's MAC: dropped, counted, and the address stays.
    far.send(&frame(&B, &A, 2)).unwrap();
    assert_eq!(tags(&mut p[1]), [] as [u32; 0]);
    assert_eq!(sw.uplink_stats().unwrap().spoofed, 1);
    assert_eq!(sw.lookup(&A), Some(PortId::Port(0)));
    // Traffic for it still reaches the function.
    p[1].send(&frame(&A, &B, 3)).unwrap();
    assert_eq!(tags(&mut p[0]), [3]);
}

#[test]
fn a_frame_for_its_own_port_goes_nowhere() {
    let (sw, mut p, far) = switch_with(2, true, SwitchConfig::default(), &[0]);
    let mut far = far.unwrap();
    p[0].send(&frame(&BROADCAST, &A, 1)).unwrap();
    p[0].send(&frame(&BROADCAST, &H, 2)).unwrap();
    drain(&mut p[1]);
    drain(&mut far);
    p[0].send(&frame(&H, &A, 3)).unwrap();
    assert_eq!(tags(&mut p[0]), [] as [u32; 0]);
    assert_eq!(tags(&mut p[1]), [] as [u32; 0]);
    assert_eq!(tags(&mut far), [] as [u32; 0]);
    assert_eq!(p[0].stats().filtered, 1);
    assert_eq!(sw.lookup(&H), Some(PortId::Port(0)));
}

#[test]
fn a_full_queue_drops_and_counts_and_takes_again_once_drained() {
    let (_sw, mut p, _) = switch(2, false);
    p[1].send(&frame(&BROADCAST, &B, 0)).unwrap();
    drain(&mut p[0]);
    let extra = 5;
    for i in 0..(PORT_QUEUE + extra) as u32 {
        // Never refused: the drop is the receiver's, as on a full ring.
        p[0].send(&frame(&B, &A, i)).unwrap();
    }
    let s = p[1].stats();
    assert_eq!(s.queue_full, extra as u64);
    assert_eq!(s.frames_out, PORT_QUEUE as u64);
    assert_eq!(p[0].stats().frames_in, (PORT_QUEUE + extra) as u64);
    assert_eq!(tags(&mut p[1]), (0..PORT_QUEUE as u32).collect::<Vec<_>>());
    p[0].send(&frame(&B, &A, 7777)).unwrap();
    assert_eq!(tags(&mut p[1]), [7777]);
    assert_eq!(p[1].stats().queue_full, extra as u64);
}

#[test]
fn runts_and_giants_are_counted_never_forwarded() {
    let (_sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    let header = frame(&BROADCAST, &A, 0);
    for len in 0..14 {
        p[0].send(&header[..len]).unwrap();
    }
    let mut giant = frame(&BROADCAST, &A, 0);
    giant.resize(MAX_FRAME + 1, 0);
    p[0].send_owned(giant, 0).unwrap();
    // The same from the uplink.
    far.send(&header[..13]).unwrap();
    assert!(drain(&mut p[1]).is_empty());
    assert!(drain(&mut far).is_empty());
    let s = p[0].stats();
    assert_eq!((s.too_short, s.too_long, s.frames_in), (14, 1, 0));
    assert_eq!(p[0].switch().uplink_stats().unwrap().too_short, 1);
    assert_eq!(
        p[0].switch().lookup(&A),
        Some(PortId::Port(0)),
        "pinned, not learned"
    );
    // A bare header is a frame; so is one of MAX_FRAME bytes.
    p[0].send(&header[..14]).unwrap();
    let mut largest = frame(&BROADCAST, &A, 0);
    largest.resize(MAX_FRAME, 0);
    p[0].send_owned(largest, 0).unwrap();
    let got: Vec<usize> = drain(&mut p[1]).iter().map(|f| f.len()).collect();
    assert_eq!(got, [14, MAX_FRAME]);
}

#[test]
fn a_dropped_port_is_forgotten() {
    let (sw, mut p, _) = switch(3, false);
    p[1].send(&frame(&BROADCAST, &B, 0)).unwrap();
    assert_eq!(sw.lookup(&B), Some(PortId::Port(1)));
    let gone = p.remove(1);
    drop(gone);
    assert_eq!(sw.lookup(&B), None);
    drain(&mut p[0]);
    drain(&mut p[1]);
    p[0].send(&frame(&B, &A, 1)).unwrap();
    // Flooded, to the one port left.
    assert_eq!(tags(&mut p[1]), [1]);
    assert_eq!(sw.port_stats(1).unwrap().frames_in, 1);
    assert_eq!(sw.port_stats(1).unwrap().frames_out, 0);
    assert!(sw.describe().contains("f0, f2"), "{}", sw.describe());
    // A port of the same name again (the function's next guest) takes the old one's place
    // and counters; a second one of that name while it is open is refused.
    let mut again = sw.port("f1").unwrap();
    assert_eq!(again.index(), 1);
    assert_eq!(again.stats().frames_in, 1);
    assert!(sw.port("f1").is_err());
    p[0].send(&frame(&BROADCAST, &A, 2)).unwrap();
    assert_eq!(tags(&mut again), [2]);
    assert!(sw.describe().contains("f0, f1, f2"), "{}", sw.describe());
    let names: Vec<String> = sw.ports().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["f0", "f1", "f2"]);
    assert_eq!(sw.ports()[1].1, again.stats());
}

/// Any bytes from anywhere: no panic, and every frame sent in is accounted for, as
/// forwarded, too short or too long, at the port it came in on.
#[test]
fn any_bytes_are_switched_or_counted() {
    let (sw, mut p, far) = switch(3, true);
    let mut far = far.unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sent = [0u64; 4];
    for _ in 0..20_000 {
        let len = match rng.u8(..) {
            0..=40 => rng.usize(0..14),
            41..=250 => rng.usize(14..200),
            _ => rng.usize(200..3000),
        };
        let mut f: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        if len >= 12 && rng.bool() {
            // Few addresses, so that the table has hits and moves.
            f[..12].copy_from_slice(
                &[[A, B, C, BROADCAST][rng.usize(..4)], [A, B][rng.usize(..2)]].concat(),
            );
        }
        let from = rng.usize(0..4);
        sent[from] += 1;
        match from {
            3 => far.send_owned(f, 0).unwrap(),
            i => p[i]
                .send_owned(f, if rng.u8(..) < 8 { 1000 } else { 0 })
                .unwrap(),
        }
        if rng.u8(..) < 16 {
            for port in p.iter_mut() {
                drain(port);
            }
            drain(&mut far);
        }
    }
    drain_all(&mut p);
    let mut stats: Vec<PortStats> = (0..3).map(|i| sw.port_stats(i).unwrap()).collect();
    stats.push(sw.uplink_stats().unwrap());
    for (i, s) in stats.iter().enumerate() {
        assert_eq!(
            s.frames_in + s.too_short + s.too_long,
            sent[i],
            "port {i}: {s:?}"
        );
        assert!(s.too_short > 0);
    }
}
