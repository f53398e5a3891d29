//! The admin command parser (`engine::decode::admin`) on any 64 bytes: it must never panic,
//! and whatever it accepts must already satisfy the checks the ABI promises (so the engine
//! behind it can rely on them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_abi::admin::*;
use qpip_abi::pci::MSIX_VECTORS;
use qpip_device::engine::decode::{self, AdminRequest, QpType};
use zerocopy::FromBytes;

fuzz_target!(|data: &[u8]| {
    let mut raw = [0u8; 64];
    let n = data.len().min(64);
    raw[..n].copy_from_slice(&data[..n]);
    let cmd = AdminCmd::read_from_bytes(&raw[..]).expect("64 bytes");
    // The device passes its vector count; other counts exercise the bound itself.
    let vectors = if data.len() > 64 {
        data[64] as u16
    } else {
        MSIX_VECTORS
    };
    let Ok(req) = decode::admin(&cmd, vectors) else {
        return;
    };
    assert_eq!(cmd.flags, 0, "reserved flags accepted");
    let pow2 = |d: u32| d.is_power_of_two() && (2..=MAX_QUEUE_DEPTH).contains(&d);
    match req {
        AdminRequest::CreateCq { depth, vector, .. } => {
            assert!(pow2(depth), "CQ depth {depth} accepted");
            assert!(
                vector >= 1 && vector < vectors,
                "CQ vector {vector} accepted"
            );
        }
        AdminRequest::CreateQp(q) => {
            assert!(
                pow2(q.sq_depth) && pow2(q.rq_depth),
                "QP depths accepted: {q:?}"
            );
            let tcp_framings = [FRAMING_MESSAGE, FRAMING_STREAM, FRAMING_IWARP];
            assert!(
                match q.kind {
                    QpType::Udp => q.framing == 0,
                    QpType::RawEth => q.framing == 0 || q.framing == RAW_RX_MERGEABLE,
                    QpType::Tcp => tcp_framings.contains(&q.framing),
                },
                "QP type/framing accepted: {q:?}"
            );
        }
        AdminRequest::SetMac(mac) => {
            assert_eq!(mac[0] & 1, 0, "group MAC accepted");
        }
        AdminRequest::AddAddr { addr, prefix_len } => {
            assert!(!addr.is_multicast() && !addr.is_unspecified());
            assert!((1..=128).contains(&prefix_len));
        }
        AdminRequest::AddRoute(r) => {
            assert!(r.prefix_len <= 128, "route prefix accepted: {r:?}");
            assert_eq!(
                r.gateway.to_ipv4_mapped().is_some(),
                r.is_ipv4(),
                "a gateway of the other family accepted: {r:?}"
            );
            assert!(
                !r.gateway.is_multicast() && !r.gateway.is_unspecified(),
                "gateway accepted: {r:?}"
            );
        }
        AdminRequest::AddNeighbor(n) => {
            assert!(
                !n.addr.is_multicast() && !n.addr.is_unspecified(),
                "neighbour address accepted: {n:?}"
            );
            assert!(
                n.addr
                    .to_ipv4_mapped()
                    .is_none_or(|v| !v.is_unspecified() && !v.is_broadcast() && !v.is_multicast()),
                "IPv4 neighbour address accepted: {n:?}"
            );
            assert!(
                n.mac[0] & 1 == 0 && n.mac != [0; 6],
                "neighbour MAC accepted: {n:?}"
            );
            let a = NeighborArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(
                (n.addr.octets(), n.mac),
                (a.addr, a.mac),
                "not the command's entry"
            );
            assert_eq!(a.reserved, [0; 26], "reserved ADD_NEIGH bytes accepted");
        }
        AdminRequest::DelNeighbor(addr) => {
            assert!(
                !addr.is_multicast() && !addr.is_unspecified(),
                "DEL_NEIGH address accepted: {addr}"
            );
        }
        AdminRequest::Bind { share, .. } => {
            let a = BindArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(
                a.flags & !BIND_FLAG_SHARE_PORT,
                0,
                "unknown BIND flags accepted"
            );
            assert_eq!(
                share,
                a.flags & BIND_FLAG_SHARE_PORT != 0,
                "not the command's flag"
            );
        }
        AdminRequest::SetUdpPeer(peer) => {
            let a = SetQpOptArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(a.option, QP_OPT_UDP_PEER);
            match peer {
                Some((addr, port)) => {
                    assert!(port != 0 && !addr.is_multicast() && !addr.is_unspecified());
                    assert_eq!((addr.octets(), port), (a.peer_addr, a.peer_port));
                }
                None => assert_eq!((a.peer_addr, a.peer_port), ([0; 16], 0), "a peer lost"),
            }
        }
        AdminRequest::Listen { port, requests, .. } => {
            assert_ne!(port, 0, "port 0 accepted for listen");
            let a = ListenArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(a.flags & !LISTEN_FLAGS, 0, "unknown LISTEN flags accepted");
            assert_eq!(
                requests,
                a.flags & LISTEN_FLAG_IWARP_REQUESTS != 0,
                "not the command's flag"
            );
        }
        AdminRequest::ConnRequest { buf, len } => {
            let a = QueryArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!((buf, len), (a.buf, a.len), "not the command's buffer");
        }
        AdminRequest::Reject { request, iwarp } => {
            assert_ne!(request, 0, "REJECT of request 0 accepted");
            check_iwarp(&iwarp);
            assert_eq!(
                (iwarp.ird, iwarp.ord, iwarp.flags),
                (0, 0, 0),
                "a REJECT with connection parameters accepted: {iwarp:?}"
            );
        }
        AdminRequest::Connect { port, iwarp, .. } => {
            assert_ne!(port, 0, "port 0 accepted for connect");
            check_iwarp(&iwarp);
        }
        AdminRequest::Accept { iwarp, request, .. } => {
            check_iwarp(&iwarp);
            let a = AcceptArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(request, a.request, "not the command's request");
        }
        AdminRequest::CreateCtx { page, flags } => {
            let a = CreateCtxArgs::read_from_prefix(&cmd.body[..]).unwrap().0;
            assert_eq!(page, a.doorbell_page, "the doorbell page is the command's");
            assert_eq!(flags, a.flags, "the flags are the command's");
            assert_eq!(
                flags & !CTX_FLAG_KERNEL,
                0,
                "unknown CREATE_CTX flags accepted"
            );
            assert_eq!(a.reserved, [0; 36], "reserved CREATE_CTX bytes accepted");
        }
        _ => {}
    }
});

/// The iWARP connection parameters of an accepted CONNECT or ACCEPT are within the limits.
fn check_iwarp(a: &IwarpConnArgs) {
    assert!(
        a.pd_len as u32 <= IWARP_MAX_PRIVATE_DATA,
        "private data length accepted: {a:?}"
    );
    assert!(a.pd_len == 0 || a.pd_addr != 0, "private data at 0: {a:?}");
    assert_eq!(
        a.flags & !IWARP_CONN_FLAGS,
        0,
        "unknown flags accepted: {a:?}"
    );
    assert!(
        a.ird <= IWARP_MAX_IRD_ORD && a.ord <= IWARP_MAX_IRD_ORD,
        "IRD/ORD accepted: {a:?}"
    );
}
