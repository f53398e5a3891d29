//! The operations of the `frames` target: what [`Op::decode`] reads from a fuzz input and
//! [`Op::encode`] writes for a seed, side by side so that the two cannot drift apart.

use crate::{Input, Seed};

/// One operation of the input.
#[derive(Debug, Clone)]
pub enum Op {
    /// Any bytes as a frame.
    Raw(Vec<u8>),
    /// A TCP segment from a peer, built with a right checksum unless `corrupt` says
    /// otherwise, possibly in fragments.
    Tcp(TcpOp),
    /// An ICMPv6 message from a peer (right checksum).
    Icmp(IcmpOp),
    /// A UDP datagram to the device; answered with port unreachable if `unreachable`.
    Udp {
        dport: u16,
        len: u8,
        unreachable: bool,
    },
    /// Time passes: `ms` milliseconds, times 60 if `long`.
    Wait { ms: u16, long: bool },
    /// An application call on the `which`-th connection (in tuple order).
    App { which: u8, call: AppCall },
    /// An active open to PEER's `port`.
    Connect { port: u16 },
    /// The listener goes away, or comes back (with SYN cookies if `cookies`).
    Relisten { cookies: bool },
}

#[derive(Debug, Clone, Copy)]
pub enum AppCall {
    Send(u16),
    Read(u16),
    Close,
    Abort,
}

/// Where a fuzzed sequence or acknowledgement number points.
#[derive(Debug, Clone, Copy)]
pub enum Num {
    /// Exactly the live value (RCV.NXT of the connection as the peer sees it, or SND.UNA).
    Live,
    /// The live value plus a small signed offset.
    Near(i16),
    /// Any value.
    Any(u32),
}

#[derive(Debug, Clone)]
pub struct TcpOp {
    /// 0: the established connection; 1: the listener from peer port `peer_port`; 2: any
    /// port pair (`ports`).
    pub target: u8,
    pub peer_port: u8,
    pub ports: (u16, u16),
    /// From PEER2 (resolved by NDP) instead of PEER.
    pub from_peer2: bool,
    pub flags: u8,
    pub seq: Num,
    pub ack: Num,
    pub window: u16,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks as (offset from the ACK, length).
    pub sack: Vec<(u16, u16)>,
    pub payload_len: u16,
    pub payload_seed: u8,
    /// Flip this byte of the IPv6 payload (0: none; the byte index is `corrupt - 1`).
    pub corrupt: u16,
    /// Fragment size in 8-byte units (0: not fragmented), and reversed order.
    pub frag_units: u8,
    pub frag_reverse: bool,
}

#[derive(Debug, Clone)]
pub enum IcmpOp {
    Echo {
        id: u16,
        seq: u16,
        len: u8,
    },
    Solicit {
        target_ours: bool,
        with_sllao: bool,
        multicast: bool,
    },
    Advert {
        solicited: bool,
        override_: bool,
        from_peer2: bool,
    },
    /// A packet too big quoting a TCP segment of the established connection.
    TooBig {
        mtu: u32,
    },
    /// An error of `ty`/`code` quoting what the device sent.
    Error {
        ty: u8,
        code: u8,
    },
}

fn num(i: &mut Input) -> Num {
    match i.choose(3) {
        0 => Num::Live,
        1 => Num::Near(i.u16() as i16),
        _ => Num::Any(i.u32()),
    }
}

fn enc_num(s: &mut Seed, n: Num) {
    match n {
        Num::Live => s.u8(0),
        Num::Near(d) => s.u8(1).u16(d as u16),
        Num::Any(v) => s.u8(2).u32(v),
    };
}

impl Op {
    pub fn decode(i: &mut Input) -> Op {
        match i.choose(8) {
            0 => {
                let n = i.u16() as usize % 1600;
                Op::Raw(i.bytes(n))
            }
            1 => {
                let target = i.u8() % 3;
                let peer_port = i.u8() % 4;
                let ports = if target == 2 {
                    (i.u16(), i.u16())
                } else {
                    (0, 0)
                };
                let from_peer2 = i.bool();
                let flags = i.u8();
                let seq = num(i);
                let ack = num(i);
                let window = i.u16();
                let opts = i.u8();
                let mss = (opts & 1 != 0).then(|| i.u16());
                let wscale = (opts & 2 != 0).then(|| i.u8());
                let sack_permitted = opts & 4 != 0;
                let timestamps = (opts & 8 != 0).then(|| (i.u32(), i.u32()));
                let sack = if opts & 16 != 0 {
                    (0..i.u8() % 5).map(|_| (i.u16(), i.u16())).collect()
                } else {
                    Vec::new()
                };
                let payload_len = i.u16() % 3000;
                let payload_seed = i.u8();
                let corrupt = if opts & 32 != 0 { i.u16() } else { 0 };
                let (frag_units, frag_reverse) = if opts & 64 != 0 {
                    (i.u8(), i.bool())
                } else {
                    (0, false)
                };
                Op::Tcp(TcpOp {
                    target,
                    peer_port,
                    ports,
                    from_peer2,
                    flags,
                    seq,
                    ack,
                    window,
                    mss,
                    wscale,
                    sack_permitted,
                    timestamps,
                    sack,
                    payload_len,
                    payload_seed,
                    corrupt,
                    frag_units,
                    frag_reverse,
                })
            }
            2 => Op::Icmp(match i.choose(5) {
                0 => IcmpOp::Echo {
                    id: i.u16(),
                    seq: i.u16(),
                    len: i.u8(),
                },
                1 => IcmpOp::Solicit {
                    target_ours: i.bool(),
                    with_sllao: i.bool(),
                    multicast: i.bool(),
                },
                2 => IcmpOp::Advert {
                    solicited: i.bool(),
                    override_: i.bool(),
                    from_peer2: i.bool(),
                },
                3 => IcmpOp::TooBig { mtu: i.u32() },
                _ => IcmpOp::Error {
                    ty: i.u8(),
                    code: i.u8(),
                },
            }),
            3 => Op::Udp {
                dport: i.u16(),
                len: i.u8(),
                unreachable: i.bool(),
            },
            4 => Op::Wait {
                ms: i.u16(),
                long: i.bool(),
            },
            5 => {
                let which = i.u8();
                let call = match i.choose(4) {
                    0 => AppCall::Send(i.u16()),
                    1 => AppCall::Read(i.u16()),
                    2 => AppCall::Close,
                    _ => AppCall::Abort,
                };
                Op::App { which, call }
            }
            6 => Op::Connect { port: i.u16() },
            _ => Op::Relisten { cookies: i.bool() },
        }
    }

    /// Writes what [`Op::decode`] reads back as this operation.
    pub fn encode(&self, s: &mut Seed) {
        match self {
            Op::Raw(b) => {
                s.u8(0).u16(b.len() as u16).bytes(b);
            }
            Op::Tcp(t) => {
                s.u8(1).u8(t.target).u8(t.peer_port);
                if t.target == 2 {
                    s.u16(t.ports.0).u16(t.ports.1);
                }
                s.u8(t.from_peer2 as u8).u8(t.flags);
                enc_num(s, t.seq);
                enc_num(s, t.ack);
                s.u16(t.window);
                let opts = t.mss.is_some() as u8
                    | (t.wscale.is_some() as u8) << 1
                    | (t.sack_permitted as u8) << 2
                    | (t.timestamps.is_some() as u8) << 3
                    | (!t.sack.is_empty() as u8) << 4
                    | ((t.corrupt != 0) as u8) << 5
                    | ((t.frag_units != 0) as u8) << 6;
                s.u8(opts);
                if let Some(m) = t.mss {
                    s.u16(m);
                }
                if let Some(w) = t.wscale {
                    s.u8(w);
                }
                if let Some((v, e)) = t.timestamps {
                    s.u32(v).u32(e);
                }
                if !t.sack.is_empty() {
                    s.u8(t.sack.len() as u8);
                    for &(o, l) in &t.sack {
                        s.u16(o).u16(l);
                    }
                }
                s.u16(t.payload_len).u8(t.payload_seed);
                if t.corrupt != 0 {
                    s.u16(t.corrupt);
                }
                if t.frag_units != 0 {
                    s.u8(t.frag_units).u8(t.frag_reverse as u8);
                }
            }
            Op::Icmp(m) => {
                s.u8(2);
                match *m {
                    IcmpOp::Echo { id, seq, len } => {
                        s.u8(0).u16(id).u16(seq).u8(len);
                    }
                    IcmpOp::Solicit {
                        target_ours,
                        with_sllao,
                        multicast,
                    } => {
                        s.u8(1)
                            .u8(target_ours as u8)
                            .u8(with_sllao as u8)
                            .u8(multicast as u8);
                    }
                    IcmpOp::Advert {
                        solicited,
                        override_,
                        from_peer2,
                    } => {
                        s.u8(2)
                            .u8(solicited as u8)
                            .u8(override_ as u8)
                            .u8(from_peer2 as u8);
                    }
                    IcmpOp::TooBig { mtu } => {
                        s.u8(3).u32(mtu);
                    }
                    IcmpOp::Error { ty, code } => {
                        s.u8(4).u8(ty).u8(code);
                    }
                }
            }
            Op::Udp {
                dport,
                len,
                unreachable,
            } => {
                s.u8(3).u16(*dport).u8(*len).u8(*unreachable as u8);
            }
            Op::Wait { ms, long } => {
                s.u8(4).u16(*ms).u8(*long as u8);
            }
            Op::App { which, call } => {
                s.u8(5).u8(*which);
                match *call {
                    AppCall::Send(n) => s.u8(0).u16(n),
                    AppCall::Read(n) => s.u8(1).u16(n),
                    AppCall::Close => s.u8(2),
                    AppCall::Abort => s.u8(3),
                };
            }
            Op::Connect { port } => {
                s.u8(6).u16(*port);
            }
            Op::Relisten { cookies } => {
                s.u8(7).u8(*cookies as u8);
            }
        }
    }
}

impl TcpOp {
    /// A segment to the established connection with these flags and payload, live
    /// numbers, no options.
    pub fn to_established(flags: u8, payload_len: u16) -> TcpOp {
        TcpOp {
            target: 0,
            peer_port: 0,
            ports: (0, 0),
            from_peer2: false,
            flags,
            seq: Num::Live,
            ack: Num::Live,
            window: 65535,
            mss: None,
            wscale: None,
            sack_permitted: false,
            timestamps: None,
            sack: Vec::new(),
            payload_len,
            payload_seed: 7,
            corrupt: 0,
            frag_units: 0,
            frag_reverse: false,
        }
    }
}
