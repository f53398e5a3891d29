//! A port's fd, as an engine sleeping in poll(2) sees it.

use qpip_device::backend::Backend;

use crate::{drain, frame, readable, switch, tags, A, B, BROADCAST, H};

#[test]
fn a_ports_fd_is_readable_exactly_while_something_may_wait() {
    let (_sw, mut p, far) = switch(2, true);
    let mut far = far.unwrap();
    assert!(!readable(p[0].fd()));
    assert!(!readable(p[1].fd()));
    // A frame queued for port 0 (B's broadcast) wakes port 0, not the sender.
    p[1].send(&frame(&BROADCAST, &B, 1)).unwrap();
    p[1].send(&frame(&BROADCAST, &B, 2)).unwrap();
    assert!(readable(p[0].fd()));
    assert!(!readable(p[1].fd()));
    drain(&mut far);
    // Still readable while a frame is left.
    let mut buf = Vec::new();
    assert!(p[0].recv_owned(&mut buf).unwrap().is_some());
    assert!(readable(p[0].fd()));
    assert_eq!(tags(&mut p[0]), [2]);
    assert!(!readable(p[0].fd()));

    // A frame on the uplink wakes every port: it may be for any of them.
    far.send(&frame(&B, &H, 3)).unwrap();
    assert!(readable(p[0].fd()));
    assert!(readable(p[1].fd()));
    // Port 0 pumps it into port 1's queue: port 0 is quiet again, port 1 is not.
    assert_eq!(tags(&mut p[0]), [] as [u32; 0]);
    assert!(!readable(p[0].fd()));
    assert!(readable(p[1].fd()));
    assert_eq!(tags(&mut p[1]), [3]);
    assert!(!readable(p[1].fd()));

    // The plain recv too.
    p[0].send(&frame(&B, &A, 4)).unwrap();
    assert!(readable(p[1].fd()));
    let mut small = [0u8; 20];
    assert_eq!(p[1].recv(&mut small).unwrap(), Some(20));
    assert_eq!(crate::tag(&small), 4);
    assert!(!readable(p[1].fd()));
}

#[test]
fn a_switch_without_an_uplink_has_ports_that_wake_for_their_queue_only() {
    let (sw, mut p, _) = switch(2, false);
    assert_eq!(sw.uplink_stats(), None);
    assert!(!readable(p[1].fd()));
    p[0].send(&frame(&BROADCAST, &A, 1)).unwrap();
    assert!(readable(p[1].fd()));
    assert_eq!(tags(&mut p[1]), [1]);
    assert!(!readable(p[1].fd()));
    assert_eq!(p[1].next_deadline(), None);
}
