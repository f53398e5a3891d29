//! Two devices joined by an impaired cable (loss, reordering, duplicates, corruption): RDMA
//! Writes and Reads of megabytes arrive whole, and Write segments that come ahead of a
//! hole are placed at once, straight into their region (counted), not held for the hole;
//! over IPv6 and over IPv4.

use std::time::Duration;

use qpip_device::engine::tcp::TcpLimits;

use crate::support::*;
use crate::*;

const A_ADDR: &str = "fd51:5050::4:1";
const B_ADDR: &str = "fd51:5050::4:2";
const A4: &str = "198.18.4.1";
const B4: &str = "198.18.4.2";

/// The next CQE, given the time a lossy link takes (retransmission timeouts).
#[track_caller]
fn slow(g: &mut FakeGuest, cq: &mut Cq, what: &str) -> Cqe {
    g.try_wait_cqe(cq, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{what}: no completion within 60 s"))
}

fn rdma_over_an_impaired_cable(crc: bool, seed: u64, [a_addr, b_addr]: [&str; 2]) {
    let dir = ScratchDir::new(&format!("iwarp-impaired-{seed}"));
    let cable = dir.join("cable");
    let imp = format!("loss=3,reorder=10,dup=2,corrupt=1,seed={seed}");
    let limits = TcpLimits::default();
    let device = |mac_end, addr| {
        cabled_device(
            [2, 0, 0, 0, seed as u8, mac_end],
            addr,
            &cable,
            Some(&imp),
            limits,
        )
    };
    let (mut a, mut b) = (device(0xa1, a_addr), device(0xb2, b_addr));
    let (ca, cb) = (a.create_ctx().unwrap(), b.create_ctx().unwrap());
    let server = a.iwarp_endpoint_in(ca, 16, 1 << 20);
    let mut client = b.iwarp_endpoint_in(cb, 16, 4 << 20);
    let l = a.listen(ca, UNSPECIFIED, 7200, 4).unwrap();
    let mpa = Mpa {
        flags: if crc { IWARP_CONN_CRC } else { 0 },
        ..Mpa::plain()
    };
    let acc = a.submit_accept_iwarp(ca, l, server.qp.id, &Mpa::plain());
    let con = b.submit_connect_iwarp(cb, client.qp.id, ip(a_addr), 7200, &mpa);
    let (acc, con) = a.admin_wait_both(acc, &mut b, con);
    assert_eq!((acc.status, con.status), (ADMIN_STATUS_OK, ADMIN_STATUS_OK));

    // The client writes 512 KiB into the server's region, in WRs of 64 KiB.
    let len = 512u64 << 10;
    let (target, tmr) = region(&mut a, ca, len, MR_ACCESS_REMOTE_WRITE, 0);
    let data = pattern(len as usize, seed as u8);
    b.buf_write(&client.buf, 0, &data);
    let piece = 64 * 1024u64;
    let wqes: Vec<WqeBytes> = (0..len / piece)
        .map(|i| {
            let sge = client.buf.sge(i * piece, piece as u32, client.mr.lkey);
            rdma_wqe(
                WQE_OP_RDMA_WRITE,
                i,
                target.iova + i * piece,
                tmr.rkey,
                &[sge],
            )
        })
        .collect();
    let placed_before = a.stat(STAT_IWARP_OOO_PLACED);
    b.post_send(&mut client.qp, &wqes);
    for i in 0..len / piece {
        let c = slow(&mut b, &mut client.scq, "write");
        ok(&c, CQE_OP_RDMA_WRITE, piece as u32, "write");
        assert_eq!(c.wr_id, i);
    }
    // Acknowledged by TCP means placed: the region holds every byte.
    assert!(
        a.buf_read(&target, 0, len as usize) == data,
        "the Writes' bytes"
    );
    let ahead = a.stat(STAT_IWARP_OOO_PLACED) - placed_before;
    assert!(ahead > 0, "segments after a loss were placed out of order");

    // And back: the client reads the region into the second half of its buffer.
    let (source, smr) = region(&mut a, ca, len, MR_ACCESS_REMOTE_READ, 0);
    a.buf_write(&source, 0, &data);
    let sge = client.buf.sge(len, len as u32, client.mr.lkey);
    b.post_send(
        &mut client.qp,
        &[rdma_wqe(
            WQE_OP_RDMA_READ,
            99,
            source.iova,
            smr.rkey,
            &[sge],
        )],
    );
    let c = slow(&mut b, &mut client.scq, "read");
    ok(&c, CQE_OP_RDMA_READ, len as u32, "read");
    assert!(
        b.buf_read(&client.buf, len, len as usize) == data,
        "the Read's bytes"
    );
    drop((server, dir));
}

#[test]
fn rdma_moves_every_byte_over_an_impaired_cable_placing_ahead_of_holes() {
    rdma_over_an_impaired_cable(false, 11, [A_ADDR, B_ADDR]);
}

#[test]
fn the_same_with_crc_on() {
    rdma_over_an_impaired_cable(true, 12, [A_ADDR, B_ADDR]);
}

#[test]
fn the_same_over_ipv4() {
    rdma_over_an_impaired_cable(true, 13, [A4, B4]);
}
