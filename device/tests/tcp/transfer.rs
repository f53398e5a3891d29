//! Two connections over an in-memory wire: bulk transfers both ways, clean and under
//! seeded loss, reordering, duplication and corruption (corrupt segments die at the
//! checksum), behind a bottleneck with a drop-tail queue. Every transfer is verified by
//! SHA-256, and the sender's `Acked` events must end exactly at its byte count. Every
//! segment sent is checked by smoltcp's parser on the way.

use std::time::{Duration, Instant};

use crate::common::*;
use qpip_device::net::tcp::{self, CongestionKind, Event};
use sha2::{Digest, Sha256};

const MIB: usize = 1 << 20;

struct Outcome {
    wire: WireStats,
    stats: [tcp::ConnStats; 2],
    elapsed: Duration,
    placed: [u64; 2],
}

/// A transfer both ways between two connections A and B, and how their applications take
/// what arrives.
#[derive(Clone, Copy)]
struct Transfer {
    seed: u64,
    a_to_b: usize,
    b_to_a: usize,
    cfg_a: tcp::Config,
    cfg_b: tcp::Config,
    /// Receive space each application keeps posted.
    recv_buffer: usize,
    /// Whether the applications accept out-of-order bytes (direct placement).
    placing: bool,
    /// Each application posts buffers again only when this much was consumed.
    post_chunk: usize,
    /// A stalling reader: buffers are posted only every this long.
    stall: Option<Duration>,
    /// The simulated time it may take.
    limit: Duration,
}

impl Transfer {
    /// `a_to_b` bytes one way and `b_to_a` the other (made from `seed`, which also seeds
    /// the wire), both sides configured as `cfg`; 256 KiB posted and reposted at once.
    fn new(seed: u64, a_to_b: usize, b_to_a: usize, cfg: tcp::Config) -> Transfer {
        Transfer {
            seed,
            a_to_b,
            b_to_a,
            cfg_a: cfg,
            cfg_b: cfg,
            recv_buffer: 256 * 1024,
            placing: false,
            post_chunk: 1,
            stall: None,
            limit: Duration::from_secs(3600),
        }
    }

    /// Runs it over a wire impaired by `imp`.
    fn run(self, imp: Impair) -> Outcome {
        self.run_on(Wire::new(imp, self.seed))
    }

    /// Runs it over a wire made by the caller: every byte must arrive intact, every
    /// byte sent be acknowledged, both sides close cleanly.
    fn run_on(self, mut wire: Wire) -> Outcome {
        let seed = self.seed;
        let start = Instant::now();
        let (ca, cb, t) = open_pair(&self.cfg_a, &self.cfg_b, start, &mut wire);
        let out_a = pattern(seed * 2 + 1, self.a_to_b);
        let out_b = pattern(seed * 2 + 2, self.b_to_a);
        let mut peers = [
            Peer::new(ca, out_a.clone(), self.recv_buffer, self.placing),
            Peer::new(cb, out_b.clone(), self.recv_buffer, self.placing),
        ];
        for p in peers.iter_mut() {
            p.post_chunk = self.post_chunk;
            p.stall = self.stall;
            // The application posts its buffers once connected.
            p.conn.recv_space_changed(t, &mut p.app);
        }
        let end = run(&mut peers, &mut wire, t, self.limit);
        let digest = |b: &[u8]| Sha256::digest(b);
        assert_eq!(peers[1].app.data.len(), out_a.len(), "A to B length");
        assert_eq!(digest(&peers[1].app.data), digest(&out_a), "A to B content");
        assert_eq!(peers[0].app.data.len(), out_b.len(), "B to A length");
        assert_eq!(digest(&peers[0].app.data), digest(&out_b), "B to A content");
        for (i, p) in peers.iter().enumerate() {
            assert_eq!(
                p.acked as usize,
                p.out.len(),
                "peer {i}: Acked covers every byte"
            );
            assert!(
                p.closed && !p.reset && !p.timed_out,
                "peer {i}: closed cleanly"
            );
            assert!(p.peer_closed, "peer {i}: saw the FIN");
            // Acked events: strictly increasing (checked as they came), ending at the size.
            let last_ack = p.events.iter().rev().find_map(|e| match e {
                Event::Acked { upto } => Some(*upto),
                _ => None,
            });
            assert_eq!(last_ack.unwrap_or(0) as usize, p.out.len());
            assert_eq!(p.conn.state(), tcp::State::Closed);
        }
        eprintln!(
            "seed {seed}: {:?} simulated; wire {:?}\n  A {:?} cwnd {}\n  B {:?} cwnd {}",
            end - t,
            wire.stats,
            peers[0].conn.stats(),
            peers[0].conn.cwnd(),
            peers[1].conn.stats(),
            peers[1].conn.cwnd()
        );
        Outcome {
            wire: wire.stats.clone(),
            stats: [peers[0].conn.stats().clone(), peers[1].conn.stats().clone()],
            elapsed: end - t,
            placed: [peers[0].app.placed_bytes, peers[1].app.placed_bytes],
        }
    }
}

fn bad_link() -> Impair {
    Impair {
        loss: 0.02,
        dup: 0.02,
        reorder: 0.10,
        corrupt: 0.01,
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(4),
        rate: 50_000_000,
        queue: 200_000,
    }
}

#[test]
fn clean_link_both_ways() {
    let o = Transfer::new(1, 2 * MIB, MIB, test_config()).run(Impair::clean());
    assert_eq!(o.wire.lost + o.wire.corrupted, 0);
    assert_eq!(o.stats[0].retransmitted_segments, 0, "{:?}", o.stats[0]);
    assert_eq!(o.stats[1].retransmitted_segments, 0, "{:?}", o.stats[1]);
}

/// Segmentation offload: the sender builds super-segments of several MSS; carried whole
/// (as a TAP with GRO, or the memory wire with offloads, hands them over) the receiver
/// takes segments larger than its MSS.
#[test]
fn super_segments_carried_whole() {
    let mut cfg = test_config();
    cfg.gso = true;
    let o = Transfer::new(7, 4 * MIB, MIB, cfg).run(Impair::clean());
    assert!(o.wire.super_segments > 0, "{:?}", o.wire);
    assert_eq!(o.stats[0].retransmitted_segments, 0, "{:?}", o.stats[0]);
}

/// Super-segments cut into segments on a bad link (a link without offloads cuts them, and
/// the loss, reordering, duplication and corruption act on the pieces): recovery
/// retransmits single segments, and everything arrives intact.
#[test]
fn super_segments_cut_on_a_bad_link() {
    let mut cfg = test_config();
    cfg.gso = true;
    for seed in [11, 12] {
        let mut wire = Wire::new(bad_link(), seed);
        wire.cut_gso = true;
        let o = Transfer {
            placing: true,
            ..Transfer::new(seed, 2 * MIB, MIB / 2, cfg)
        }
        .run_on(wire);
        assert!(o.wire.super_segments > 0, "{:?}", o.wire);
        assert!(o.stats[0].retransmitted_segments > 0, "{:?}", o.stats[0]);
    }
}

#[test]
fn bad_link_cubic_sack_three_seeds() {
    for seed in [11, 12, 13] {
        let o = Transfer::new(seed, MIB, MIB, test_config()).run(bad_link());
        assert!(o.wire.lost > 0 && o.wire.corrupted > 0 && o.wire.duplicated > 0);
        assert_eq!(
            o.wire.checksum_drops, o.wire.corrupted,
            "every corrupt segment dropped"
        );
        assert!(o.stats[0].fast_recoveries > 0, "{:?}", o.stats[0]);
        assert!(o.elapsed < Duration::from_secs(120), "took {:?}", o.elapsed);
    }
}

#[test]
fn bad_link_ten_mib_one_way_two_back() {
    let o = Transfer {
        recv_buffer: 512 * 1024,
        ..Transfer::new(21, 10 * MIB, 2 * MIB, test_config())
    }
    .run(bad_link());
    assert!(o.stats[0].retransmitted_segments > 0);
}

#[test]
fn bad_link_reno_without_sack_is_newreno() {
    let cfg = tcp::Config {
        sack: false,
        congestion: CongestionKind::Reno,
        ..test_config()
    };
    for seed in [31, 32] {
        let o = Transfer::new(seed, MIB, MIB / 2, cfg).run(bad_link());
        assert!(o.stats[0].fast_recoveries > 0, "{:?}", o.stats[0]);
    }
}

#[test]
fn bad_link_without_timestamps_or_window_scaling() {
    let cfg = tcp::Config {
        timestamps: false,
        window_scale: None,
        ..test_config()
    };
    let o = Transfer {
        recv_buffer: 60_000,
        ..Transfer::new(41, MIB, MIB, cfg)
    }
    .run(bad_link());
    assert!(o.stats[0].retransmitted_segments > 0);
}

#[test]
fn one_side_without_options() {
    let plain = tcp::Config {
        timestamps: false,
        window_scale: None,
        sack: false,
        ..test_config()
    };
    Transfer {
        cfg_b: plain,
        ..Transfer::new(51, MIB, MIB, test_config())
    }
    .run(bad_link());
}

#[test]
fn direct_placement_of_out_of_order_data() {
    let cfg = tcp::Config {
        // Nothing buffered by the connection beyond the sink: placement must carry it.
        ooo_limit: 0,
        ..test_config()
    };
    let o = Transfer {
        recv_buffer: 512 * 1024,
        placing: true,
        ..Transfer::new(61, MIB, MIB, cfg)
    }
    .run(bad_link());
    assert!(o.placed[0] > 0 && o.placed[1] > 0, "placed {:?}", o.placed);
}

#[test]
fn slow_reader_closes_the_window() {
    // The reader posts 64 KiB at a time into a 128 KiB buffer.
    let cfg = tcp::Config {
        staging: 8 * 1024,
        ..test_config()
    };
    Transfer {
        recv_buffer: 128 * 1024,
        post_chunk: 64 * 1024,
        ..Transfer::new(71, MIB, 256 * 1024, cfg)
    }
    .run(Impair::clean());
}

#[test]
fn stalling_reader_gets_zero_windows() {
    // The reader takes up to 32 KiB only every 300 ms: the window closes and reopens,
    // staging holds what was in flight, transfers still complete. Whether a persist probe
    // is sent depends on the run (under loss the window mostly closes while a
    // retransmission is pending, and its timer runs instead): the persist timer is checked
    // segment by segment in `state::send` (zero_window_persist_probes_back_off_...).
    let cfg = tcp::Config {
        staging: 4 * 1024,
        ..test_config()
    };
    let lossy = Impair {
        loss: 0.02,
        reorder: 0.05,
        ..Impair::clean()
    };
    Transfer {
        recv_buffer: 32 * 1024,
        post_chunk: 16 * 1024,
        stall: Some(Duration::from_millis(300)),
        limit: Duration::from_secs(600),
        ..Transfer::new(81, 512 * 1024, 64 * 1024, cfg)
    }
    .run(lossy);
}
