//! Seeds of the `frames` and `vnet_frames` targets: sequences of `qpip_fuzz::frames::Op`.

use std::path::Path;

use qpip_fuzz::frames::{self as fr, AppCall, IcmpOp, Num, Op, TcpOp};
use qpip_fuzz::Seed;

use crate::save;

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

pub(crate) fn frames(dir: &Path) {
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
    ops(dir, "ipv4-arp-echo-udp-tcp", &ipv4_frames());
}

/// IPv4 and ARP as raw frames (the operations that build frames speak IPv6): ARP both
/// ways, echo, UDP with and without a checksum, fragments, fragmentation needed, a SYN to
/// the listener and one to a closed port.
fn ipv4_frames() -> Vec<Op> {
    use qpip_device::net::tcp::wire as tcpw;
    use qpip_device::net::wire::{self, Arp, Ipv4Fields};
    let (our, peer) = (fr::OUR4, fr::PEER4);
    let ip = |f: Ipv4Fields, upper: &[u8]| {
        let mut frame = wire::ipv4_packet(&peer, &our, &f, upper);
        wire::write_ethernet(&mut frame, &fr::OUR_MAC, &fr::PEER_MAC);
        Op::Raw(frame)
    };
    let whole = |protocol| Ipv4Fields::whole(protocol, 64, 7, false);
    let arp = |request, eth_dst| {
        Op::Raw(wire::arp_frame(
            &Arp {
                request,
                sender_mac: fr::PEER_MAC,
                sender_ip: peer,
                target_mac: if request { [0; 6] } else { fr::OUR_MAC },
                target_ip: our,
            },
            &eth_dst,
        ))
    };
    let echo = wire::icmpv4(
        wire::icmp4::ECHO_REQUEST,
        0,
        &[0, 1, 0, 1, b'p', b'i', b'n', b'g'],
    );
    let udp = wire::udp(&peer, &our, 4000, 9, b"hello over IPv4");
    let mut no_sum = udp.clone();
    no_sum[6..8].copy_from_slice(&[0, 0]);
    let big = wire::udp(&peer, &our, 4000, 9, &[0x5a; 3000]);
    let frag = |offset: usize, more: bool| Ipv4Fields {
        protocol: 17,
        ttl: 64,
        id: 0x77,
        dont_fragment: false,
        offset,
        more,
    };
    // A fragmentation needed quoting a packet of ours to the peer.
    let mut quoted = wire::ipv4_packet(&our, &peer, &Ipv4Fields::whole(6, 64, 1, true), &[0; 8]);
    quoted.drain(..wire::ETH_LEN);
    let mut body = vec![0, 0, 0x02, 0x40];
    body.extend_from_slice(&quoted);
    let frag_needed = wire::icmpv4(wire::icmp4::DEST_UNREACHABLE, 4, &body);
    let syn = |dport| {
        tcpw::build(
            &peer,
            &our,
            &tcpw::Header {
                src_port: 40000,
                dst_port: dport,
                seq: 0x1234_5678,
                flags: SYN,
                window: 65535,
                options: tcpw::Options {
                    mss: Some(1460),
                    ..Default::default()
                },
                ..Default::default()
            },
            &[],
        )
    };
    vec![
        arp(true, [0xff; 6]),
        arp(false, fr::OUR_MAC),
        ip(whole(1), &echo),
        ip(whole(17), &udp),
        ip(whole(17), &no_sum),
        ip(frag(1480, false), &big[1480..]),
        ip(frag(0, true), &big[..1480]),
        ip(whole(1), &frag_needed),
        ip(whole(6), &syn(fr::LISTEN_PORT)),
        ip(whole(6), &syn(81)),
        Op::Wait {
            ms: 2000,
            long: true,
        },
    ]
}

// ---- vnet_frames: steps of (bool: an Op of `frames`, else header, length, frame, size) -----

pub(crate) fn vnet_frames(dir: &Path) {
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
    let partial = qpip_device::backend::vnet::partial_tcp_checksum(&fr::PEER, &fr::OUR, seg.len());
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
