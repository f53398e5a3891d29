//! The uplink both ways (a memory pair plays the wire beyond it), TCP super-frames, and
//! the uplink's timers passed through the ports.

use std::net::Ipv6Addr;

use qpip_device::backend::link::Link;
use qpip_device::backend::switch::{PortId, Switch, UPLINK_BATCH};
use qpip_device::backend::{memory, Backend, ImpairSpec};
use qpip_device::net::{gso, wire};

use crate::{drain, drain_all, frame, switch, tags, A, B, BROADCAST, H, UNKNOWN};

/// The IPv6 source of the super-frames: function 0's address.
const ADDR_A: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);

/// A second host beyond the uplink.
const H2: [u8; 6] = [0x02, 0, 0, 0, 0, 0x12];

#[test]
fn frames_cross_the_uplink_both_ways_and_never_back() {
    let (sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    // A broadcast from beyond reaches every function, and does not come back.
    far.send(&frame(&BROADCAST, &H, 1)).unwrap();
    let got = drain_all(&mut p);
    assert_eq!(got[0].len(), 1);
    assert_eq!(got[1].len(), 1);
    assert!(drain(&mut far).is_empty());
    assert_eq!(sw.lookup(&H), Some(PortId::Uplink));
    // A function's frame for that host goes out of the uplink only.
    p[0].send(&frame(&H, &A, 2)).unwrap();
    assert_eq!(tags(&mut far), [2]);
    assert!(drain_all(&mut p).iter().all(|f| f.is_empty()));
    // The host's answer reaches that function only.
    far.send(&frame(&A, &H, 3)).unwrap();
    let got = drain_all(&mut p);
    assert_eq!(got[0].len(), 1);
    assert_eq!(crate::tag(&got[0][0]), 3);
    assert!(got[1].is_empty());
    // A frame between two hosts beyond the uplink stays there.
    far.send(&frame(&BROADCAST, &H2, 4)).unwrap();
    drain_all(&mut p);
    far.send(&frame(&H2, &H, 5)).unwrap();
    assert!(drain_all(&mut p).iter().all(|f| f.is_empty()));
    assert!(drain(&mut far).is_empty());
    let u = sw.uplink_stats().unwrap();
    assert_eq!(
        (u.frames_in, u.frames_out, u.flooded, u.filtered),
        (4, 1, 2, 1),
        "{u:?}"
    );
}

/// An Ethernet + IPv6 + TCP frame with `payload` bytes of data: a super-frame when sent
/// with a segment size below that.
fn super_frame(dst: &[u8; 6], src: &[u8; 6], payload: usize) -> Vec<u8> {
    let (s, d) = (ADDR_A, Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&1000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&2000u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // PSH, ACK
    tcp.extend((0..payload).map(|i| i as u8));
    let mut f = wire::ipv6_packet(&s, &d, wire::proto::TCP, 64, &tcp);
    wire::write_ethernet(&mut f, dst, src);
    f
}

fn segments(f: &[u8], mss: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    gso::split_frame(f, mss as usize, |s| out.push(s)).unwrap();
    out
}

#[test]
fn super_frames_go_whole_to_functions_and_cut_to_an_uplink_without_offloads() {
    let (sw, mut p, far) = switch(3, true);
    let mut far = far.unwrap();
    p[0].claim_identity(A, &[ADDR_A]).unwrap();
    assert!(p[0].gso());
    p[1].send(&frame(&BROADCAST, &B, 0)).unwrap();
    far.send(&frame(&BROADCAST, &H, 0)).unwrap();
    drain_all(&mut p);
    drain(&mut far);

    // To a function: whole.
    let to_b = super_frame(&B, &A, 5000);
    p[0].send_gso(&to_b, 1400).unwrap();
    let got = drain_all(&mut p);
    assert_eq!(got[1], [to_b]);
    assert!(got[0].is_empty() && got[2].is_empty());
    assert!(drain(&mut far).is_empty());

    // To a host beyond the uplink: cut by the uplink into its segments.
    let to_h = super_frame(&H, &A, 5000);
    let expected = segments(&to_h, 1400);
    assert_eq!(expected.len(), 4);
    p[0].send_owned(to_h, 1400).unwrap();
    assert_eq!(drain(&mut far), expected);
    assert!(drain_all(&mut p).iter().all(|f| f.is_empty()));

    // Flooded: whole to each function, cut to the uplink.
    let flood = super_frame(&UNKNOWN, &A, 3000);
    p[0].send_owned(flood.clone(), 1000).unwrap();
    let got = drain_all(&mut p);
    assert_eq!(got[1], std::slice::from_ref(&flood));
    assert_eq!(got[2], std::slice::from_ref(&flood));
    assert!(got[0].is_empty());
    assert_eq!(drain(&mut far), segments(&flood, 1000));
    // A super-frame counts once.
    assert_eq!(sw.uplink_stats().unwrap().frames_out, 2 + 1);
}

#[test]
fn super_frames_go_whole_to_an_uplink_with_offloads() {
    let (near, mut far) = memory::pair_gso().unwrap();
    let sw = Switch::new(Some(Box::new(near)));
    let mut a = sw.port("f0").unwrap();
    a.claim_identity(A, &[ADDR_A]).unwrap();
    let f = super_frame(&H, &A, 20000);
    a.send_owned(f.clone(), 1400).unwrap();
    assert_eq!(drain(&mut far), [f]);
}

#[test]
fn an_impaired_uplinks_timers_pass_through_the_ports() {
    let (near, mut far) = memory::pair().unwrap();
    let spec: ImpairSpec = "delay=1000,seed=1".parse().unwrap();
    let sw = Switch::new(Some(Box::new(Link::new(near, None, Some(&spec)).unwrap())));
    let mut a = sw.port("f0").unwrap();
    a.claim_identity(A, &[]).unwrap();
    assert_eq!(a.next_deadline(), None);
    a.send(&frame(&BROADCAST, &A, 1)).unwrap();
    let due = a.next_deadline().expect("the frame is held back");
    assert!(drain(&mut far).is_empty());
    a.poll(due).unwrap();
    assert_eq!(tags(&mut far), [1]);
    assert_eq!(a.next_deadline(), None);
    assert!(a.describe().contains("memory:a"), "{}", a.describe());
    assert!(sw.describe().contains("f0"), "{}", sw.describe());
}

/// A function whose queue never empties still has the uplink pumped, every
/// [`UPLINK_BATCH`] frames it takes.
#[test]
fn a_busy_function_does_not_starve_the_uplink() {
    let (sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    p[0].send(&frame(&BROADCAST, &A, 0)).unwrap();
    drain_all(&mut p);
    drain(&mut far);
    for i in 0..2 * UPLINK_BATCH as u32 {
        p[1].send(&frame(&A, &B, i)).unwrap();
    }
    far.send(&frame(&B, &H, 7)).unwrap();
    let mut buf = Vec::new();
    for _ in 0..UPLINK_BATCH {
        p[0].recv_owned(&mut buf).unwrap().unwrap();
    }
    assert_eq!(sw.uplink_stats().unwrap().frames_in, 0);
    p[0].recv_owned(&mut buf).unwrap().unwrap();
    assert_eq!(sw.uplink_stats().unwrap().frames_in, 1);
    assert_eq!(tags(&mut p[1]), [7]);
}
