//! Memory a work request or a command must not touch: unknown and deregistered keys,
//! another context's region, addresses outside the region (overflow included), a receive
//! into a region without local write, and page lists outside guest RAM. Each ends in an error
//! completion with the right detail, never in a memory access.

use crate::support::*;
use crate::world::{World, CANARY};

/// The completions of refused memory accesses, by what was wrong.
const BAD_LKEY: (u8, u32) = (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_BAD_LKEY);
const OTHER_CONTEXT: (u8, u32) = (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OTHER_CONTEXT);
const OUT_OF_BOUNDS: (u8, u32) = (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_OUT_OF_BOUNDS);
const NO_ACCESS: (u8, u32) = (CQE_STATUS_LOCAL_PROTECTION, CQE_DETAIL_ACCESS);

#[test]
fn unknown_and_deregistered_lkeys_are_refused() {
    let mut w = World::new();
    let errors = w.g.stat(STAT_PROTECTION_ERRORS);
    // A receive waits on A's receiver; a refused send must not consume it.
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(77, &[w.rx.buf.sge(0, 4096, w.rx.mr.lkey)])],
    );
    for lkey in [0u32, 0xdead_beef, w.tx.mr.lkey ^ 0x8000_0000] {
        let sge = w.tx.buf.sge(0, 100, lkey);
        let what = format!("send with lkey {lkey:#x}");
        w.refused_send(w.send_gather(5, &[sge]), BAD_LKEY, &what);
    }
    // A bad lkey in the last of several SGEs fails the whole send.
    let sges = [
        w.tx.buf.sge(0, 10, w.tx.mr.lkey),
        w.tx.buf.sge(10, 10, 0x1234_5678),
    ];
    w.refused_send(
        w.send_gather(6, &sges),
        BAD_LKEY,
        "bad lkey in the second SGE",
    );
    // The waiting receive was not consumed by any of them: the next datagram lands in it.
    let c = w.send(inline_wqe(7, LOOPBACK, w.rx.port, b"ok"));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "valid send");
    w.received(77, 2);
    // A receive naming an unknown lkey, and one with lkey 0 in its second SGE.
    let unknown = recv_wqe(8, &[w.rx.buf.sge(0, 4096, 0xdead_beef)]);
    w.refused_receive(unknown, 100, BAD_LKEY, "receive with an unknown lkey");
    let sges = [w.rx.buf.sge(0, 64, w.rx.mr.lkey), w.rx.buf.sge(64, 64, 0)];
    let what = "receive with lkey 0 in its second SGE";
    w.refused_receive(recv_wqe(9, &sges), 100, BAD_LKEY, what);

    // A deregistered region is as unknown as one never registered.
    let ctx = w.tx.ctx;
    let gone = w.g.alloc_buf(4096, 0);
    let mr = w.g.reg_mr(ctx, &gone, MR_ACCESS_LOCAL_WRITE).unwrap();
    w.g.dereg_mr(ctx, mr.lkey).unwrap();
    let wqe = w.send_gather(10, &[gone.sge(0, 10, mr.lkey)]);
    w.refused_send(wqe, BAD_LKEY, "send from a deregistered region");
    assert!(
        w.g.stat(STAT_PROTECTION_ERRORS) >= errors + 7,
        "STAT_PROTECTION_ERRORS counts them"
    );
    w.assert_healthy("bad lkeys");
}

#[test]
fn another_contexts_region_is_refused_for_sends_and_receives() {
    let mut w = World::new();
    let secret = b"context B's secret";
    w.g.buf_write(&w.b_buf, 0, secret);
    let wqe = w.send_gather(1, &[w.b_buf.sge(0, secret.len() as u32, w.b_mr.lkey)]);
    w.refused_send(wqe, OTHER_CONTEXT, "send from B's region");
    w.g.buf_fill(&w.b_buf, CANARY);
    let into_b = recv_wqe(2, &[w.b_buf.sge(0, 4096, w.b_mr.lkey)]);
    w.refused_receive(into_b, 200, OTHER_CONTEXT, "receive into B's region");
    // Mixed: first SGE A's own, second B's. Nothing at all may be written.
    let sges = [
        w.rx.buf.sge(0, 100, w.rx.mr.lkey),
        w.b_buf.sge(0, 100, w.b_mr.lkey),
    ];
    let what = "receive half into B's region";
    w.refused_receive(recv_wqe(3, &sges), 150, OTHER_CONTEXT, what);
    w.assert_healthy("other-context regions");
}

#[test]
fn addresses_outside_the_region_are_refused_including_overflow() {
    let mut w = World::new();
    let b = w.tx.buf.clone();
    let k = w.tx.mr.lkey;
    let end = b.iova + b.len;
    let cases: [(&str, u64, u32); 7] = [
        ("one byte before the region", b.iova - 1, 10),
        ("running past the end", end - 5, 10),
        ("starting at the end", end, 1),
        ("far away", b.iova + (1 << 40), 1),
        ("wrapping around 2^64", u64::MAX - 3, 100),
        ("at u64::MAX", u64::MAX, 1),
        ("longer than the region", b.iova, b.len as u32 + 1),
    ];
    for (i, (what, addr, length)) in cases.iter().enumerate() {
        let sge = Sge {
            addr: *addr,
            length: *length,
            lkey: k,
        };
        let wqe = w.send_gather(i as u64, &[sge]);
        w.refused_send(wqe, OUT_OF_BOUNDS, &format!("send {what}"));
    }
    // Just inside is fine.
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(98, &[w.rx.buf.sge(0, 64, w.rx.mr.lkey)])],
    );
    let last = Sge {
        addr: end - 10,
        length: 10,
        lkey: k,
    };
    let c = w.send(w.send_gather(99, &[last]));
    assert_cqe(
        &c,
        CQE_STATUS_SUCCESS,
        0,
        "send of the region's last 10 bytes",
    );
    w.received(98, 10);

    // Receives: the valid first SGE must not be written either.
    let rb = w.rx.buf.clone();
    let rk = w.rx.mr.lkey;
    let rend = rb.iova + rb.len;
    let rcases: [(&str, u64, u32); 4] = [
        ("running past the end", rend - 50, 100),
        ("before the region", rb.iova - 64, 64),
        ("wrapping around 2^64", u64::MAX - 10, 100),
        ("a 4 GiB length", rb.iova + 200, u32::MAX),
    ];
    for (i, (what, addr, length)) in rcases.iter().enumerate() {
        let sges = [
            rb.sge(0, 100, rk),
            Sge {
                addr: *addr,
                length: *length,
                lkey: rk,
            },
        ];
        let wqe = recv_wqe(100 + i as u64, &sges);
        w.refused_receive(wqe, 150, OUT_OF_BOUNDS, &format!("receive {what}"));
    }
    w.assert_healthy("out-of-bounds SGEs");
}

#[test]
fn receiving_needs_local_write_but_sending_does_not() {
    let mut w = World::new();
    let ctx = w.rx.ctx;
    let ro = w.g.alloc_buf(4096, 0);
    let ro_mr = w.g.reg_mr(ctx, &ro, 0).unwrap();
    // Remote rights do not imply local write.
    let rr = w.g.reg_mr(ctx, &ro, MR_ACCESS_REMOTE_READ).unwrap();
    w.g.buf_fill(&ro, CANARY);
    for (wr_id, mr, what) in [
        (1, ro_mr, "receive into a read-only region"),
        (2, rr, "receive into a remote-read-only region"),
    ] {
        w.refused_receive(
            recv_wqe(wr_id, &[ro.sge(0, 4096, mr.lkey)]),
            64,
            NO_ACCESS,
            what,
        );
        assert!(
            w.g.buf_read(&ro, 0, 4096).iter().all(|&x| x == CANARY),
            "{what}: read-only region written"
        );
    }
    // Sending from it is a local read, always allowed.
    w.g.buf_write(&ro, 0, b"read-only source");
    w.g.post_recv(
        &mut w.rx.qp,
        &[recv_wqe(3, &[w.rx.buf.sge(0, 64, w.rx.mr.lkey)])],
    );
    let c = w.send(w.send_gather(4, &[ro.sge(0, 16, ro_mr.lkey)]));
    assert_cqe(&c, CQE_STATUS_SUCCESS, 0, "send from a read-only region");
    assert_eq!(w.received(3, 16), b"read-only source");
    w.assert_healthy("access rights");
}

#[test]
fn page_lists_outside_guest_ram_are_refused() {
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    let end = RAM_BASE + RAM_SIZE;
    let good = g.alloc_pages(1);
    let outside = [
        0u64,
        0x1000,
        RAM_BASE - PAGE,
        end,
        end + 0x10_0000,
        !0xfffu64,
    ];

    // REG_MR: a page outside RAM, anywhere in the list.
    // A region of `npages` pages listed at `list`.
    let mr_args = |list: u64, npages: u32| {
        let mut a = RegMrArgs::new_zeroed();
        a.page_list = list;
        a.iova = 0x5000_0000;
        a.length = npages as u64 * PAGE;
        a.npages = npages;
        a.access = MR_ACCESS_LOCAL_WRITE;
        a
    };
    for &bad in &outside {
        let a = mr_args(g.page_list(&[good, bad, good]), 3);
        assert_admin_err(
            g.reg_mr_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("MR page {bad:#x}"),
        );
    }
    // The list itself outside RAM or running off its end.
    for list in [0x2000u64, end, end - 8] {
        let a = mr_args(list, 2);
        assert_admin_err(
            g.reg_mr_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("MR page list at {list:#x}"),
        );
    }

    // CREATE_CQ: ring pages and list.
    // A CQ of two pages listed at `list`.
    let cq_args = |list: u64| {
        let mut a = CreateCqArgs::new_zeroed();
        a.page_list = list;
        a.npages = 2;
        a.depth = 128;
        a.vector = 1;
        a
    };
    for &bad in &outside {
        let a = cq_args(g.page_list(&[good, bad]));
        assert_admin_err(
            g.create_cq_args(ctx, &a),
            ADMIN_STATUS_BAD_ADDRESS,
            &format!("CQ ring page {bad:#x}"),
        );
    }
    assert_admin_err(
        g.create_cq_args(ctx, &cq_args(end - 8)),
        ADMIN_STATUS_BAD_ADDRESS,
        "CQ page list off the end of RAM",
    );

    // CREATE_QP: either ring.
    let cq = g.create_cq(ctx, 16).unwrap();
    for &bad in &outside {
        for which in 0..2 {
            let (mut a, ..) = g.qp_args((cq.id, cq.id), (64, 64), QP_TYPE_UDP, 0);
            let list = g.page_list(&[good, bad]);
            if which == 0 {
                a.sq_page_list = list;
            } else {
                a.rq_page_list = list;
            }
            assert_admin_err(
                g.create_qp_args(ctx, &a),
                ADMIN_STATUS_BAD_ADDRESS,
                &format!("{} ring page {bad:#x}", ["SQ", "RQ"][which]),
            );
        }
    }
    let (mut a, ..) = g.qp_args((cq.id, cq.id), (64, 64), QP_TYPE_UDP, 0);
    a.rq_page_list = end;
    assert_admin_err(
        g.create_qp_args(ctx, &a),
        ADMIN_STATUS_BAD_ADDRESS,
        "RQ page list outside RAM",
    );
    // None of it leaked a resource or broke the context.
    let mut ep = g.udp_endpoint_in(ctx, UNSPECIFIED, 0, 8, 16, 64);
    g.post_recv(&mut ep.qp, &[recv_wqe(1, &[ep.buf.sge(0, 64, ep.mr.lkey)])]);
    g.post_send(&mut ep.qp, &[inline_wqe(2, LOOPBACK, ep.port, b"self")]);
    assert_cqe(
        &g.wait_cqe(&mut ep.scq),
        CQE_STATUS_SUCCESS,
        0,
        "send to itself",
    );
    assert_eq!(g.wait_cqe(&mut ep.rcq).byte_len, 4);
}

/// Page lists are the host memory a guest can ask the most of (8 bytes a page, the same
/// page as often as it likes): the regions of one function hold at most
/// `DEFAULT_REGION_PAGES` pages in all, and a deregistered region gives its pages back.
#[test]
fn the_pages_regions_hold_are_bounded_per_function() {
    use qpip_device::engine::DEFAULT_REGION_PAGES;
    let mut g = FakeGuest::new();
    let ctx = g.create_ctx().unwrap();
    // One guest page, named MAX_MR_PAGES times: a region of 256 MiB in 4 KiB of RAM.
    let page = g.alloc_pages(1);
    let list = g.page_list(&vec![page; MAX_MR_PAGES as usize]);
    let len = MAX_MR_PAGES as u64 * PAGE;
    let args = |iova: u64| mr_body(list, MAX_MR_PAGES, 0, iova, len, MR_ACCESS_LOCAL_WRITE);
    let fit = DEFAULT_REGION_PAGES / MAX_MR_PAGES as u64;
    let mut keys = Vec::new();
    for i in 0..fit {
        let mr = g
            .reg_mr_args(ctx, &args(i << 40))
            .expect("within the budget");
        keys.push(mr.lkey);
    }
    assert_eq!(
        g.reg_mr_args(ctx, &args(fit << 40)).map(|m| m.lkey),
        Err(ADMIN_STATUS_NO_RESOURCES),
        "{fit} regions of {MAX_MR_PAGES} pages fill the function's budget"
    );
    g.dereg_mr(ctx, keys.pop().unwrap()).unwrap();
    g.reg_mr_args(ctx, &args(fit << 40))
        .expect("a deregistered region's pages are free again");
}

/// Memory keys come from the OS's randomness through a keyed hash: two devices started
/// alike hand out unrelated keys, the same memory registered again gets a new key, and a
/// key once deregistered is not handed out again (not within the next
/// `engine::secrets::RECENT_KEYS` registrations).
#[test]
fn memory_keys_are_fresh_per_device_and_per_registration() {
    let keys = |g: &mut FakeGuest, n: usize| -> Vec<u32> {
        let ctx = g.create_ctx().unwrap();
        let b = g.alloc_buf(4096, 0);
        (0..n)
            .map(|_| {
                let mr = g.reg_mr(ctx, &b, MR_ACCESS_LOCAL_WRITE).unwrap();
                g.dereg_mr(ctx, mr.lkey).unwrap();
                mr.lkey
            })
            .collect()
    };
    let mut a = FakeGuest::new();
    let mut b = FakeGuest::new();
    let (ka, kb) = (keys(&mut a, 200), keys(&mut b, 200));
    let all: std::collections::HashSet<u32> = ka.iter().chain(&kb).copied().collect();
    assert_eq!(
        all.len(),
        400,
        "no key twice, within a device or across the two"
    );
    assert!(!all.contains(&0));
    // Not a counter nor a constant stride: successive keys are not a fixed step apart.
    let steps: std::collections::HashSet<u32> =
        ka.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    assert!(steps.len() > 190, "{} distinct steps", steps.len());
}
