//! Writes the seed corpora (fuzz/corpus/<target>/seed-*): a few valid inputs per target, so
//! the fuzzers start from a working bring-up, working commands and working traffic instead of
//! having to discover them. Each seed is encoded with `qpip_fuzz::Seed` in the same order the
//! target's decoder reads it (the comments name the decoder's choices).
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --example seeds -- fuzz/corpus
//!
//! (`./qpip fuzz --seeds` does this.) Seeds are small and deterministic, and are committed.

use std::path::{Path, PathBuf};

use qpip_abi::admin::*;
use qpip_abi::pci::DOORBELL_PAGES;
use qpip_abi::regs::*;
use qpip_abi::wqe::*;
use qpip_fuzz::frames::{self as fr, AppCall, IcmpOp, Num, Op, TcpOp};
use qpip_fuzz::{Seed, ADMIN_OPCODES};
use qpip_testkit::{
    cmd, cq_body, create_ctx_cmd, inline_wqe, mr_body, qp_body, query_cmd, recv_wqe, send_wqe,
    LOOPBACK,
};
use zerocopy::{FromZeros, IntoBytes};

fn main() {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    config_space(&out.join("config_space"));
    control_bar(&out.join("control_bar"));
    admin_command(&out.join("admin_command"));
    wqe(&out.join("wqe"));
    admin_queue(&out.join("admin_queue"));
    doorbells(&out.join("doorbells"));
    frames(&out.join("frames"));
    vnet_frames(&out.join("vnet_frames"));
    iwarp_mpa(&out.join("iwarp_mpa"));
    iwarp_ddp_rdmap(&out.join("iwarp_ddp_rdmap"));
    iwarp_placement(&out.join("iwarp_placement"));
    dereg_mid_transfer(&out.join("dereg_mid_transfer"));
}

fn save(dir: &Path, name: &str, seed: &Seed) {
    std::fs::create_dir_all(dir).expect("create corpus folder");
    let path = dir.join(format!("seed-{name}"));
    std::fs::write(&path, &seed.0).expect("write seed");
    println!("{} ({} bytes)", path.display(), seed.0.len());
}

// ---- config_space: op = kind (0 read, 1 write, 2 aligned write, 3 reset) ------------------

fn config_space(dir: &Path) {
    let mut s = Seed::default();
    // QEMU reads the whole space at attach: read, offset kind 0 (u8) = 0, 255 bytes.
    s.u8(0).u8(0).u8(0).u8(255);
    save(dir, "attach-read", &s);

    let mut s = Seed::default();
    // BAR sizing: all ones into each BAR, read back; width index 2 = 4 bytes.
    for bar in 0..6u8 {
        s.u8(2).u8(0x10 + 4 * bar).u8(2).u32(0xffff_ffff);
        s.u8(0).u8(0).u8(0x10 + 4 * bar).u8(4);
    }
    save(dir, "bar-sizing", &s);

    let mut s = Seed::default();
    // Memory + bus master on, MSI-X enabled then masked, then a reset.
    s.u8(2).u8(0x04).u8(1).u32(0x0006);
    s.u8(2).u8(0x42).u8(1).u32(0x8000);
    s.u8(2).u8(0x42).u8(1).u32(0xc000);
    s.u8(1).u8(0).u8(0x3c).u8(1).u8(0x0b); // interrupt line, byte write
    s.u8(3);
    save(dir, "enable-and-reset", &s);
}

// ---- control_bar ----------------------------------------------------------------------------

/// Region choice 1 = control BAR; offset kind 0 = register file.
fn ctrl_write(s: &mut Seed, reg: u32, value: u32) {
    s.u8(2).u8(1).u8(0).u8(reg as u8).u32(value);
}

fn ctrl_read(s: &mut Seed, reg: u32) {
    s.u8(0).u8(1).u8(0).u8(reg as u8).u8(4);
}

fn control_bar(dir: &Path) {
    let mut s = Seed::default();
    // A driver's probe: identity, version, enable, scratch, reset through REG_CONTROL.
    ctrl_read(&mut s, REG_IDENT);
    ctrl_read(&mut s, REG_VERSION);
    ctrl_write(&mut s, REG_CONTROL, CONTROL_ENABLE);
    ctrl_write(&mut s, REG_SCRATCH, 0x5150);
    ctrl_read(&mut s, REG_STATUS);
    ctrl_write(&mut s, REG_CONTROL, CONTROL_RESET);
    ctrl_read(&mut s, REG_RESET_COUNT);
    save(dir, "probe", &s);

    let mut s = Seed::default();
    // Guest RAM mapped, an admin queue set up in it with one CREATE_CTX command (doorbell
    // page: the third page of RAM), the admin doorbell rung, a kick, then a function reset.
    ctrl_write(&mut s, REG_CONTROL, CONTROL_ENABLE);
    s.u8(8); // map RAM at 0x1_0000_0000
    let c = create_ctx_cmd(0x1_0000_2000);
    s.u8(9).u16(0).u8(64).bytes(c.as_bytes()); // RAM write at offset 0
    ctrl_write(&mut s, REG_ADMIN_SQ_BASE_LO, 0);
    ctrl_write(&mut s, REG_ADMIN_SQ_BASE_HI, 1);
    ctrl_write(&mut s, REG_ADMIN_CQ_BASE_LO, 0x1000);
    ctrl_write(&mut s, REG_ADMIN_CQ_BASE_HI, 1);
    ctrl_write(&mut s, REG_ADMIN_DEPTH, 16);
    ctrl_read(&mut s, REG_STATUS);
    ctrl_write(&mut s, REG_ADMIN_SQ_TAIL, 1);
    s.u8(2).u8(1).u8(1).u8(0).u32(1); // kick: offset kind 1 = kick page
    ctrl_write(&mut s, REG_ADMIN_CQ_HEAD, 1);
    s.u8(7); // reset
    save(dir, "admin-queue", &s);

    let mut s = Seed::default();
    // MSI-X table entry written and read back, interrupt test, out-of-BAR and odd accesses.
    s.u8(1).u8(1).u8(2).u16(8).u8(16).bytes(&[0x11; 16]); // table: offset kind 2
    s.u8(0).u8(1).u8(2).u16(8).u8(16);
    ctrl_write(&mut s, REG_IRQ_TEST, 3);
    s.u8(0).u8(1).u8(3).u8(2).u8(8); // 8 bytes crossing the end of the BAR
    s.u8(0).u8(2).u8(0).u8(0x40).u8(4); // BAR2 read (a region the function lacks)
    s.u8(2).u8(2).u8(0).u8(0x40).u32(1); // BAR2 write
    s.u8(4).u64(0xfe00_0000).u64(0x4000).u64(0).u32(3); // fd-less DMA map
    s.u8(5).u64(0xfe00_0000).u64(0x4000).u32(0);
    s.u8(6).u32(0).u32(0); // interrupt teardown
    save(dir, "msix-and-odd-accesses", &s);

    let mut s = Seed::default();
    // BAR sizing through config space (region choice 0, offset kind 0): all ones into each
    // BAR, read back (BAR0 answers its size, the others stay 0).
    for bar in 0..6u8 {
        s.u8(2).u8(0).u8(0).u8(0x10 + 4 * bar).u32(0xffff_ffff);
        s.u8(0).u8(0).u8(0).u8(0x10 + 4 * bar).u8(4);
    }
    save(dir, "bar-sizing", &s);
}

// ---- admin_command: a raw 64-byte command ---------------------------------------------------

fn admin_command(dir: &Path) {
    // A CQ of 64 entries and a QP of 32 on one page each; an MR of a page's length from 0x80
    // into its first page (so on two).
    let cq = cq_body(0x2000, 64, 1);
    let qp = qp_body(
        (0x3000, 0x4000),
        (2, 2),
        (32, 32),
        QP_TYPE_TCP,
        FRAMING_MESSAGE,
    );
    let mr = mr_body(
        0x5000,
        2,
        0x80,
        0x7f00_0000_0080,
        4096,
        MR_ACCESS_LOCAL_WRITE,
    );
    let mut bind = BindArgs::new_zeroed();
    bind.port = 7;
    let mut listen = ListenArgs::new_zeroed();
    listen.port = 80;
    listen.backlog = 16;
    let mut connect = ConnectArgs::new_zeroed();
    connect.addr[15] = 1;
    connect.port = 80;
    let mut addr = AddrArgs::new_zeroed();
    addr.addr = [0xfd, 0x51, 0x50, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
    addr.prefix_len = 64;
    let mut mac = SetMacArgs::new_zeroed();
    mac.mac = [0x02, 0, 0, 0, 0, 7];
    let cmds = [
        (
            "query-device",
            query_cmd(ADMIN_OP_QUERY_DEVICE, 0x1000, 128),
        ),
        ("set-mac", cmd(ADMIN_OP_SET_MAC, 0, 0, &mac)),
        ("add-addr", cmd(ADMIN_OP_ADD_ADDR, 0, 0, &addr)),
        ("create-ctx", create_ctx_cmd(0x6000)),
        ("create-cq", cmd(ADMIN_OP_CREATE_CQ, 1, 0, &cq)),
        ("create-qp", cmd(ADMIN_OP_CREATE_QP, 1, 0, &qp)),
        ("reg-mr", cmd(ADMIN_OP_REG_MR, 1, 0, &mr)),
        ("bind", cmd(ADMIN_OP_BIND, 1, 3, &bind)),
        ("listen", cmd(ADMIN_OP_LISTEN, 1, 0, &listen)),
        ("connect", cmd(ADMIN_OP_CONNECT, 1, 3, &connect)),
    ];
    for (name, c) in cmds {
        let mut s = Seed::default();
        s.bytes(c.as_bytes());
        save(dir, name, &s);
    }
}

// ---- wqe: a raw 128-byte slot ---------------------------------------------------------------

fn wqe(dir: &Path) {
    let mut s = Seed::default();
    s.bytes(&inline_wqe(1, LOOPBACK, 7, b"hello"));
    save(dir, "inline-send", &s);

    let sges = [
        Sge {
            addr: 0x7f00_0000_0000,
            length: 100,
            lkey: 0x1234,
        },
        Sge {
            addr: 0x7f00_0000_1000,
            length: 200,
            lkey: 0x1234,
        },
    ];
    let mut s = Seed::default();
    s.bytes(&send_wqe(2, LOOPBACK, 9, &sges));
    save(dir, "gather-send", &s);

    let mut s = Seed::default();
    s.bytes(&recv_wqe(3, &sges));
    save(dir, "recv", &s);
}

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

fn admin_queue(dir: &Path) {
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
    // BIND the QP (newest id) to [::]:7: address choice 1 (::) with suffix 0, port choice 1.
    op(&mut s, ADMIN_OP_BIND);
    s.u8(1).u8(0).u8(1);
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

// ---- doorbells --------------------------------------------------------------------------------
// top level: 0 send, 2 recv, 3 ring QP, 4 ring CQ, 5 raw word, 6 page fill, 7 run,
// 9 consume, 11 admin, 12 data. QPs: 0 = UDP :7 (ctx A), 1 = UDP ::1:9 (ctx A), 2 = TCP
// (ctx A), 3 = UDP :11 (ctx B). MRs: 0 = A writable, 1 = A read-only, 2 = B writable.

/// A receive WQE with one SGE of `len` bytes at offset 0 of MR `mr`, rung at once.
fn post_recv(s: &mut Seed, qp: u8, mr: u8, len: u16) {
    s.u8(2).u8(qp);
    s.u8(1); // structured
    s.u8(2); // opcode: the right one
    s.u8(1); // one SGE
    s.u8(mr).u8(0).u8(0).u16(0).u8(0).u16(len);
    s.u8(1); // no noise
    s.u8(1); // ring
}

/// A send WQE from QP `qp` to ::1 port choice `port`, one SGE from MR `mr`, rung at once.
fn post_send(s: &mut Seed, qp: u8, port: u8, mr: u8, len: u16) {
    s.u8(0).u8(qp);
    s.u8(1).u8(2);
    s.u8(0); // imm
    s.u8(0); // ::1
    s.u8(port);
    s.u8(1); // not inline
    s.u8(1); // one SGE
    s.u8(mr).u8(0).u8(0).u16(0).u8(0).u16(len);
    s.u8(1);
    s.u8(1);
}

fn post_inline(s: &mut Seed, qp: u8, port: u8, data: &[u8]) {
    s.u8(0).u8(qp);
    s.u8(1).u8(2);
    s.u8(0).u8(0).u8(port);
    s.u8(0).u8(data.len() as u8).bytes(data); // inline
    s.u8(1);
    s.u8(1);
}

fn doorbells(dir: &Path) {
    let mut s = Seed::default();
    // Datagrams from QP 1 to QP 0 (port 7) and back (QP 1 is on ::1 port 9), gathered from
    // the read-only region and inline, received into the writable one; CQs armed; all
    // completions consumed.
    s.u8(12).u8(1).u16(0).u8(32).bytes(&[0x5a; 32]); // data into the read-only MR
    post_recv(&mut s, 0, 0, 512);
    post_recv(&mut s, 1, 0, 512);
    s.u8(4).u8(0).u8(0); // arm CQ 0
    s.u8(4).u8(1).u8(0); // arm CQ 1
    post_send(&mut s, 1, 0, 1, 32);
    post_inline(&mut s, 0, 1, b"reply");
    s.u8(7);
    s.u8(9).u8(0).u8(8);
    s.u8(9).u8(1).u8(8);
    s.u8(7);
    save(dir, "udp-loopback", &s);

    let mut s = Seed::default();
    // Protection: a send naming the other context's region, a receive into the read-only
    // region, a send to a non-local address, a TCP QP sending unconnected.
    post_recv(&mut s, 0, 1, 64);
    post_send(&mut s, 1, 0, 2, 16);
    post_send(&mut s, 1, 0, 0, 16);
    post_send(&mut s, 2, 0, 0, 16);
    s.u8(7);
    s.u8(9).u8(0).u8(8);
    s.u8(9).u8(1).u8(8);
    save(dir, "protection", &s);

    let mut s = Seed::default();
    // A doorbell far beyond the ring (the QP goes to error and flushes), a stray word in the
    // page, a whole page of 0xff, a destroyed QP.
    post_recv(&mut s, 0, 0, 64);
    s.u8(3).u8(0).u8(1).u8(2).u8(200); // SQ tail + 200
    s.u8(7);
    s.u8(5).u8(0).u16(0x7fc).u32(0xdead_beef).u8(1);
    s.u8(6).u8(2).u16(4096).bytes(&[0xff; 4096]);
    s.u8(7);
    s.u8(11).u8(0).u8(1); // destroy QP 1
    s.u8(7);
    save(dir, "wild-doorbells", &s);
}

// ---- frames: a sequence of qpip_fuzz::frames::Op ----------------------------------------------

fn ops(dir: &Path, name: &str, ops: &[Op]) {
    let mut s = Seed::default();
    for op in ops {
        op.encode(&mut s);
    }
    save(dir, name, &s);
}

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;

fn est(flags: u8, len: u16) -> TcpOp {
    TcpOp::to_established(flags, len)
}

fn frames(dir: &Path) {
    // A passive open with every option, data both ways, a close.
    let mut syn = est(SYN, 0);
    syn.target = 1;
    syn.seq = Num::Any(0x1234_5678);
    syn.ack = Num::Any(0);
    syn.mss = Some(1440);
    syn.wscale = Some(7);
    syn.sack_permitted = true;
    syn.timestamps = Some((100, 0));
    let listener = |flags: u8, len: u16| {
        let mut t = est(flags, len);
        t.target = 1;
        t.timestamps = Some((101, 0));
        t
    };
    ops(
        dir,
        "passive-open-data-close",
        &[
            Op::Tcp(syn.clone()),
            Op::Tcp(listener(ACK, 0)),
            Op::Tcp(listener(ACK | PSH, 1000)),
            Op::App {
                which: 1,
                call: AppCall::Read(4000),
            },
            Op::App {
                which: 1,
                call: AppCall::Send(5000),
            },
            Op::Wait {
                ms: 50,
                long: false,
            },
            Op::Tcp(listener(ACK, 0)),
            Op::Tcp(listener(ACK | FIN, 0)),
            Op::App {
                which: 1,
                call: AppCall::Close,
            },
            Op::Tcp(listener(ACK, 0)),
            Op::Wait {
                ms: 5000,
                long: false,
            },
        ],
    );
    // The established connection: data out of order then in order, a transfer with
    // duplicate ACKs carrying SACK blocks (fast retransmit), then a timeout.
    let mut ooo = est(ACK | PSH, 1000);
    ooo.seq = Num::Near(1000);
    let mut dup = est(ACK, 0);
    dup.sack = vec![(1428, 2856)];
    ops(
        dir,
        "established-sack-recovery",
        &[
            Op::Tcp(ooo),
            Op::Tcp(est(ACK, 1000)),
            Op::App {
                which: 0,
                call: AppCall::Send(20000),
            },
            Op::Tcp(dup.clone()),
            Op::Tcp(dup.clone()),
            Op::Tcp(dup),
            Op::Wait {
                ms: 3000,
                long: false,
            },
            Op::Tcp(est(ACK, 0)),
        ],
    );
    // Resets and SYNs at a live connection: in window (challenge), exact, and a SYN.
    let mut rst_near = est(RST, 0);
    rst_near.seq = Num::Near(100);
    let mut syn_in = est(SYN, 0);
    syn_in.seq = Num::Near(10);
    ops(
        dir,
        "resets-and-challenges",
        &[
            Op::Tcp(rst_near),
            Op::Tcp(syn_in),
            Op::Tcp(est(RST, 0)),
            Op::Connect { port: 9 },
            Op::Tcp({
                let mut t = est(RST | ACK, 0);
                t.target = 2;
                t.ports = (9, 2001);
                t
            }),
        ],
    );
    // Neighbour discovery, echo, UDP to a closed port, and the same echo as a raw frame.
    let echo = fr::frame_from(
        fr::PEER_MAC,
        fr::PEER,
        fr::OUR,
        58,
        &qpip_device::net::wire::icmpv6(
            &fr::PEER,
            &fr::OUR,
            128,
            0,
            &qpip_device::net::wire::echo_body(1, 1, b"ping"),
        ),
    );
    ops(
        dir,
        "ndp-echo-udp",
        &[
            Op::Icmp(IcmpOp::Solicit {
                target_ours: true,
                with_sllao: true,
                multicast: true,
            }),
            Op::Icmp(IcmpOp::Advert {
                solicited: true,
                override_: true,
                from_peer2: true,
            }),
            Op::Icmp(IcmpOp::Echo {
                id: 7,
                seq: 1,
                len: 56,
            }),
            Op::Udp {
                dport: 9,
                len: 20,
                unreachable: true,
            },
            Op::Raw(echo),
            Op::Tcp({
                let mut t = est(ACK | PSH, 100);
                t.from_peer2 = true;
                t.target = 2;
                t.ports = (7000, 7001);
                t
            }),
            Op::Wait {
                ms: 4000,
                long: false,
            },
        ],
    );
    // Segments in fragments, in and out of order, and a corrupted one.
    let mut frag = est(ACK | PSH, 1200);
    frag.frag_units = 64;
    let mut frag_rev = est(ACK | PSH, 1200);
    frag_rev.frag_units = 30;
    frag_rev.frag_reverse = true;
    let mut bad = est(ACK | PSH, 100);
    bad.corrupt = 30;
    ops(
        dir,
        "fragments-and-corruption",
        &[
            Op::Tcp(frag),
            Op::Tcp(frag_rev),
            Op::Tcp(bad),
            Op::Tcp(est(ACK, 0)),
        ],
    );
    // Data in flight, then a packet too big: resent in smaller segments.
    ops(
        dir,
        "packet-too-big",
        &[
            Op::App {
                which: 0,
                call: AppCall::Send(8000),
            },
            Op::Icmp(IcmpOp::TooBig { mtu: 1280 }),
            Op::Tcp(est(ACK, 0)),
            Op::Icmp(IcmpOp::Error { ty: 1, code: 4 }),
            Op::Wait {
                ms: 300,
                long: false,
            },
        ],
    );
    // SYN flood beyond the backlog (cookies), the listener going and coming back, an
    // active open that times out, keepalive, and TIME-WAIT over long waits.
    let mut flood = Vec::new();
    for p in 0..4u8 {
        let mut t = syn.clone();
        t.peer_port = p;
        flood.push(Op::Tcp(t));
    }
    flood.push(Op::Tcp({
        let mut t = syn.clone();
        t.target = 2;
        t.ports = (40100, 80);
        t
    }));
    flood.push(Op::Relisten { cookies: false });
    flood.push(Op::Relisten { cookies: true });
    flood.push(Op::Connect { port: 443 });
    flood.push(Op::App {
        which: 0,
        call: AppCall::Abort,
    });
    flood.push(Op::Wait {
        ms: 60000,
        long: true,
    });
    ops(dir, "flood-and-long-waits", &flood);
}

// ---- vnet_frames: steps of (bool: an Op of `frames`, else header, length, frame, size) -----

fn vnet_frames(dir: &Path) {
    use qpip_device::backend::vnet::{VnetHdr, F_NEEDS_CSUM, GSO_TCPV6};
    use qpip_device::net::tcp::wire as tw;
    // A segment of 3000 bytes to the listener's port as GRO hands it over: larger than the
    // MTU, its checksum partial (the field holds the pseudo-header's sum).
    let h = tw::Header {
        src_port: 40000,
        dst_port: fr::LISTEN_PORT,
        seq: 1,
        flags: tw::flags::ACK,
        window: 1000,
        ..tw::Header::default()
    };
    let seg = tw::build(&fr::PEER, &fr::OUR, &h, &[0x5a; 3000]);
    let mut frame = fr::frame_from(fr::PEER_MAC, fr::PEER, fr::OUR, 6, &seg);
    let partial = qpip_device::backend::vnet::partial_tcp6_checksum(&fr::PEER, &fr::OUR, seg.len());
    frame[54 + 16..54 + 18].copy_from_slice(&partial);
    let vh = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV6,
        hdr_len: 74,
        gso_size: 1428,
        csum_start: 54,
        csum_offset: 16,
    };
    let mut s = Seed::default();
    s.u8(0)
        .bytes(&vh.to_bytes())
        .u16(frame.len() as u16)
        .bytes(&frame)
        .u16(1428);
    save(dir, "gro-partial-checksum", &s);
    // The same with a header that points outside the frame.
    let bad = VnetHdr {
        csum_start: 0xfff0,
        ..vh
    };
    let mut s = Seed::default();
    s.u8(0)
        .bytes(&bad.to_bytes())
        .u16(frame.len() as u16)
        .bytes(&frame)
        .u16(0);
    save(dir, "bad-checksum-position", &s);
}

// ---- iwarp_mpa: control byte, max ULPDU, chunk sizes, then the stream ---------------------

/// One segment of each RDMAP message kind, as ULPDUs.
fn iwarp_messages() -> Vec<Vec<u8>> {
    use qpip_device::net::iwarp::wire::rdmap::{self, Body, Message, Opcode, ReadRequest};
    use qpip_device::net::iwarp::wire::terminate::{
        DdpTaggedCode, MpaCode, RdmapCode, RdmapType, TermError, Terminate,
    };
    let rr = ReadRequest {
        sink_stag: 0x100,
        sink_to: 0x2000,
        size: 4096,
        source_stag: 0x200,
        source_to: 0x8000,
    };
    let write = rdmap::write(0x200, 0x8000, true, b"written");
    let mut failed_write = Vec::new();
    write.write(&mut failed_write);
    let mut failed_read = Vec::new();
    rdmap::read_request(1, rr).write(&mut failed_read);
    let protection = TermError::Rdmap(RdmapType::RemoteProtection, RdmapCode::InvalidStag);
    // RFC 7306's Immediate Data, which siw does not speak.
    let immediate = Message {
        opcode: Opcode::ImmediateData,
        header: rdmap::untagged_header(Opcode::ImmediateData, 0, 3, 0, true),
        body: Body::Immediate([1, 2, 3, 4, 5, 6, 7, 8]),
    };
    let messages = [
        rdmap::send(Opcode::Send, 0, 1, 0, false, b"first half "),
        rdmap::send(Opcode::Send, 0, 1, 11, true, b"second half"),
        rdmap::send(Opcode::SendInvalidate, 0x300, 2, 0, true, b"and invalidate"),
        rdmap::send(Opcode::SendSeInvalidate, 0x301, 3, 0, true, b""),
        write,
        rdmap::read_request(1, rr),
        rdmap::read_response(0x100, 0x2000, true, &[0xab; 100]),
        rdmap::terminate(
            1,
            Terminate::about(
                TermError::DdpTagged(DdpTaggedCode::InvalidStag),
                &failed_write,
            ),
        ),
        rdmap::terminate(1, Terminate::about(protection, &failed_read)),
        rdmap::terminate(1, Terminate::about(TermError::Mpa(MpaCode::Crc), &[])),
        immediate,
    ];
    messages
        .iter()
        .map(|m| {
            let mut b = Vec::new();
            m.write(&mut b);
            b
        })
        .collect()
}

fn iwarp_mpa(dir: &Path) {
    use qpip_device::net::iwarp::wire::fpdu;
    use qpip_device::net::iwarp::wire::mpa::{self, EnhancedBlock, Flags, Kind};
    let fpdus = |crc: bool| {
        let mut s = Vec::new();
        for u in iwarp_messages() {
            fpdu::build(&u, crc, &mut s).unwrap();
        }
        s
    };
    // siw's request (revision 2, IRD/ORD, read RTR), then FPDUs without CRCs, in 1460-byte
    // pieces.
    let block = EnhancedBlock {
        ird: 16,
        ord: 16,
        read_rtr: true,
        ..EnhancedBlock::default()
    };
    let req = mpa::build(Kind::Request, Flags::default(), 2, Some(&block), b"rping").unwrap();
    let mut s = Seed::default();
    s.u8(0)
        .u16(1434)
        .u8(1)
        .u8(255)
        .bytes(&req)
        .bytes(&fpdus(false));
    save(dir, "enhanced-request-then-fpdus", &s);
    // A revision 1 reply with CRCs, FPDUs with CRCs in odd pieces.
    let crc = Flags {
        crc: true,
        ..Flags::default()
    };
    let rep = mpa::build(Kind::Reply, crc, 1, None, &[]).unwrap();
    let mut s = Seed::default();
    s.u8(3)
        .u16(1434)
        .u8(3)
        .u8(0)
        .u8(6)
        .u8(12)
        .bytes(&rep)
        .bytes(&fpdus(true));
    save(dir, "crc-reply-then-fpdus", &s);
    // A rejecting reply with private data, and a request carrying 512 bytes of it.
    let rej = Flags {
        reject: true,
        ..Flags::default()
    };
    let rep = mpa::build(Kind::Reply, rej, 2, Some(&block), b"no").unwrap();
    let mut s = Seed::default();
    s.u8(1).u16(100).u8(0).bytes(&rep);
    save(dir, "reject", &s);
    let req = mpa::build(Kind::Request, Flags::default(), 1, None, &[0x5a; 512]).unwrap();
    let mut s = Seed::default();
    s.u8(0).u16(100).u8(1).u8(16).bytes(&req);
    save(dir, "largest-private-data", &s);
}

// ---- iwarp_ddp_rdmap: one ULPDU -----------------------------------------------------------

fn iwarp_ddp_rdmap(dir: &Path) {
    let names = [
        "send-first",
        "send-last",
        "send-invalidate",
        "send-se-invalidate-empty",
        "write",
        "read-request",
        "read-response",
        "terminate-tagged-error",
        "terminate-read-request",
        "terminate-crc",
        "immediate-data",
    ];
    for (name, ulpdu) in names.iter().zip(iwarp_messages()) {
        let mut s = Seed::default();
        s.bytes(&ulpdu);
        save(dir, name, &s);
    }
}

// ---- iwarp_placement: a running QP fed FPDUs ---------------------------------------------

fn iwarp_placement(dir: &Path) {
    // Operation 2: a crafted FPDU in order (opcode, target, TO, MSN, MO, last, length);
    // operation 3: the same ahead of a hole (gap first).
    let write = |s: &mut Seed, target: u8, len: u16| {
        s.u8(2).u8(0).u8(target).u32(64).u8(0).u16(0).u8(1).u16(len);
    };
    for crc in [0u8, 1] {
        let mut s = Seed::default();
        s.u8(crc);
        write(&mut s, 0, 1000);
        // A Send of two segments, then a Read Request of the writable region.
        s.u8(2).u8(3).u8(0).u32(0).u8(1).u16(0).u8(0).u16(600);
        s.u8(2).u8(3).u8(0).u32(0).u8(1).u16(600).u8(1).u16(300);
        s.u8(2).u8(1).u8(0).u32(0).u8(1).u16(0).u8(1).u16(2000);
        // Response segments for the outstanding Read, one ahead of a hole.
        s.u8(3)
            .u16(500)
            .u8(2)
            .u8(3)
            .u32(1024)
            .u8(0)
            .u16(0)
            .u8(0)
            .u16(1024);
        s.u8(2).u8(2).u8(3).u32(0).u8(0).u16(0).u8(1).u16(1024);
        save(dir, &format!("write-send-read-crc{crc}"), &s);
        let mut s = Seed::default();
        s.u8(crc);
        write(&mut s, 1, 100);
        save(dir, &format!("write-read-only-crc{crc}"), &s);
        let mut s = Seed::default();
        s.u8(crc);
        s.u8(3)
            .u16(1)
            .u8(0)
            .u8(0)
            .u32(8000)
            .u8(0)
            .u16(0)
            .u8(1)
            .u16(500);
        s.u8(1).u16(10).u16(4).bytes(&[0, 2, 0x41, 0x40]);
        save(dir, &format!("ahead-crc{crc}"), &s);
    }
}

// ---- dereg_mid_transfer -----------------------------------------------------------------------
// first byte: the pairs to connect (bits: 1 message, 2 stream, 4 iWARP). Then top level: 0 send, 3 recv, 5 step (then passes - 1), 8 settle, 9 consume, 10 DEREG_MR,
// 12 DESTROY_QP, 13 (0: DESTROY_CTX, 1: CLOSE). QPs, pair by pair among those connected:
// 0/1 message framing (context 0 accepts, context 1 connects), 2/3 stream framing, 4/5 iWARP
// (with all three; with one pair, its QPs are 0/1). Regions: 0-3 context 0's, 4-7 context
// 1's, in each: "out" (read-only to the device, remote read), "in" (local and remote write),
// "mix" (every right), "in2" (local write). An SGE picks among the regions that have the
// rights asked for ("fit": receives and Read sinks: in, mix, in2; RDMA Write targets: in,
// mix; Read sources: out, mix; send sources: all four).

/// One SGE: `len` bytes at `off` of the `fit`-th fitting region, its own lkey.
fn dm_sge(s: &mut Seed, fit: u8, off: u16, len: u16) {
    s.u8(1).u8(fit); // a fitting region
    s.u16(off).u8(2).u16(len); // inside it
    s.u8(1); // its lkey
}

fn dm_recv(s: &mut Seed, qp: u8, fit: u8, off: u16, len: u16) {
    s.u8(3).u8(qp).u8(0); // one SGE
    dm_sge(s, fit, off, len);
}

/// A Send of `len` bytes of fitting region `fit`; `kind` 0 message, 1 stream, 2 iWARP.
fn dm_send(s: &mut Seed, qp: u8, kind: u8, fit: u8, off: u16, len: u16) {
    s.u8(0).u8(qp);
    match kind {
        0 => {
            s.u8(7); // immediate data
        }
        2 => {
            s.u8(0); // a Send
        }
        _ => {}
    }
    s.u8(1).u8(0); // not inline, one SGE
    dm_sge(s, fit, off, len);
}

/// An RDMA Write (or Read) on iWARP QP `qp` of `len` bytes between local fitting region
/// `local` and the peer's fitting region `remote` at `roff`.
fn dm_rdma(s: &mut Seed, qp: u8, write: bool, (local, loff): (u8, u16), len: u16, (remote, roff): (u8, u16)) {
    s.u8(0).u8(qp).u8(if write { 1 } else { 2 });
    s.u8(0); // one SGE
    dm_sge(s, local, loff, len);
    s.u8(1); // the peer's context
    s.u8(1).u8(remote).u16(roff);
    s.u8(1); // its rkey
}

fn dm_consume_all(s: &mut Seed) {
    for cq in 0..4 {
        s.u8(9).u8(cq).u8(15);
    }
}

fn dereg_mid_transfer(dir: &Path) {
    let mut s = Seed::default();
    // Message framing: the sender's region deregistered one pass into a 4000-byte message.
    s.u8(1);
    dm_recv(&mut s, 0, 0, 0, 4000);
    dm_send(&mut s, 1, 0, 0, 100, 4000);
    s.u8(5).u8(0);
    s.u8(10).u8(4);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "message-dereg-source", &s);

    let mut s = Seed::default();
    // Stream framing: the receiver's region deregistered while the bytes arrive.
    s.u8(2);
    dm_recv(&mut s, 0, 0, 0, 3000);
    dm_recv(&mut s, 0, 2, 0, 3000);
    dm_send(&mut s, 1, 1, 0, 0, 6000);
    s.u8(5).u8(0); // one pass: the segments wait in the loopback
    s.u8(10).u8(1);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "stream-dereg-sink", &s);

    let mut s = Seed::default();
    // iWARP: a Read of context 0's "out" region, deregistered while its Read Response
    // streams; then a Write into context 0's "in", deregistered under it.
    s.u8(4);
    dm_rdma(&mut s, 1, false, (0, 0), 6000, (0, 0));
    s.u8(5).u8(1); // two passes: the request is served, the response on its way
    s.u8(10).u8(0);
    s.u8(8);
    dm_rdma(&mut s, 1, true, (0, 0), 5000, (0, 0));
    s.u8(5).u8(0);
    s.u8(10).u8(1);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "iwarp-dereg", &s);

    let mut s = Seed::default();
    // Everything at once: transfers on every pair, then a QP destroyed, a close, the
    // connecting context destroyed, a region deregistered after its QP is gone.
    s.u8(7);
    dm_recv(&mut s, 0, 0, 0, 2000);
    dm_recv(&mut s, 2, 1, 0, 2000);
    dm_recv(&mut s, 4, 2, 0, 2000);
    dm_send(&mut s, 1, 0, 0, 0, 2000);
    dm_send(&mut s, 3, 1, 2, 0, 2000);
    dm_send(&mut s, 5, 2, 0, 0, 2000);
    dm_send(&mut s, 0, 0, 1, 0, 500);
    s.u8(5).u8(0);
    s.u8(12).u8(1);
    s.u8(13).u8(1).u8(2);
    s.u8(5).u8(2);
    s.u8(13).u8(0).u8(1);
    s.u8(8);
    s.u8(10).u8(0);
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "destroy-mid-transfer", &s);

    let mut s = Seed::default();
    // Transfers that finish, with no region taken away.
    s.u8(7);
    dm_recv(&mut s, 1, 0, 0, 4096);
    dm_recv(&mut s, 3, 0, 4096, 4096);
    dm_recv(&mut s, 5, 1, 0, 3000);
    dm_send(&mut s, 0, 0, 0, 0, 4096);
    dm_send(&mut s, 2, 1, 3, 0, 4096);
    dm_send(&mut s, 4, 2, 2, 0, 3000);
    dm_rdma(&mut s, 4, true, (1, 0), 4000, (1, 0));
    s.u8(8);
    dm_consume_all(&mut s);
    save(dir, "transfers", &s);
}
