//! What the API tests (`soft.rs`, `aio.rs`) share: loopback addresses, free ports, and TCP
//! QPs on the software provider.
#![allow(dead_code)] // each test file uses its own part

use std::net::{Ipv6Addr, SocketAddrV6, TcpListener};

use qpip::{Context, Cq, Framing, Listener, Qp, QpInit, QpKind};

/// `[::1]:port`.
pub fn lo(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0)
}

/// A TCP port on `::1` that nothing listens on (as of now).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A TCP QP with `framing`, both queues on `cq`.
pub fn tcp_qp(ctx: &Context, cq: &Cq, framing: Framing) -> Qp {
    ctx.create_qp(&QpInit::new(QpKind::Tcp(framing), cq))
        .unwrap()
}

/// The two ends of a TCP connection before it exists: `server` has an accept (tagged
/// `user_data`) waiting on `listener` at `lo(port)`; `client` is still to connect.
pub struct Pending {
    pub server: Qp,
    pub client: Qp,
    pub port: u16,
    pub listener: Listener,
}

/// A [`Pending`] connection with `framing`, its QPs on `cq`.
pub fn pending_connection(ctx: &Context, cq: &Cq, framing: Framing, user_data: u64) -> Pending {
    let server = tcp_qp(ctx, cq, framing);
    let client = tcp_qp(ctx, cq, framing);
    let port = free_tcp_port();
    let listener = ctx.listen(lo(port), 1).unwrap();
    listener.accept(&server, user_data).unwrap();
    Pending {
        server,
        client,
        port,
        listener,
    }
}
