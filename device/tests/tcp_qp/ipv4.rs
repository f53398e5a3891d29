//! TCP QPs between two devices over IPv4 (their addresses IPv4-mapped in the contract):
//! both framings, and a stream through an impaired cable.

use std::time::Duration;

use super::*;

const A4: &str = "198.18.3.1";
const B4: &str = "198.18.3.2";

#[test]
fn a_stream_crosses_an_impaired_cable_over_ipv4() {
    let imp = "loss=3,reorder=10,dup=2,corrupt=1,seed=43";
    let n = 512 << 10;
    bulk_across_cable([A4, B4], 6040, Some(imp), n, 400, Duration::from_secs(90));
}

#[test]
fn messages_keep_their_boundaries_over_ipv4() {
    let (_cable, mut a, mut b, mut s, mut c) =
        cabled_pair([A4, B4], 6041, None, FRAMING_MESSAGE, 16, 1 << 20);
    let sizes = [1usize, 0, 1460, 1461, 3000, 60_000];
    let mut rng = Rng::new(11);
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| rng.bytes(n)).collect();
    let mut at = 0u64;
    let mut wqes = Vec::new();
    for (i, d) in data.iter().enumerate() {
        b.buf_write(&c.buf, at, d);
        wqes.push(tcp_send_wqe(
            i as u64,
            0x4000 + i as u32,
            &[c.buf.sge(at, d.len() as u32, c.mr.lkey)],
        ));
        at += d.len() as u64 + 64;
    }
    b.post_send(&mut c.qp, &wqes);
    let cqes = receive_messages(&mut a, &mut s, sizes.len());
    for (i, (d, r)) in data.iter().zip(&cqes).enumerate() {
        assert_cqe(r, CQE_STATUS_SUCCESS, 0, "message");
        assert_eq!((r.wr_id, r.imm_data), (100 + i as u64, 0x4000 + i as u32));
        assert_eq!(r.byte_len, d.len() as u32, "length of message {i}");
        assert_eq!(&a.buf_read(&s.buf, i as u64 * 65_536, d.len()), d);
    }
}
