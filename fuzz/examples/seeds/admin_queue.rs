//! Seeds of the `admin_queue` target: bring-up and structured commands.

use std::path::Path;

use qpip_abi::admin::*;
use qpip_abi::pci::DOORBELL_PAGES;
use qpip_fuzz::{Seed, ADMIN_OPCODES};

use crate::save;

// ---- admin_queue ------------------------------------------------------------------------------
// top level: kind 0 = structured command; 6 = settle; 8 = run without taking completions.
// structured: opcode index, ctx choice, body fields, handle choice (not for CREATE_CTX and
// the queries), noise choice (2 = none).

fn op(s: &mut Seed, opcode: u16) {
    s.u8(0); // structured
    s.u8(ADMIN_OPCODES.iter().position(|&o| o == opcode).unwrap() as u8);
    s.u8(0).u8(0); // ctx: the newest context
}

/// Handle choice: 0 = the `back`-th newest object id; 2 = newest lkey.
fn newest_id(s: &mut Seed, back: u8) {
    s.u8(0).u8(back);
}

fn no_noise(s: &mut Seed) {
    s.u8(2);
}

/// CREATE_CTX with doorbell page choice `choice` and its fields, no noise (no handle).
fn create_ctx_with(s: &mut Seed, choice: u8, fields: &[u8]) {
    op(s, ADMIN_OP_CREATE_CTX);
    s.u8(choice).bytes(fields);
    no_noise(s);
}

/// CREATE_CTX on the first pool page no live context uses (page choice 0, index 0).
fn create_ctx(s: &mut Seed) {
    create_ctx_with(s, 0, &[0]);
}

/// CREATE_CQ body: page list choice 0 (one page), depth 1 << 6 = 64 (one page of CQEs),
/// npages choice 0 (= 1), vector 1.
fn create_cq(s: &mut Seed) {
    op(s, ADMIN_OP_CREATE_CQ);
    s.u8(0); // page list
    s.u8(0).u8(6); // depth
    s.u8(0); // npages
    s.u8(1); // vector
    newest_id(s, 0); // handle (unused)
    no_noise(s);
}

/// CREATE_QP body: both rings on page list 0, send and receive CQ = the `cq_back`-th newest
/// id, depths 1 << 5 = 32 (one page of WQEs), one page each.
fn create_qp(s: &mut Seed, cq_back: u8, qp_type: u8, framing: u8) {
    op(s, ADMIN_OP_CREATE_QP);
    s.u8(0).u8(0); // ring page lists
    newest_id(s, cq_back); // send CQ
    s.u8(1); // receive CQ: the same
    s.u8(0).u8(5).u8(0).u8(5); // depths
    s.u8(0).u8(0); // npages: 1 << 0
    s.u8(qp_type).u8(framing);
    newest_id(s, 0); // handle (unused)
    no_noise(s);
}

fn settle(s: &mut Seed) {
    s.u8(6);
}

pub(crate) fn admin_queue(dir: &Path) {
    let mut s = Seed::default();
    create_ctx(&mut s);
    create_cq(&mut s);
    settle(&mut s);
    create_qp(&mut s, 0, QP_TYPE_UDP, 0);
    settle(&mut s);
    // REG_MR: page list choice 1 (two pages), offset choice 2 (0x800), iova page 3, npages
    // choice 1 (2), length choice 0 (the rest of the pages), access 1 (LOCAL_WRITE), iova
    // kept (1).
    op(&mut s, ADMIN_OP_REG_MR);
    s.u8(1).u8(2).u8(3).u8(1).u8(0).u8(1).u8(1);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    // BIND the QP (newest id) to [::]:7: address choice 1 (::) with suffix 0, port choice 1,
    // flags choice 2 (sharing the port).
    op(&mut s, ADMIN_OP_BIND);
    s.u8(1).u8(0).u8(1).u8(2);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    // QUERY_DEVICE and QUERY_STATS into the query page (address choice 6), lengths 128, 512.
    op(&mut s, ADMIN_OP_QUERY_DEVICE);
    s.u8(6).u8(0).u8(0);
    no_noise(&mut s);
    op(&mut s, ADMIN_OP_QUERY_STATS);
    s.u8(6).u8(16).u8(1);
    no_noise(&mut s);
    settle(&mut s);
    // Destroy the QP, the CQ (one id further back), the context.
    op(&mut s, ADMIN_OP_DESTROY_QP);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    op(&mut s, ADMIN_OP_DESTROY_CQ);
    newest_id(&mut s, 1);
    no_noise(&mut s);
    op(&mut s, ADMIN_OP_DESTROY_CTX);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    settle(&mut s);
    save(dir, "udp-objects", &s);

    let mut s = Seed::default();
    // Two TCP QPs: one offered to a listener (ACCEPT waits), one connecting (CONNECT waits);
    // the listener destroyed (ACCEPT cancelled), the context destroyed (CONNECT cancelled).
    create_ctx(&mut s);
    create_cq(&mut s);
    settle(&mut s);
    create_qp(&mut s, 0, QP_TYPE_TCP, FRAMING_MESSAGE); // ids: CQ
    settle(&mut s);
    create_qp(&mut s, 1, QP_TYPE_TCP, FRAMING_STREAM); // ids: CQ, QP
    settle(&mut s);
    // LISTEN on [::]:80 (port choice 3 = any, 80), backlog choice 1 (16).
    op(&mut s, ADMIN_OP_LISTEN);
    s.u8(1).u8(0).u8(3).u16(80).u8(1);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    settle(&mut s);
    // ACCEPT: the QP one back from the listener (ids: CQ, QP, QP, listener) onto the
    // listener (newest).
    op(&mut s, ADMIN_OP_ACCEPT);
    newest_id(&mut s, 1);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    // CONNECT the other QP to ::1 (address choice 0, suffix 0) port 80.
    op(&mut s, ADMIN_OP_CONNECT);
    s.u8(0).u8(0).u8(3).u16(80);
    newest_id(&mut s, 2);
    no_noise(&mut s);
    settle(&mut s);
    op(&mut s, ADMIN_OP_DESTROY_LISTENER);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    settle(&mut s);
    op(&mut s, ADMIN_OP_DESTROY_CTX);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    settle(&mut s);
    save(dir, "tcp-rendezvous", &s);

    // The completion ring left full (runs without taking completions), then drained.
    let mut s = Seed::default();
    for _ in 0..20 {
        create_ctx(&mut s);
        s.u8(8);
    }
    settle(&mut s);
    save(dir, "full-completion-ring", &s);

    // Doorbell pages: a good one, then another live context's (choice 7), unaligned (8),
    // each address outside RAM or across its end (9), a page of RAM outside the pool (10:
    // page 2, the query page); the first context destroyed, its page taken again.
    let mut s = Seed::default();
    create_ctx(&mut s);
    settle(&mut s);
    create_ctx_with(&mut s, 7, &[0]);
    create_ctx_with(&mut s, 8, &[1, 0x08, 0x00]);
    for alt in 0..6 {
        create_ctx_with(&mut s, 9, &[alt]);
    }
    create_ctx_with(&mut s, 10, &[2]);
    settle(&mut s);
    // DESTROY_CTX: the context choice picks the second newest (the first context).
    s.u8(0);
    s.u8(ADMIN_OPCODES
        .iter()
        .position(|&o| o == ADMIN_OP_DESTROY_CTX)
        .unwrap() as u8);
    s.u8(0).u8(1);
    newest_id(&mut s, 0);
    no_noise(&mut s);
    settle(&mut s);
    create_ctx(&mut s);
    settle(&mut s);
    save(dir, "doorbell-pages", &s);

    // Every context in use (one doorbell page each), then one more: NO_RESOURCES, with a
    // good page and with a bad one.
    let mut s = Seed::default();
    for _ in 0..DOORBELL_PAGES {
        create_ctx(&mut s);
    }
    create_ctx(&mut s);
    create_ctx_with(&mut s, 8, &[0, 0x10, 0x00]);
    settle(&mut s);
    save(dir, "all-contexts", &s);
}
