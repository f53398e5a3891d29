//! The engine's network side: the link beneath the QPs (`--net`). Datagrams to the device's
//! own addresses stay inside the engine (the loopback in [`super::datapath`]); everything
//! else goes through the [`crate::net`] stack onto the backend, and what the stack receives
//! for the device comes back up through the same receive path.

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use log::{debug, info};
use vm_memory::GuestMemoryMmap;

use crate::backend::{self, ImpairSpec, NetSpec};
use crate::net::config::{NetConfig, StaticNeighbor};
use crate::net::interface::Interface;
use crate::net::stack::{Delivery, SendError, Stack, Upper};

use super::datapath::Datagram;
use super::Engine;

/// Frames taken from the link per pass before other work gets a turn.
const RX_BUDGET: usize = 64;

/// `--net` and the options that go with it.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub spec: NetSpec,
    pub mtu: usize,
    pub pcap: Option<PathBuf>,
    pub impair: Option<ImpairSpec>,
    pub neighbors: Vec<StaticNeighbor>,
    /// Multicast neighbour solicitations before an address counts as unreachable.
    pub ndp_solicits: u8,
}

impl NetworkConfig {
    /// The link `spec` with the defaults of `qpipd`'s options: MTU 1500, no capture, no
    /// impairment, no static neighbours, RFC 4861's solicitations.
    pub fn new(spec: NetSpec) -> NetworkConfig {
        NetworkConfig {
            spec,
            mtu: crate::net::config::DEFAULT_MTU,
            pcap: None,
            impair: None,
            neighbors: Vec::new(),
            ndp_solicits: crate::net::neighbor::MAX_MULTICAST_SOLICIT,
        }
    }
}

impl Engine {
    /// Opens the link and starts the stack with the device's identity.
    pub fn attach_network(&mut self, cfg: &NetworkConfig) -> io::Result<()> {
        let link = backend::open_link(&cfg.spec, cfg.pcap.as_deref(), cfg.impair.as_ref())?;
        self.attach_link(cfg, link);
        Ok(())
    }

    /// As [`Engine::attach_network`], onto a link already open (`cfg.spec` only names it):
    /// an in-process [`backend::memory`] pair for benches and tests.
    pub fn attach_link(&mut self, cfg: &NetworkConfig, link: Box<dyn backend::Backend>) {
        self.net_config = Some(cfg.clone());
        let stack = self.new_stack(cfg);
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
        self.net = Some(Interface::new(stack, link));
    }

    fn new_stack(&self, cfg: &NetworkConfig) -> Stack {
        let mut c = NetConfig::new(self.identity.mac);
        c.addrs = self.identity.addrs.clone();
        c.mtu = cfg.mtu;
        c.neighbors = cfg.neighbors.clone();
        c.ndp_solicits = cfg.ndp_solicits;
        let mut s = Stack::new(&c, Instant::now());
        s.set_tcp(true);
        s
    }

    /// The identity changed (SET_MAC, ADD_ADDR, DEL_ADDR, reset): the stack follows. A new
    /// MAC means a new link-local address and new neighbours' view of us, so the stack
    /// starts afresh, as an interface does after `ip link set address`.
    pub(super) fn identity_changed(&mut self, mac_changed: bool) {
        let Some(cfg) = self.net_config.clone() else {
            return;
        };
        let Some(net) = self.net.as_mut() else { return };
        // A reset made TCP afresh: it builds super-segments again.
        self.tcp.set_gso(true);
        if mac_changed {
            let stack = self.new_stack(&cfg);
            let net = self.net.as_mut().expect("checked");
            net.stack = stack;
            net.flush();
            return;
        }
        let want = &self.identity.addrs;
        let have: Vec<_> = net.stack.addresses().to_vec();
        for (a, _) in &have {
            if !want.iter().any(|(w, _)| w == a) {
                net.stack.remove_address(a);
            }
        }
        for (a, p) in want {
            if !have.iter().any(|(h, _)| h == a) {
                net.stack.add_address(*a, *p);
            }
        }
        net.flush();
    }

    /// Sends a datagram to a destination that is not the device itself. Err(detail) when it
    /// cannot go (no network, no route, a source the stack refuses).
    pub(super) fn send_to_network(
        &mut self,
        src: Option<std::net::Ipv6Addr>,
        sport: u16,
        dst: std::net::Ipv6Addr,
        dport: u16,
        payload: &[u8],
    ) -> Result<(), u32> {
        use qpip_abi::cqe::*;
        let Some(net) = self.net.as_mut() else {
            return Err(CQE_DETAIL_NO_ROUTE);
        };
        let r = net
            .stack
            .send_udp(src, sport, dst, dport, payload, Instant::now());
        net.flush();
        match r {
            Ok(_) => Ok(()),
            Err(SendError::NoRoute | SendError::Local) => Err(CQE_DETAIL_NO_ROUTE),
            Err(SendError::BadDestination | SendError::BadSource) => Err(CQE_DETAIL_BAD_ADDRESS),
            Err(SendError::TooBig) => Err(CQE_DETAIL_NONE),
        }
    }

    /// Takes frames from the link and runs the network's timers. Returns whether anything
    /// happened.
    pub(super) fn poll_network(&mut self, mem: &GuestMemoryMmap) -> bool {
        // An idle engine that polls looks at its link (a system call) only now and then;
        // the pass before it sleeps always looks (its idle count is reset then).
        if self.idle_passes % super::idle::LINK_EVERY != 0 {
            return false;
        }
        let Some(mut net) = self.net.take() else {
            return false;
        };
        let now = Instant::now();
        if net.next_deadline().is_some_and(|t| t <= now) {
            net.poll_timers(now);
        }
        let n = net.poll_rx_upper(now, RX_BUDGET, |u| match u {
            Upper::Udp(d) => {
                let dgram = Datagram {
                    src: d.src,
                    src_port: d.sport,
                    dst: d.dst,
                    dst_port: d.dport,
                    payload: d.payload(),
                };
                if self.deliver_udp(mem, &dgram) {
                    Delivery::Delivered
                } else {
                    Delivery::NoPort
                }
            }
            Upper::Tcp(t) => match self.tcp_segment_in(mem, t.src, t.dst, t.segment()) {
                None => Delivery::Delivered,
                Some(why) => Delivery::Dropped(why),
            },
        });
        // Packets too big that lowered a path MTU: the connections to that destination
        // resend at the new size on the next TCP pass.
        let pmtu = net.stack.take_path_mtu_changes();
        self.net = Some(net);
        for &(dst, mtu) in &pmtu {
            debug!("path MTU to {dst} is now {mtu}");
            self.tcp.path_mtu_changed(dst, mtu, now);
        }
        // The segments TCP produced meanwhile go out now that the link is back.
        self.flush_tcp();
        n > 0 || !pmtu.is_empty()
    }
}
