//! The wire layout of every shared structure, asserted: sizes and field offsets are the
//! contract with the driver, the library and other operating systems' drivers.

use core::mem::{offset_of, size_of};
use qpip_abi::admin::*;
use qpip_abi::cqe::*;
use qpip_abi::wqe::*;
use qpip_abi::{doorbell, pci, regs};

#[test]
fn admin_command_and_completion() {
    assert_eq!(size_of::<AdminCmd>(), 64);
    assert_eq!(offset_of!(AdminCmd, opcode), 0);
    assert_eq!(offset_of!(AdminCmd, cmd_id), 4);
    assert_eq!(offset_of!(AdminCmd, ctx), 8);
    assert_eq!(offset_of!(AdminCmd, handle), 12);
    assert_eq!(offset_of!(AdminCmd, body), 16);
    assert_eq!(size_of::<AdminCqe>(), 32);
    assert_eq!(offset_of!(AdminCqe, status), 4);
    assert_eq!(offset_of!(AdminCqe, result0), 8);
    assert_eq!(offset_of!(AdminCqe, result1), 16);
    assert_eq!(offset_of!(AdminCqe, result2), 24);
    assert_eq!(offset_of!(AdminCqe, phase), 31, "phase is the last byte");
}

#[test]
fn every_argument_body_fills_the_command_body() {
    for (name, size) in [
        ("QueryArgs", size_of::<QueryArgs>()),
        ("CreateCtxArgs", size_of::<CreateCtxArgs>()),
        ("SetMacArgs", size_of::<SetMacArgs>()),
        ("AddrArgs", size_of::<AddrArgs>()),
        ("CreateCqArgs", size_of::<CreateCqArgs>()),
        ("CreateQpArgs", size_of::<CreateQpArgs>()),
        ("RegMrArgs", size_of::<RegMrArgs>()),
        ("BindArgs", size_of::<BindArgs>()),
        ("ListenArgs", size_of::<ListenArgs>()),
        ("AcceptArgs", size_of::<AcceptArgs>()),
        ("ConnectArgs", size_of::<ConnectArgs>()),
        ("CreateTripwireArgs", size_of::<CreateTripwireArgs>()),
        ("SetQpOptArgs", size_of::<SetQpOptArgs>()),
        ("RouteArgs", size_of::<RouteArgs>()),
        ("NeighborArgs", size_of::<NeighborArgs>()),
        ("RejectArgs", size_of::<RejectArgs>()),
    ] {
        assert_eq!(size, 48, "{name}");
    }
    assert_eq!(offset_of!(CreateQpArgs, send_cq), 16);
    assert_eq!(offset_of!(CreateQpArgs, sq_npages), 32);
    assert_eq!(offset_of!(CreateQpArgs, qp_type), 36);
    assert_eq!(offset_of!(RegMrArgs, npages), 24);
    assert_eq!(offset_of!(RegMrArgs, access), 32);
    assert_eq!(offset_of!(ListenArgs, flags), 18);
    assert_eq!(offset_of!(AcceptArgs, request), 4);
    assert_eq!(offset_of!(RejectArgs, iwarp), 8);
    assert_eq!(size_of::<IwarpConnArgs>(), 16);
    assert_eq!(offset_of!(IwarpConnArgs, pd_len), 8);
    assert_eq!(offset_of!(IwarpConnArgs, ird), 10);
    assert_eq!(offset_of!(IwarpConnArgs, ord), 11);
    assert_eq!(offset_of!(IwarpConnArgs, flags), 12);
    assert_eq!(offset_of!(AcceptArgs, iwarp), 8);
    assert_eq!(offset_of!(ConnectArgs, port), 16);
    assert_eq!(offset_of!(ConnectArgs, iwarp), 24);
    assert_eq!(offset_of!(RouteArgs, prefix_len), 16);
    assert_eq!(offset_of!(RouteArgs, gateway), 20);
    assert_eq!(offset_of!(RouteArgs, metric), 36);
    assert_eq!(offset_of!(NeighborArgs, mac), 16);
}

#[test]
fn query_results() {
    assert_eq!(size_of::<DeviceInfo>(), 128);
    assert_eq!(offset_of!(DeviceInfo, mac), 48);
    assert_eq!(size_of::<Stats>(), STATS_COUNT as usize * 8);
    assert_eq!(size_of::<AddrEntry>(), 24);
    assert_eq!(size_of::<AddrList>(), 8 + 24 * (MAX_ADDRS as usize + 1));
    assert_eq!(
        size_of::<ConnInfo>(),
        32 + IWARP_MAX_PEER_PRIVATE_DATA as usize
    );
    assert_eq!(offset_of!(ConnInfo, pd_len), 10);
    assert_eq!(offset_of!(ConnInfo, terminate), 12);
    assert_eq!(offset_of!(ConnInfo, private_data), 32);
    assert_eq!(
        size_of::<ConnRequest>(),
        64 + IWARP_MAX_PEER_PRIVATE_DATA as usize
    );
    assert_eq!(offset_of!(ConnRequest, peer_addr), 8);
    assert_eq!(offset_of!(ConnRequest, local_addr), 24);
    assert_eq!(offset_of!(ConnRequest, peer_port), 40);
    assert_eq!(offset_of!(ConnRequest, local_port), 42);
    assert_eq!(offset_of!(ConnRequest, ird), 44);
    assert_eq!(offset_of!(ConnRequest, ord), 46);
    assert_eq!(offset_of!(ConnRequest, mpa_revision), 48);
    assert_eq!(offset_of!(ConnRequest, pd_len), 50);
    assert_eq!(offset_of!(ConnRequest, private_data), 64);
}

#[test]
fn wqe_and_cqe() {
    assert_eq!(size_of::<Wqe>(), WQE_SGE_OFFSET as usize);
    assert_eq!(offset_of!(Wqe, opcode), 8);
    assert_eq!(offset_of!(Wqe, num_sge), 10);
    assert_eq!(offset_of!(Wqe, imm_data), 12);
    assert_eq!(offset_of!(Wqe, dest_addr), 24);
    assert_eq!(offset_of!(Wqe, dest_port), 40);
    assert_eq!(size_of::<Sge>(), 16);
    assert_eq!(
        WQE_SGE_OFFSET as usize + MAX_SGE as usize * size_of::<Sge>(),
        WQE_SIZE as usize
    );
    assert_eq!(MAX_INLINE, MAX_SGE * 16);
    assert_eq!(size_of::<Cqe>(), CQE_SIZE as usize);
    assert_eq!(offset_of!(Cqe, byte_len), 8);
    assert_eq!(offset_of!(Cqe, qp), 12);
    assert_eq!(offset_of!(Cqe, src_port), 20);
    assert_eq!(offset_of!(Cqe, opcode), 22);
    assert_eq!(offset_of!(Cqe, status), 23);
    assert_eq!(offset_of!(Cqe, src_addr), 24);
    assert_eq!(offset_of!(Cqe, detail), 40);
    assert_eq!(offset_of!(Cqe, owner), 63, "owner is the last byte");
    assert!(
        (4096 / CQE_SIZE).is_power_of_two() && (4096 / WQE_SIZE).is_power_of_two(),
        "entries never straddle pages"
    );
}

#[test]
fn doorbell_page_fits() {
    let qp_end = doorbell::DB_QP_BASE + doorbell::DB_QP_SLOTS * doorbell::DB_QP_STRIDE;
    assert!(qp_end <= doorbell::DB_CQ_BASE, "QP slots overlap CQ slots");
    let cq_end = doorbell::DB_CQ_BASE + doorbell::DB_CQ_SLOTS * doorbell::DB_CQ_STRIDE;
    assert!(cq_end <= pci::DOORBELL_PAGE_SIZE);
    const { assert!(doorbell::DB_ENGINE_SLEEPING + 4 <= doorbell::DB_QP_BASE) };
}

#[test]
fn control_bar_regions_do_not_overlap() {
    const { assert!(regs::REGS_END <= regs::KICK_PAGE_OFFSET) };
    const { assert!(regs::KICK_PAGE_OFFSET + 4096 <= pci::MSIX_TABLE_OFFSET) };
    const { assert!(pci::MSIX_TABLE_OFFSET + pci::MSIX_VECTORS as u32 * 16 <= pci::MSIX_PBA_OFFSET) };
    const { assert!(pci::MSIX_PBA_OFFSET + 8 <= pci::CTRL_BAR_SIZE) };
    assert_eq!(
        regs::KICK_PAGE_OFFSET % 4096,
        0,
        "the kick page can be mapped on its own"
    );
}
