//! Two stacks on one link: the in-memory pair (with and without a bad link between them)
//! and the cable backend. Datagrams carry their own check (`checked_datagrams`), so
//! anything corrupt that got through would be seen; losses are accounted for, never hidden.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv6Addr;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::checked_datagrams::{datagram, verify, HEADER};
use crate::net_oracle;
use qpip_device::backend::{cable::Cable, link::Link, memory, Backend, ImpairSpec};
use qpip_device::net::{Delivery, DropReason, Interface, NetConfig, Stack};

const MAC_A: [u8; 6] = [0x02, 0x51, 0x50, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0x51, 0x50, 0, 0, 0x0b];
const A: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xa);
const B: Ipv6Addr = Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 0xb);

fn config(mac: [u8; 6], addr: Ipv6Addr, seed: u64) -> NetConfig {
    let mut c = NetConfig::new(mac);
    c.addrs.push((addr, 64));
    c.seed = Some(seed);
    c
}

/// Stack A and stack B, each on its end of a link, and the sequence numbers of the
/// datagrams each received (checked by `verify`).
struct Pair {
    a: Interface,
    b: Interface,
    ra: Vec<u32>,
    rb: Vec<u32>,
}

impl Pair {
    fn new(a_end: Box<dyn Backend>, b_end: Box<dyn Backend>) -> Pair {
        let t = Instant::now();
        Pair {
            a: Interface::new(Stack::new(&config(MAC_A, A, 1), t), a_end),
            b: Interface::new(Stack::new(&config(MAC_B, B, 2), t), b_end),
            ra: Vec::new(),
            rb: Vec::new(),
        }
    }

    /// Moves frames both ways and runs timers until nothing is pending for `quiet`, or
    /// for `limit` at the most.
    fn pump(&mut self, quiet: Duration, limit: Duration) {
        let Pair { a, b, ra, rb } = self;
        let start = Instant::now();
        let mut idle_since = Instant::now();
        while start.elapsed() < limit {
            let now = Instant::now();
            let n = a.poll_rx(now, 256, |d| {
                ra.push(verify(d.payload()).0);
                Delivery::Delivered
            }) + b.poll_rx(now, 256, |d| {
                rb.push(verify(d.payload()).0);
                Delivery::Delivered
            });
            a.poll_timers(now);
            b.poll_timers(now);
            let held =
                a.backend().next_deadline().is_some() || b.backend().next_deadline().is_some();
            if n > 0 || held {
                idle_since = Instant::now();
            } else if idle_since.elapsed() >= quiet {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

fn sizes(n: u32, max: usize, seed: u64) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .map(|i| match i % 4 {
            0 => rng.usize(0..64),
            1 => rng.usize(64..1440),
            2 => rng.usize(1440..4000),
            _ => rng.usize(4000..=max),
        })
        .collect()
}

/// Both ways at once on the in-memory pair; returns the pair and the body sizes sent.
fn exchange(
    impair: Option<&str>,
    pcap: Option<&std::path::Path>,
    n: u32,
    max: usize,
) -> (Pair, Vec<usize>) {
    let (la, lb) = memory::pair().unwrap();
    let spec: Option<ImpairSpec> = impair.map(|s| s.parse().unwrap());
    // Only A's side is impaired (both directions): B's frames reach A's capture intact.
    let la: Box<dyn Backend> = if spec.is_some() || pcap.is_some() {
        Box::new(Link::new(la, pcap, spec.as_ref()).unwrap())
    } else {
        Box::new(la)
    };
    let mut p = Pair::new(la, Box::new(lb));
    let sz = sizes(n, max, 42);
    for (i, &len) in sz.iter().enumerate() {
        let now = Instant::now();
        p.a.stack
            .send_udp(None, 1000, B, 9, &datagram(i as u32, len), now)
            .unwrap();
        p.b.stack
            .send_udp(None, 2000, A, 9, &datagram(i as u32, len), now)
            .unwrap();
        p.a.flush();
        p.b.flush();
        if i % 8 == 7 {
            p.pump(Duration::ZERO, Duration::from_millis(50));
        }
    }
    p.pump(Duration::from_millis(50), Duration::from_secs(10));
    (p, sz)
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("qpip-net-pair-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn clean_link_delivers_everything_exactly_once() {
    let (p, sz) = exchange(None, None, 200, 65000);
    for r in [&p.ra, &p.rb] {
        let mut s = r.clone();
        s.sort();
        assert_eq!(s, (0..sz.len() as u32).collect::<Vec<_>>());
    }
    for s in [&p.a.stack, &p.b.stack] {
        // Only the other's start-up probes for its own addresses.
        assert_eq!(s.stats().total_dropped(), 2, "{:?}", s.stats());
        assert_eq!(s.stats().dropped(DropReason::NotForUs), 2);
        assert!(s.stats().fragmented_tx > 0 && s.stats().reassembled > 0);
        assert_eq!(s.stats().udp_rx, 200);
    }
}

#[test]
fn bad_link_loses_but_never_corrupts() {
    let dir = tempdir("bad-link");
    for seed in [1u64, 2, 3] {
        let pcap = dir.join(format!("a-{seed}.pcap"));
        let spec = format!("loss=3,reorder=25,dup=2,corrupt=1,delay=1,jitter=1,seed={seed}");
        let (p, sz) = exchange(Some(&spec), Some(&pcap), 300, 20000);
        for (who, r) in [("A", &p.ra), ("B", &p.rb)] {
            let unique: HashSet<u32> = r.iter().copied().collect();
            // Small datagrams: a frame each, ~6 % lost or damaged. Big ones: up to 14
            // fragments, each of which must make it.
            let (mut small_ok, mut small) = (0, 0);
            for (i, &len) in sz.iter().enumerate() {
                if HEADER + len + 48 <= 1500 {
                    small += 1;
                    small_ok += unique.contains(&(i as u32)) as u32;
                }
            }
            assert!(
                small_ok * 100 >= small * 85,
                "seed {seed} {who}: {small_ok} of {small} small datagrams"
            );
            assert!(
                unique.len() * 100 >= sz.len() * 50,
                "seed {seed} {who}: {} of {}",
                unique.len(),
                sz.len()
            );
            eprintln!(
                "seed {seed}: {who} received {} datagrams ({} distinct) of {}",
                r.len(),
                unique.len(),
                sz.len()
            );
        }
        // The damage shows in the counters, not in the data.
        let (a, b) = (p.a, p.b);
        let drops: BTreeMap<_, _> = a
            .stack
            .stats()
            .iter()
            .chain(b.stack.stats().iter())
            .filter(|(k, v)| *v > 0 && k.starts_with("drop_"))
            .collect();
        eprintln!("seed {seed}: drops {drops:?}");
        assert!(
            a.stack.stats().dropped(DropReason::BadChecksum)
                + b.stack.stats().dropped(DropReason::BadChecksum)
                > 0
        );
        drop(a);
        drop(b);
        // The capture holds every frame intact: ours before the impairment, the peer's
        // as it sent them.
        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&pcap).unwrap()).unwrap();
        let mut n = 0;
        while let Some(frame) = r.next_packet() {
            net_oracle::check(&frame.unwrap().data);
            n += 1;
        }
        assert!(n > 300, "{n} frames captured");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memory_link_fd_is_readable_while_frames_wait() {
    let (mut x, mut y) = memory::pair().unwrap();
    let readable = |fd| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    };
    assert!(!readable(y.fd()));
    x.send(b"one").unwrap();
    x.send(b"two").unwrap();
    assert!(readable(y.fd()));
    let mut buf = [0u8; 16];
    assert_eq!(y.recv(&mut buf).unwrap(), Some(3));
    assert!(readable(y.fd()));
    assert_eq!(y.recv(&mut buf).unwrap(), Some(3));
    assert!(!readable(y.fd()));
    assert_eq!(y.recv(&mut buf).unwrap(), None);
    for _ in 0..memory::QUEUE_LIMIT {
        x.send(b"f").unwrap();
    }
    assert_eq!(
        x.send(b"f").unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}

#[test]
fn cable_joins_two_ends_and_survives_a_restart() {
    let dir = tempdir("cable");
    let path = dir.join("cable");
    let mut a = Cable::open(&path).unwrap();
    let mut b = Cable::open(&path).unwrap();
    assert_eq!(a.own_path(), dir.join("cable.a"));
    assert_eq!(b.own_path(), dir.join("cable.b"));
    let err = Cable::open(&path).err().expect("a third end is refused");
    assert!(err.to_string().contains("already has both ends"), "{err}");
    let mut buf = vec![0u8; 9100];
    let big = vec![7u8; 9014];
    a.send(&big).unwrap();
    b.send(b"back").unwrap();
    assert_eq!(b.recv(&mut buf).unwrap(), Some(9014));
    assert_eq!(a.recv(&mut buf).unwrap(), Some(4));
    assert_eq!(a.recv(&mut buf).unwrap(), None);
    // The ends are connected to each other now (no queue limit between them, see
    // backend::cable), so the kernel refuses frames from anyone else.
    assert!(a.is_connected() && b.is_connected());
    let stranger = UnixDatagram::unbound().unwrap();
    let sent = stranger.send_to(b"intruder", dir.join("cable.a"));
    assert_eq!(sent.unwrap_err().raw_os_error(), Some(libc::EPERM));
    assert_eq!(a.recv(&mut buf).unwrap(), None);
    // B goes away: A's frames are lost, not an error. B comes back and takes its end again.
    drop(b);
    a.send(b"lost").unwrap();
    assert_eq!(a.unplugged_drops, 1);
    let mut b = Cable::open(&path).unwrap();
    assert_eq!(b.own_path(), dir.join("cable.b"));
    a.send(b"again").unwrap();
    assert_eq!(b.recv(&mut buf).unwrap(), Some(5));
    // An end that died without cleaning up leaves a socket file that is taken over.
    drop(a);
    let stale = UnixDatagram::bind(dir.join("cable.a")).unwrap();
    drop(stale); // the file stays
    assert!(dir.join("cable.a").exists());
    let mut a = Cable::open(&path).unwrap();
    assert_eq!(a.own_path(), dir.join("cable.a"));
    b.send(b"hi").unwrap();
    assert_eq!(a.recv(&mut buf).unwrap(), Some(2));
    drop(a);
    drop(b);
    assert!(!dir.join("cable.a").exists() && !dir.join("cable.b").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Connected to each other, the ends are not held to `net.unix.max_dgram_qlen` (often 10):
/// a window of frames goes at once while the receiver has not read yet. And an end that
/// only listens takes the frames of an end that restarted once it connects again.
#[test]
fn cable_ends_queue_a_window_and_follow_a_restart() {
    let dir = tempdir("cable-window");
    let path = dir.join("cable");
    let mut a = Cable::open(&path).unwrap();
    let mut b = Cable::open(&path).unwrap();
    let mut buf = vec![0u8; 2000];
    a.send(b"hello").unwrap();
    assert_eq!(b.recv(&mut buf).unwrap(), Some(5));
    let frame = vec![0x42u8; 1514];
    // 60 frames: six times the usual queue limit, within the sender's buffer.
    for _ in 0..60 {
        a.send(&frame).unwrap();
    }
    assert_eq!(a.backlogged(), 0, "no frame waits for the receiver");
    for _ in 0..60 {
        assert_eq!(b.recv(&mut buf).unwrap(), Some(1514));
    }
    assert_eq!(b.recv(&mut buf).unwrap(), None);
    // B restarts while A (connected to the old B) sends nothing.
    drop(b);
    let mut b = Cable::open(&path).unwrap();
    b.send(b"refused").unwrap(); // A is still connected to the old B: lost, counted
    assert_eq!(b.unplugged_drops, 1);
    assert_eq!(a.recv(&mut buf).unwrap(), None);
    // A connects again when its recheck is due, and takes the new B's frames.
    let due = a.next_deadline().expect("a recheck while connected");
    a.poll(due).unwrap();
    b.send(b"new b").unwrap();
    assert_eq!(a.recv(&mut buf).unwrap(), Some(5));
    assert_eq!(&buf[..5], b"new b");
    drop((a, b));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_stacks_over_a_cable() {
    let dir = tempdir("stacks");
    let path = dir.join("stacks");
    let mut p = Pair::new(
        Box::new(Cable::open(&path).unwrap()),
        Box::new(Cable::open(&path).unwrap()),
    );
    for (i, len) in [0usize, 1000, 8000, 30000, 65515].into_iter().enumerate() {
        p.a.stack
            .send_udp(None, 1, B, 9, &datagram(i as u32, len), Instant::now())
            .unwrap();
        p.a.flush();
    }
    p.pump(Duration::from_millis(50), Duration::from_secs(5));
    assert_eq!(p.rb, vec![0, 1, 2, 3, 4]);
    assert!(p.ra.is_empty());
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}
