//! Seeds of the targets fed one raw structure: config space, the control BAR, an admin
//! command, a WQE.

use std::path::Path;

use qpip_abi::admin::*;
use qpip_abi::regs::*;
use qpip_abi::wqe::*;
use qpip_fuzz::Seed;
use qpip_testkit::{
    cmd, cq_body, create_ctx_cmd, inline_wqe, mr_body, qp_body, query_cmd, recv_wqe, send_wqe,
    LOOPBACK,
};
use zerocopy::{FromZeros, IntoBytes};

use crate::save;

// ---- config_space: op = kind (0 read, 1 write, 2 aligned write, 3 reset) ------------------

pub(crate) fn config_space(dir: &Path) {
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

pub(crate) fn control_bar(dir: &Path) {
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

pub(crate) fn admin_command(dir: &Path) {
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
    let mut bind_shared = bind;
    bind_shared.flags = BIND_FLAG_SHARE_PORT;
    let mut udp_peer = SetQpOptArgs::new_zeroed();
    udp_peer.option = QP_OPT_UDP_PEER;
    udp_peer.peer_addr[15] = 1;
    udp_peer.peer_port = 5201;
    let mut listen = ListenArgs::new_zeroed();
    listen.port = 80;
    listen.backlog = 16;
    let mut listen_requests = listen;
    listen_requests.flags = LISTEN_FLAG_IWARP_REQUESTS;
    let mut accept_request = AcceptArgs::new_zeroed();
    accept_request.qp = 3;
    accept_request.request = 1;
    accept_request.iwarp.pd_addr = 0x7000;
    accept_request.iwarp.pd_len = 7;
    accept_request.iwarp.ird = 4;
    accept_request.iwarp.ord = 4;
    let mut reject = RejectArgs::new_zeroed();
    reject.request = 1;
    reject.iwarp.pd_addr = 0x7000;
    reject.iwarp.pd_len = 7;
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
        ("bind-shared", cmd(ADMIN_OP_BIND, 1, 3, &bind_shared)),
        ("udp-peer", cmd(ADMIN_OP_SET_QP_OPT, 1, 3, &udp_peer)),
        ("listen", cmd(ADMIN_OP_LISTEN, 1, 0, &listen)),
        (
            "listen-requests",
            cmd(ADMIN_OP_LISTEN, 1, 0, &listen_requests),
        ),
        (
            "conn-request",
            query_cmd(ADMIN_OP_CONN_REQUEST, 0x1000, 4096),
        ),
        ("accept-request", cmd(ADMIN_OP_ACCEPT, 1, 2, &accept_request)),
        ("reject", cmd(ADMIN_OP_REJECT, 1, 2, &reject)),
        ("connect", cmd(ADMIN_OP_CONNECT, 1, 3, &connect)),
    ];
    for (name, c) in cmds {
        let mut s = Seed::default();
        s.bytes(c.as_bytes());
        save(dir, name, &s);
    }
}

// ---- wqe: a raw 128-byte slot ---------------------------------------------------------------

pub(crate) fn wqe(dir: &Path) {
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
