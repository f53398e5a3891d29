//! The engine's network side: the [`crate::net`] stack and the link beneath the QPs
//! (`--net`; without it, no link). The stack owns the device's identity (MAC, addresses);
//! every datagram and segment goes down through it — to the link, or back up through its
//! loopback when the destination is the device itself — and what the stack receives for
//! the device comes up through one receive path.

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use log::{debug, info, warn};
use vm_memory::GuestMemoryMmap;

use crate::backend::{self, ImpairSpec, NetSpec};
use crate::net::config::{NetConfig, StaticNeighbor};
use crate::net::interface::Interface;
use crate::net::route::Route;
use crate::net::stack::{Delivery, SendError, Stack, Upper};

use super::udp::Datagram;
use super::Engine;

/// Frames taken from the link per pass before other work gets a turn.
pub(super) const RX_BUDGET: usize = 64;

/// `--net` and the options that go with it.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub spec: NetSpec,
    pub mtu: usize,
    pub pcap: Option<PathBuf>,
    pub impair: Option<ImpairSpec>,
    /// Static neighbours (`--neighbor`); the guest adds more (ADD_NEIGH).
    pub neighbors: Vec<StaticNeighbor>,
    /// Routes off the link (`--route`); the guest adds more (ADD_ROUTE).
    pub routes: Vec<Route>,
    /// Multicast neighbour solicitations before an address counts as unreachable.
    pub ndp_solicits: u8,
}

impl NetworkConfig {
    /// The link `spec` with the defaults of `qpipd`'s options: MTU 1500, no capture, no
    /// impairment, no static neighbours, no routes, RFC 4861's solicitations.
    pub fn new(spec: NetSpec) -> NetworkConfig {
        NetworkConfig {
            spec,
            mtu: crate::net::config::DEFAULT_MTU,
            pcap: None,
            impair: None,
            neighbors: Vec::new(),
            routes: Vec::new(),
            ndp_solicits: crate::net::neighbor::MAX_MULTICAST_SOLICIT,
        }
    }
}

/// A stack as the engine runs it (TCP above it on).
pub(super) fn new_stack(config: &NetConfig) -> Stack {
    let mut s = Stack::new(config, Instant::now());
    s.set_tcp(true);
    s
}

impl Engine {
    /// Opens the link and starts the stack on it with the device's identity.
    pub fn attach_network(&mut self, cfg: &NetworkConfig) -> io::Result<()> {
        let link = backend::open_link(&cfg.spec, cfg.pcap.as_deref(), cfg.impair.as_ref())?;
        self.attach_link(cfg, link);
        Ok(())
    }

    /// As [`Engine::attach_network`], onto a link already open (`cfg.spec` only names it):
    /// an in-process [`backend::memory`] pair for benches and tests.
    pub fn attach_link(&mut self, cfg: &NetworkConfig, link: Box<dyn backend::Backend>) {
        let c = &mut self.net_start;
        c.mtu = cfg.mtu;
        c.neighbors = cfg.neighbors.clone();
        c.routes = cfg.routes.clone();
        c.ndp_solicits = cfg.ndp_solicits;
        c.link = true;
        // The link's own static neighbours and routes, not those of the stack without it.
        let mut start = self.identity_now();
        start.neighbors = cfg.neighbors.clone();
        start.routes = cfg.routes.clone();
        let stack = new_stack(&start);
        info!(
            "network: {} (MTU {}), link-local {}",
            link.describe(),
            cfg.mtu,
            stack.link_local()
        );
        // Super-segments: headers built once per large send. A link that takes them whole
        // carries them; another cuts them (backend::send_segments), which still costs less
        // than building every segment.
        self.tcp.set_gso(true);
        self.net = Interface::new(stack, link);
        self.link_watch = super::link::LinkWatch::default();
        self.shared.set_link_up(self.net.link_up());
    }

    /// The start configuration with the identity (routes and static neighbours) the device
    /// has now.
    fn identity_now(&self) -> NetConfig {
        let mut c = self.net_start.clone();
        c.mac = self.net.stack.mac();
        c.addrs = self.net.stack.addresses().to_vec();
        c.routes = self.net.stack.routes().to_vec();
        c.neighbors = self.net.stack.static_neighbors().to_vec();
        c
    }

    /// SET_MAC. A new MAC means a new link-local address and a new view of us for the
    /// neighbours, so the stack starts afresh, as an interface does after `ip link set
    /// address`. Refused (ADDR_IN_USE) when the MAC, or the link-local address from it,
    /// is another function's on the same adapter (the link says: [`Self::claim_identity`]).
    pub(super) fn set_mac(&mut self, mac: [u8; 6]) -> Result<(), u16> {
        if self.net.stack.mac() == mac {
            return Ok(());
        }
        self.claim_identity(Some(mac), None)?;
        let mut c = self.identity_now();
        c.mac = mac;
        self.net.stack = new_stack(&c);
        self.net.flush();
        Ok(())
    }

    /// Claims the device's identity on its link, with `mac` in place of its MAC and `add`
    /// among its addresses if given, before the stack takes them. A switch port refuses
    /// another function's MAC or address: ADMIN_STATUS_ADDR_IN_USE.
    pub(super) fn claim_identity(
        &mut self,
        mac: Option<[u8; 6]>,
        add: Option<std::net::Ipv6Addr>,
    ) -> Result<(), u16> {
        let mac = mac.unwrap_or(self.net.stack.mac());
        let mut addrs: Vec<std::net::Ipv6Addr> =
            self.net.stack.addresses().iter().map(|&(a, _)| a).collect();
        addrs.extend(add);
        self.net.claim(mac, &addrs).map_err(|e| {
            info!("refused: {e}");
            qpip_abi::admin::ADMIN_STATUS_ADDR_IN_USE
        })
    }

    /// After a reset: the identity (routes and static neighbours) the device started with.
    pub(super) fn restore_identity(&mut self) {
        if self.net.stack.mac() != self.net_start.mac {
            self.net.stack = new_stack(&self.net_start);
        } else {
            let addrs = self.net_start.addrs.clone();
            self.net.stack.set_addresses(&addrs);
            self.net.stack.set_routes(&self.net_start.routes);
            self.net
                .stack
                .set_static_neighbors(&self.net_start.neighbors, Instant::now());
        }
        // The identity configured for it, which no other function may have taken.
        if let Err(e) = self.net.claim_identity() {
            warn!("the device's identity is refused after a reset: {e}");
        }
        self.net.flush();
    }

    /// Sends a UDP datagram through the stack (to the link, or to the device itself).
    /// Err(detail) when it cannot go (no route, a source the stack refuses).
    pub(super) fn send_udp(
        &mut self,
        src: Option<std::net::Ipv6Addr>,
        sport: u16,
        dst: std::net::Ipv6Addr,
        dport: u16,
        payload: &[u8],
    ) -> Result<(), u32> {
        use qpip_abi::cqe::*;
        let net = &mut self.net;
        let r = net
            .stack
            .send_udp(src, sport, dst, dport, payload, Instant::now());
        net.flush();
        match r {
            Ok(_) => Ok(()),
            Err(SendError::NoRoute) => Err(CQE_DETAIL_NO_ROUTE),
            Err(SendError::BadDestination | SendError::BadSource) => Err(CQE_DETAIL_BAD_ADDRESS),
            Err(SendError::TooBig) => Err(CQE_DETAIL_NONE),
        }
    }

    /// Takes packets from the loopback and frames from the link, and runs the network's
    /// timers. Returns whether anything happened.
    pub(super) fn poll_network(&mut self, mem: &GuestMemoryMmap) -> bool {
        // An idle engine that polls looks at its link (a system call) only now and then;
        // the pass before it sleeps always looks (its idle count is reset then). What the
        // device sent itself is taken at once.
        if !self.idle_passes.is_multiple_of(super::idle::LINK_EVERY)
            && !self.net.stack.loopback_pending()
        {
            return false;
        }
        // A stack made afresh (SET_MAC, a reset) learns again whether a raw QP is beside it.
        let raw = self.has_raw_qp();
        self.net.stack.set_raw_beside(raw);
        let now = Instant::now();
        self.watch_link(now);
        if self.net.next_deadline().is_some_and(|t| t <= now) {
            self.net.poll_timers(now);
        }
        let n = Interface::poll_rx_steered(
            self,
            |e| &mut e.net,
            now,
            RX_BUDGET,
            |e, u| match u {
                Upper::Udp(d) => {
                    let dgram = Datagram {
                        src: d.src,
                        src_port: d.sport,
                        dst: d.dst,
                        dst_port: d.dport,
                        payload: d.payload(),
                    };
                    if e.deliver_udp(mem, &dgram) {
                        Delivery::Delivered
                    } else if e.net.stack.steering() {
                        Delivery::Steered // the kernel's port, or its to answer
                    } else {
                        Delivery::NoPort
                    }
                }
                Upper::Tcp(t) => e.tcp_segment_in(mem, t.src, t.dst, t.segment()),
            },
            |e, frame, rx| e.raw_receive(mem, frame, rx),
        );
        // Packets too big that lowered a path MTU: the connections to that destination
        // resend at the new size on the next TCP pass.
        let pmtu = self.net.stack.take_path_mtu_changes();
        for &(dst, mtu) in &pmtu {
            debug!("path MTU to {dst} is now {mtu}");
            self.tcp.path_mtu_changed(dst, mtu, now);
        }
        // Destination unreachables that may end connection attempts.
        let unreachable = self.net.stack.take_unreachable();
        for u in &unreachable {
            self.tcp_unreachable(mem, u, now);
        }
        // The segments TCP produced meanwhile go down now.
        self.flush_tcp();
        n > 0 || !pmtu.is_empty() || !unreachable.is_empty()
    }
}
