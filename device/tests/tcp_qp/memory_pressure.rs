//! The function's TCP memory pool bounds what all its connections hold for their QPs
//! (bytes staged ahead of posted receives): under pressure a segment that would be staged
//! is dropped and counted, never held beyond the pool, and once receives are posted the
//! peer's retransmissions bring every byte, in order.

use qpip_device::engine::EngineConfig;
use qpip_device::function::FunctionConfig;
use qpip_device::net::tcp::MemoryPool;
use qpip_device::vfio::ServeOptions;

use super::*;

/// Less than what four connections would stage without a pool (4 x 64 KiB).
const POOL: usize = 100 * 1024;
const CONNS: usize = 4;
const LEN: usize = 64 * 1024;

#[test]
fn staged_bytes_stay_within_the_functions_pool_and_every_byte_arrives() {
    let pool = MemoryPool::new(POOL, None);
    let mut g = FakeGuest::with_options(ServeOptions {
        core: FunctionConfig {
            engine: EngineConfig {
                tcp_memory: Some(pool.clone()),
                ..EngineConfig::default()
            },
            ..FunctionConfig::default()
        },
    });
    let (sctx, cctx) = (g.create_ctx().unwrap(), g.create_ctx().unwrap());
    let mut pairs = Vec::new();
    for i in 0..CONNS {
        let (s, c) = g.loopback_pair(sctx, cctx, 6600 + i as u16, FRAMING_STREAM);
        pairs.push((s, c));
    }
    // Every client sends 64 KiB; no server has posted a receive, so all of it would be
    // staged in the device.
    for (i, (_, c)) in pairs.iter_mut().enumerate() {
        let data = pattern(i as u64, LEN);
        g.buf_write(&c.buf, 0, &data);
        let sge = c.buf.sge(0, LEN as u32, c.mr.lkey);
        g.post_send(&mut c.qp, &[tcp_send_wqe(1, 0, &[sge])]);
    }
    let until = Instant::now() + QUIET;
    let mut most = 0;
    while Instant::now() < until {
        most = most.max(pool.used());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        most <= POOL,
        "the pool held {most} bytes, beyond its {POOL}"
    );
    assert!(
        pool.refused() > 0,
        "four connections staging 64 KiB each must have met the pool"
    );
    // Receives for everything: the dropped bytes come again, and every byte arrives.
    for (i, (s, c)) in pairs.iter_mut().enumerate() {
        let sge = s.buf.sge(0, LEN as u32, s.mr.lkey);
        g.post_recv(&mut s.qp, &[recv_wqe(2, &[sge])]);
        let mut got = 0;
        while got < LEN {
            let r = g
                .try_wait_cqe(&mut s.rcq, Duration::from_secs(20))
                .unwrap_or_else(|| panic!("connection {i}: {got} of {LEN} bytes arrived"));
            assert_eq!(r.status, CQE_STATUS_SUCCESS, "{r:?}");
            got += r.byte_len as usize;
            if got < LEN {
                let sge = s.buf.sge(got as u64, (LEN - got) as u32, s.mr.lkey);
                g.post_recv(&mut s.qp, &[recv_wqe(3, &[sge])]);
            }
        }
        assert_eq!(
            g.buf_read(&s.buf, 0, LEN),
            pattern(i as u64, LEN),
            "connection {i}: the bytes arrived whole and in order"
        );
        assert_eq!(g.wait_cqe(&mut c.scq).status, CQE_STATUS_SUCCESS);
    }
    assert!(pool.used() <= POOL);
}

/// Bytes that show which connection and offset they came from.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 8) as u8 ^ seed as u8)
        .collect()
}
