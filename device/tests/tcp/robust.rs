//! Hostile input: segments with the right 4-tuple but random flags, sequence and
//! acknowledgment numbers near the live ones, windows, options and payloads, thrown at
//! both ends of a live transfer (fixed seeds). Nothing may panic and the connections'
//! invariants must hold after every segment; junk that RFC 9293 and RFC 5961 tell a
//! connection to refuse (resets and SYNs off the exact sequence number, data outside
//! the window, stale ACKs) must leave the transfer intact.

use std::time::{Duration, Instant};

use crate::common::*;
use qpip_device::net::tcp::wire::{self, flags, Header, Options, SackBlocks};
use sha2::{Digest, Sha256};

fn near(rng: &mut fastrand::Rng, x: u32, span: i64) -> u32 {
    (x as i64 + rng.i64(-span..=span)) as u32
}

/// A random segment "from the peer" of `to`, near what the real peer just sent.
fn junk(rng: &mut fastrand::Rng, real: &wire::Segment) -> (Header, Vec<u8>) {
    let r = &real.header;
    let mut o = Options::default();
    if rng.bool() {
        o.timestamps = r
            .options
            .timestamps
            .map(|(v, e)| (near(rng, v, 50), near(rng, e, 50)));
    }
    if rng.u8(..8) == 0 {
        o.mss = Some(rng.u16(..));
    }
    if rng.u8(..8) == 0 {
        o.window_scale = Some(rng.u8(..20));
    }
    o.sack_permitted = rng.u8(..8) == 0;
    let mut sack = SackBlocks::new();
    for _ in 0..rng.usize(..4) {
        let l = near(rng, r.ack, 40_000);
        sack.push((l, near(rng, l, 5_000)));
    }
    o.sack = sack;
    let h = Header {
        src_port: r.src_port,
        dst_port: r.dst_port,
        seq: near(rng, r.seq, 70_000),
        ack: near(rng, r.ack, 70_000),
        flags: rng.u8(..),
        window: rng.u16(..),
        urgent: rng.u16(..),
        options: o,
    };
    let payload: Vec<u8> = (0..rng.usize(..2000)).map(|_| rng.u8(..)).collect();
    (h, payload)
}

fn inject(p: &mut Peer, real: &wire::Segment, h: &Header, payload: &[u8], now: Instant) {
    let bytes = wire::build(&real.src, &real.dst, h, payload);
    let seg = wire::parse(real.src, real.dst, &bytes).expect("valid junk parses");
    p.conn.on_segment(&seg, now, &mut p.app);
    p.conn.check_invariants();
}

#[test]
fn random_junk_never_breaks_invariants() {
    let mut injected = 0;
    for seed in 0..24u64 {
        let start = Instant::now();
        let mut wire = Wire::new(
            Impair {
                loss: 0.02,
                reorder: 0.1,
                ..Impair::clean()
            },
            seed,
        );
        let cfg = test_config();
        let (ca, cb, t) = open_pair(&cfg, &cfg, start, &mut wire);
        let mut peers = [
            Peer::new(ca, pattern(seed, 300_000), 64 * 1024, seed % 2 == 0),
            Peer::new(cb, pattern(seed + 100, 300_000), 64 * 1024, seed % 2 == 1),
        ];
        let mut rng = fastrand::Rng::with_seed(seed * 7919);
        let mut now = t;
        // Bounded: the junk may well kill the connection (a lucky reset, an ACK of
        // data never received); what matters is that nothing breaks.
        for _ in 0..20_000 {
            for (i, p) in peers.iter_mut().enumerate() {
                p.handle_events(now);
                let mut src = Source(&p.out[..p.queued]);
                while let Some(o) = p.conn.poll_transmit(now, &mut src) {
                    wire.send(1 - i, o, now);
                }
            }
            let next = [
                wire.next_at(),
                peers[0].conn.next_deadline(),
                peers[1].conn.next_deadline(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            now = now.max(next);
            while let Some((to, src, dst, bytes)) = wire.pop_due(now) {
                let Ok(seg) = wire::parse(src, dst, &bytes) else {
                    continue;
                };
                let p = &mut peers[to];
                p.conn.on_segment(&seg, now, &mut p.app);
                p.conn.check_invariants();
                if rng.f64() < 0.3 {
                    let (h, payload) = junk(&mut rng, &seg);
                    inject(p, &seg, &h, &payload, now);
                    injected += 1;
                }
                p.handle_events(now);
            }
            for p in peers.iter_mut() {
                if p.conn.next_deadline().is_some_and(|d| d <= now) {
                    p.conn.poll(now);
                    p.conn.check_invariants();
                }
            }
        }
    }
    assert!(injected > 3000, "{injected} injected");
}

#[test]
fn junk_that_must_be_refused_leaves_the_transfer_intact() {
    for seed in [3u64, 4] {
        let start = Instant::now();
        let mut wire = Wire::new(
            Impair {
                loss: 0.01,
                reorder: 0.05,
                ..Impair::clean()
            },
            seed,
        );
        let cfg = test_config();
        let (ca, cb, t) = open_pair(&cfg, &cfg, start, &mut wire);
        let out = [pattern(seed, 1 << 20), pattern(seed + 1, 1 << 19)];
        let mut peers = [
            Peer::new(ca, out[0].clone(), 256 * 1024, false),
            Peer::new(cb, out[1].clone(), 256 * 1024, false),
        ];
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut kinds = [0u32; 4];
        let mut hook = |peers: &mut [Peer; 2], to: usize, real: &wire::Segment, now: Instant| {
            if rng.f64() >= 0.2 || real.header.rst() {
                return;
            }
            let p = &mut peers[to];
            let r = real.header;
            let mut h = Header {
                options: Options::default(),
                ..r
            };
            let k = rng.usize(..4);
            kinds[k] += 1;
            let mut payload = Vec::new();
            match k {
                // A reset off the exact sequence number (in the window or not): a
                // challenge ACK at most.
                0 => {
                    h.flags = flags::RST | if rng.bool() { flags::ACK } else { 0 };
                    h.seq = r.seq.wrapping_add(rng.u32(1..1 << 20));
                }
                // A SYN at any sequence number: a challenge ACK.
                1 => {
                    h.flags = flags::SYN | if rng.bool() { flags::ACK } else { 0 };
                    h.seq = rng.u32(..);
                }
                // Data far outside the window: refused with an ACK.
                2 => {
                    h.flags = flags::ACK;
                    h.seq = r.seq.wrapping_add(rng.u32(1 << 28..1 << 30));
                    payload = vec![0xee; rng.usize(1..1400)];
                }
                // An ACK that acknowledges what was never sent: refused with an ACK.
                _ => {
                    h.flags = flags::ACK;
                    h.ack = r.ack.wrapping_add(rng.u32(1 << 24..1 << 30));
                    h.window = 0;
                }
            }
            inject(p, real, &h, &payload, now);
            p.handle_events(now);
        };
        run_hooked(
            &mut peers,
            &mut wire,
            t,
            Duration::from_secs(600),
            &mut hook,
        );
        assert!(kinds.iter().all(|&k| k > 10), "{kinds:?}");
        assert_eq!(Sha256::digest(&peers[1].app.data), Sha256::digest(&out[0]));
        assert_eq!(Sha256::digest(&peers[0].app.data), Sha256::digest(&out[1]));
        for p in &peers {
            assert_eq!(p.acked as usize, p.out.len());
            assert!(p.closed && !p.reset);
        }
    }
}
