//! The protocol state of the device's network: its identity on the link, neighbour
//! discovery, ICMPv6, path MTU, fragmentation and reassembly, and UDP checksums; TCP
//! segments (built by [`crate::net::tcp`]) go out through [`Stack::send_tcp`] and come in
//! beside datagrams.
//!
//! IPv4 runs beside IPv6 (in `ipv4.rs`): an IPv4 address is kept in its IPv4-mapped form
//! (`::ffff:a.b.c.d`), so the same calls send and receive over either family, and the
//! neighbour cache, reassembly and path MTUs hold both kinds of address. ARP takes NDP's
//! place for IPv4 neighbours, ICMPv4 ICMPv6's.
//!
//! The stack is a pure state machine driven by the engine thread: frames in through
//! [`Stack::receive`], datagrams out through [`Stack::send_udp`], timers through
//! [`Stack::poll`] and [`Stack::next_deadline`], and every frame it wants on the wire is
//! taken with [`Stack::pop_tx`]. It never blocks and never reads a clock: `now` is given.
//!
//! Routing: a destination is on-link if it is link-local, inside the prefix of a
//! configured address of its family, or has a static neighbour entry (an IPv4 destination
//! also needs an IPv4 address of the device to send from); it is then its own next hop.
//! Any other goes to the gateway of the best route of the function's [`RouteTable`]
//! (longest prefix, then lowest metric) whose gateway is on-link now; link-local
//! destinations of either family never take a route. The neighbour cache resolves and
//! holds next hops, so every destination behind one gateway shares its entry; path MTUs
//! stay per destination. The device learns no routes by itself (it ignores router
//! advertisements and redirects); a destination without a route is refused with
//! [`SendError::NoRoute`]. Packets to the device's own addresses (and `::1`) take the
//! loopback: they wait in the stack ([`Stack::pop_loopback`]) and come back up through
//! [`Stack::receive_looped`] as if received, so the layers above have one path for both.
//! A stack without a link ([`NetConfig::link`] false: a device without `--net`) has only
//! the loopback.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use log::debug;

use super::config::{NetConfig, StaticNeighbor, MIN_MTU};
use super::frag::{self, Outcome, Reassembler};
use super::gso;
use super::neighbor::{self, Action, NeighborCache, StaticError};
use super::route::{Route, RouteError, RouteTable};
use super::stats::{DropReason, NetStats};
use super::wire::{self, icmp, proto, Mac, IPV6_LEN};

mod icmpv6;
mod ipv4;
mod rx;
mod steer;
mod unreachable;

pub use unreachable::Unreachable;

pub use steer::RawRx;

pub use ipv4::{MAX_UDP4_PAYLOAD, MIN_IPV4_PATH_MTU};

/// Largest UDP payload: the IPv6 payload length field (65535) less the UDP header.
pub const MAX_UDP_PAYLOAD: usize = 65535 - wire::UDP_LEN;

/// ICMPv6 error rate limit (RFC 4443 §2.4 (f)): a token bucket.
pub const ICMP_ERROR_RATE: f64 = 100.0; // per second
pub const ICMP_ERROR_BURST: f64 = 50.0;

/// How long a path MTU learned from a packet too big lasts (RFC 8201 §4: at least 5
/// minutes, 10 recommended), and how many destinations are remembered.
pub const PMTU_TIMEOUT: Duration = Duration::from_secs(600);
pub const MAX_PMTU_ENTRIES: usize = 1024;

/// Frames produced and not yet taken by [`Stack::pop_tx`] (beyond this they are dropped
/// and counted as transmit errors: the wire cannot take them anyway).
pub const MAX_TX_QUEUE: usize = 8192;

/// Why a datagram could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The destination is not on-link and no route leads to it (see the module
    /// documentation).
    NoRoute,
    /// Unspecified, or a multicast group beyond link-local scope.
    BadDestination,
    /// The source given is not one of the device's addresses.
    BadSource,
    /// The payload exceeds [`MAX_UDP_PAYLOAD`].
    TooBig,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            SendError::NoRoute => "no route to the destination",
            SendError::BadDestination => "not a destination address",
            SendError::BadSource => "the source is not one of the device's addresses",
            SendError::TooBig => "datagram larger than 65527 bytes",
        })
    }
}

impl std::error::Error for SendError {}

/// A UDP datagram that arrived for one of the device's addresses, checksum verified.
/// It borrows the received frame, or owns the reassembled packet.
#[derive(Debug)]
pub struct UdpIn<'f> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub sport: u16,
    pub dport: u16,
    /// The IPv6 packet (the fixed header, any extension headers, UDP): what an ICMPv6
    /// error about it quotes.
    packet: Cow<'f, [u8]>,
    payload_at: usize,
    payload_len: usize,
}

impl UdpIn<'_> {
    pub fn payload(&self) -> &[u8] {
        &self.packet[self.payload_at..self.payload_at + self.payload_len]
    }

    /// Whether it arrived in fragments.
    pub fn reassembled(&self) -> bool {
        matches!(self.packet, Cow::Owned(_))
    }
}

/// A TCP segment that arrived for one of the device's addresses (its checksum is the TCP
/// layer's to verify, with the segment parser). Only delivered when the stack was told
/// there is a TCP layer above it ([`Stack::set_tcp`]).
#[derive(Debug)]
pub struct TcpIn<'f> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    packet: Cow<'f, [u8]>,
    segment_at: usize,
}

impl TcpIn<'_> {
    /// The TCP header and payload.
    pub fn segment(&self) -> &[u8] {
        &self.packet[self.segment_at..]
    }
}

/// An upper-layer message for the device.
#[derive(Debug)]
pub enum Upper<'f> {
    Udp(UdpIn<'f>),
    Tcp(TcpIn<'f>),
}

/// What the IPv6 header and the link said about a received packet, carried along its
/// header chain to whoever handles it.
#[derive(Clone, Copy)]
pub(super) struct Arrival {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub hop_limit: u8,
    /// The Ethernet source (our own MAC for what came through the loopback).
    pub eth_src: Mac,
    pub now: Instant,
}

impl Arrival {
    fn of(ip: &wire::Ipv6Packet<'_>, eth_src: Mac, now: Instant) -> Arrival {
        Arrival {
            src: ip.src,
            dst: ip.dst,
            hop_limit: ip.hop_limit,
            eth_src,
            now,
        }
    }

    /// The same for an IPv4 packet: its TTL stands for the hop limit.
    fn of_ipv4(ip: &wire::Ipv4Packet<'_>, eth_src: Mac, now: Instant) -> Arrival {
        Arrival {
            src: ip.src,
            dst: ip.dst,
            hop_limit: ip.ttl,
            eth_src,
            now,
        }
    }
}

/// What the engine did with a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A QP is bound to the port (whether or not it had a buffer for it).
    Delivered,
    /// No QP is bound to the port: the stack answers "port unreachable".
    NoPort,
    /// Nothing of the engine's owns it (no bound port, no connection or listener) and a
    /// raw QP beside it takes it ([`steer`]): no answer, no drop counted.
    Steered,
    /// The upper layer refused the packet (a TCP segment that does not parse, a bad
    /// checksum): the stack counts the drop under this reason.
    Dropped(DropReason),
}

pub struct Stack {
    mac: Mac,
    link_local: Ipv6Addr,
    addrs: Vec<(Ipv6Addr, u8)>,
    mtu: usize,
    neighbors: NeighborCache,
    /// The static entries of the neighbour cache, which are on-link whatever their address.
    static_neighbors: Vec<StaticNeighbor>,
    routes: RouteTable,
    pmtu: HashMap<Ipv6Addr, (usize, Instant)>,
    /// Path MTUs changed since [`Stack::take_path_mtu_changes`] (one entry a destination):
    /// lowered by a packet too big, or back to the link's when that news expired.
    pmtu_changes: Vec<(Ipv6Addr, usize)>,
    /// Destination unreachables about our TCP segments, for TCP
    /// ([`Stack::take_unreachable`]).
    unreachable: Vec<Unreachable>,
    reasm: Reassembler,
    /// Frames for the wire, each with 0 or the segment size of a TCP super-frame.
    tx: VecDeque<(Vec<u8>, u16)>,
    /// Packets to the device's own addresses, waiting to come back up (Ethernet header
    /// blank, as built).
    loopback: VecDeque<Vec<u8>>,
    /// Whether there is a link beneath ([`NetConfig::link`]).
    link: bool,
    stats: NetStats,
    icmp_tokens: f64,
    icmp_refilled: Option<Instant>,
    rng: fastrand::Rng,
    actions: Vec<Action>,
    /// Whether TCP segments go up ([`Upper::Tcp`]) or are refused like any unsupported
    /// next header.
    tcp: bool,
    /// The identification of the next unfragmented IPv4 packet (fragmented ones take a
    /// random one).
    ipv4_id: u16,
    /// A raw QP is beside the engine ([`steer`]).
    raw_beside: bool,
    /// What the last frame from the link is to it.
    raw_rx: RawRx,
}

impl Stack {
    /// A stack with the given identity. Duplicate address detection probes for each
    /// address are queued at once (see [`Stack::add_address`]).
    pub fn new(config: &NetConfig, now: Instant) -> Stack {
        let seed = config.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
                ^ (std::process::id() as u64) << 32
        });
        let mut neighbors = NeighborCache::new(seed ^ 0x6e65_6967);
        neighbors.set_max_multicast_solicit(config.ndp_solicits);
        let mut nothing_waits = Vec::new();
        for n in &config.neighbors {
            neighbors.add_static(n.addr, n.mac, now, &mut nothing_waits);
        }
        let mut routes = RouteTable::default();
        routes.set(&config.routes);
        let mut s = Stack {
            mac: config.mac,
            link_local: wire::link_local(&config.mac),
            addrs: Vec::new(),
            mtu: config.mtu.clamp(MIN_MTU, super::config::MAX_MTU),
            neighbors,
            static_neighbors: config.neighbors.clone(),
            routes,
            pmtu: HashMap::new(),
            pmtu_changes: Vec::new(),
            unreachable: Vec::new(),
            reasm: Reassembler::new(),
            tx: VecDeque::new(),
            loopback: VecDeque::new(),
            link: config.link,
            stats: NetStats::default(),
            icmp_tokens: ICMP_ERROR_BURST,
            icmp_refilled: None,
            rng: fastrand::Rng::with_seed(seed),
            actions: Vec::new(),
            tcp: false,
            ipv4_id: 0,
            raw_beside: false,
            raw_rx: RawRx::default(),
        };
        s.ipv4_id = s.rng.u16(..);
        s.send_dad_probe(s.link_local);
        for &(a, plen) in &config.addrs {
            s.add_address(a, plen);
        }
        s
    }

    /// There is a TCP layer above: [`Stack::receive_upper`] delivers TCP segments.
    pub fn set_tcp(&mut self, on: bool) {
        self.tcp = on;
    }

    // ---- identity --------------------------------------------------------------------

    pub fn mac(&self) -> Mac {
        self.mac
    }

    pub fn link_local(&self) -> Ipv6Addr {
        self.link_local
    }

    /// The configured addresses (the link-local one is not among them).
    pub fn addresses(&self) -> &[(Ipv6Addr, u8)] {
        &self.addrs
    }

    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Adds an address. The device uses it at once (optimistically, in the spirit of RFC
    /// 4429) and sends one duplicate address detection probe: if another station answers
    /// for it, the conflict is logged and counted (`duplicate_address`).
    pub fn add_address(&mut self, addr: Ipv6Addr, plen: u8) {
        if addr == self.link_local || self.addrs.iter().any(|(a, _)| *a == addr) {
            return;
        }
        self.addrs.push((addr, plen.min(128)));
        if wire::is_ipv4(&addr) {
            self.send_gratuitous_arp(addr);
        } else {
            self.send_dad_probe(addr);
        }
    }

    pub fn remove_address(&mut self, addr: &Ipv6Addr) {
        self.addrs.retain(|(a, _)| a != addr);
    }

    /// Makes the configured addresses exactly `addrs` (e.g. after an admin command or a
    /// reset): new ones are added (and probed), missing ones removed.
    pub fn set_addresses(&mut self, addrs: &[(Ipv6Addr, u8)]) {
        self.addrs
            .retain(|(a, _)| addrs.iter().any(|(b, _)| a == b));
        for (a, p) in addrs {
            match self.addrs.iter_mut().find(|(x, _)| x == a) {
                Some(e) => e.1 = (*p).min(128),
                None => self.add_address(*a, *p),
            }
        }
    }

    /// The routes to destinations off the link.
    pub fn routes(&self) -> &[Route] {
        self.routes.routes()
    }

    /// Adds a route (see [`RouteTable::add`]). Its gateway need not be on-link yet: the
    /// route is used while it is.
    pub fn add_route(&mut self, r: Route) -> Result<(), RouteError> {
        self.routes.add(r)
    }

    /// Removes the route with this destination, prefix length and metric.
    pub fn remove_route(
        &mut self,
        dest: &Ipv6Addr,
        prefix_len: u8,
        metric: u32,
    ) -> Result<Route, RouteError> {
        self.routes.remove(dest, prefix_len, metric)
    }

    /// Makes the routes exactly `routes` (after a reset).
    pub fn set_routes(&mut self, routes: &[Route]) {
        self.routes.set(routes);
    }

    /// The static neighbours (`--neighbor`, ADD_NEIGH).
    pub fn static_neighbors(&self) -> &[StaticNeighbor] {
        &self.static_neighbors
    }

    /// Makes `n.addr` a static neighbour at `n.mac`, in place of its entry if it had one
    /// (static or learned): packets waiting for its resolution go at once. Refused beyond
    /// [`neighbor::MAX_STATIC`] static entries.
    pub fn add_static_neighbor(
        &mut self,
        n: StaticNeighbor,
        now: Instant,
    ) -> Result<(), StaticError> {
        let full = self.static_neighbors.len() >= neighbor::MAX_STATIC;
        match self.static_neighbors.iter_mut().find(|s| s.addr == n.addr) {
            Some(s) => s.mac = n.mac,
            None if full => return Err(StaticError::Full),
            None => self.static_neighbors.push(n),
        }
        self.neighbors
            .add_static(n.addr, n.mac, now, &mut self.actions);
        self.run_actions();
        Ok(())
    }

    /// Removes the static neighbour `addr`: the address is resolved again (and on-link
    /// again only if an address's prefix holds it).
    pub fn remove_static_neighbor(&mut self, addr: &Ipv6Addr) -> Result<(), StaticError> {
        let before = self.static_neighbors.len();
        self.static_neighbors.retain(|s| s.addr != *addr);
        if self.static_neighbors.len() == before {
            return Err(StaticError::NotFound);
        }
        self.neighbors.remove_static(addr);
        Ok(())
    }

    /// Makes the static neighbours exactly `ns` (after a reset).
    pub fn set_static_neighbors(&mut self, ns: &[StaticNeighbor], now: Instant) {
        let gone: Vec<Ipv6Addr> = self
            .static_neighbors
            .iter()
            .filter(|s| !ns.contains(s))
            .map(|s| s.addr)
            .collect();
        for a in gone {
            let _ = self.remove_static_neighbor(&a);
        }
        for n in ns {
            if !self.static_neighbors.contains(n) {
                // A reset's set fits: it is what the device started with.
                self.static_neighbors.push(*n);
                self.neighbors
                    .add_static(n.addr, n.mac, now, &mut self.actions);
            }
        }
        self.run_actions();
    }

    /// Whether `a` is one of the device's own unicast addresses (or loopback: `::1`,
    /// IPv4's 127.0.0.0/8).
    pub fn is_local(&self, a: &Ipv6Addr) -> bool {
        is_loopback(a) || *a == self.link_local || self.addrs.iter().any(|(x, _)| x == a)
    }

    fn is_own_unicast(&self, a: &Ipv6Addr) -> bool {
        *a == self.link_local || self.addrs.iter().any(|(x, _)| x == a)
    }

    /// Multicast groups the device listens to: all-nodes and its solicited-node groups.
    fn is_member(&self, g: &Ipv6Addr) -> bool {
        *g == wire::ALL_NODES
            || *g == wire::solicited_node(&self.link_local)
            || self
                .addrs
                .iter()
                .any(|(a, _)| wire::solicited_node(a) == *g)
    }

    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    pub(crate) fn stats_mut(&mut self) -> &mut NetStats {
        &mut self.stats
    }

    /// The neighbour cache (for inspection).
    pub fn neighbors(&self) -> &NeighborCache {
        &self.neighbors
    }

    /// Reassemblies in progress.
    pub fn reassemblies(&self) -> usize {
        self.reasm.in_progress()
    }

    /// An upper layer saw forward progress with `addr` (RFC 4861 §7.3.1).
    pub fn confirm_reachable(&mut self, addr: &Ipv6Addr, now: Instant) {
        self.neighbors.confirm(addr, now);
    }

    // ---- routing ----------------------------------------------------------------------

    /// The next hop toward `dst`: `dst` itself when it is the device (loopback), a
    /// multicast group or on-link; else the gateway of its route (see the module
    /// documentation).
    pub fn route(&self, dst: &Ipv6Addr) -> Result<Ipv6Addr, SendError> {
        if self.is_local(dst) {
            return Ok(*dst);
        }
        if dst.is_unspecified() {
            return Err(SendError::BadDestination);
        }
        if !self.link {
            return Err(SendError::NoRoute);
        }
        if wire::is_ipv4(dst) {
            return self.route_ipv4(dst);
        }
        if dst.is_multicast() {
            // Link-local scope only: nothing routes further for us.
            return match dst.segments()[0] & 0x000f {
                1 | 2 => Ok(*dst),
                _ => Err(SendError::BadDestination),
            };
        }
        self.next_hop(dst)
    }

    /// The next hop toward a unicast `dst` on the link or beyond it.
    fn next_hop(&self, dst: &Ipv6Addr) -> Result<Ipv6Addr, SendError> {
        if self.on_link(dst) {
            return Ok(*dst);
        }
        if wire::is_link_local(dst) || wire::ipv4_of(dst).is_some_and(|v4| v4.is_link_local()) {
            return Err(SendError::NoRoute);
        }
        self.routes
            .lookup(dst, |gw| self.on_link(gw))
            .ok_or(SendError::NoRoute)
    }

    /// Whether `a` is on the link: an IPv6 link-local address, inside the prefix of one of
    /// the device's addresses of its family, or a static neighbour (an IPv4 one only when
    /// the device has an IPv4 address to send from).
    fn on_link(&self, a: &Ipv6Addr) -> bool {
        let v4 = wire::is_ipv4(a);
        let own = || self.addrs.iter().filter(|(x, _)| wire::is_ipv4(x) == v4);
        !v4 && wire::is_link_local(a)
            || own().any(|(x, plen)| wire::in_prefix(a, x, *plen))
            || self.static_neighbors.iter().any(|n| n.addr == *a) && (!v4 || own().next().is_some())
    }

    /// The source address for packets to `dst` (RFC 6724, reduced to what an on-link host
    /// needs): `dst` itself when it is the device's own (rule 1, same address), link-local
    /// for link-local and multicast destinations, otherwise a configured address whose
    /// prefix holds `dst` (the longest), else one whose prefix holds the gateway of `dst`'s
    /// route, else the first configured address.
    /// An IPv4 destination gets an IPv4 source (the link-local address when the device has
    /// none, which [`Stack::route`] refuses anyway).
    pub fn select_source(&self, dst: &Ipv6Addr) -> Ipv6Addr {
        if self.is_local(dst) {
            return *dst;
        }
        if wire::is_link_local(dst) || dst.is_multicast() {
            return self.link_local;
        }
        let v4 = wire::is_ipv4(dst);
        let family = || self.addrs.iter().filter(|(a, _)| wire::is_ipv4(a) == v4);
        let holding = |x: &Ipv6Addr| {
            family()
                .filter(|(a, plen)| wire::in_prefix(x, a, *plen))
                .max_by_key(|(_, plen)| *plen)
        };
        holding(dst)
            .or_else(|| {
                let gw = self.routes.lookup(dst, |g| self.on_link(g))?;
                holding(&gw)
            })
            .or(family().next())
            .map(|(a, _)| *a)
            .unwrap_or(self.link_local)
    }

    /// The largest UDP payload toward `dst`: what the IP length field leaves after the
    /// headers ([`MAX_UDP_PAYLOAD`] over IPv6, [`MAX_UDP4_PAYLOAD`] over IPv4).
    pub fn max_udp_payload(dst: &Ipv6Addr) -> usize {
        if wire::is_ipv4(dst) {
            MAX_UDP4_PAYLOAD
        } else {
            MAX_UDP_PAYLOAD
        }
    }

    /// The MTU toward `dst`: the link's, or less if a packet too big said so.
    pub fn path_mtu(&self, dst: &Ipv6Addr, now: Instant) -> usize {
        match self.pmtu.get(dst) {
            Some(&(mtu, until)) if now < until => mtu.min(self.mtu),
            _ => self.mtu,
        }
    }

    // ---- sending ----------------------------------------------------------------------

    /// Each destination whose path MTU changed since the last call, with its path MTU now,
    /// for the transports (`ConnectionTable::path_mtu_changed`): lowered by a packet too
    /// big, TCP cuts its segments to fit; back to the link's MTU when the lowered value
    /// expired ([`PMTU_TIMEOUT`] after the last packet too big: RFC 8201 §4 and §5.3 — a
    /// larger path MTU is tried no sooner than 5 minutes later), TCP's segments grow again
    /// (and a packet too big lowers them once more if the path still needs it).
    pub fn take_path_mtu_changes(&mut self) -> Vec<(Ipv6Addr, usize)> {
        std::mem::take(&mut self.pmtu_changes)
    }

    /// Sends a UDP datagram, in fragments if it does not fit the path MTU. `src` None picks
    /// the source with [`Stack::select_source`]. A datagram waiting for its next hop's
    /// address counts as sent (it may still be lost if resolution fails, as on any link).
    /// Returns the source address used.
    pub fn send_udp(
        &mut self,
        src: Option<Ipv6Addr>,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
        payload: &[u8],
        now: Instant,
    ) -> Result<Ipv6Addr, SendError> {
        if payload.len() > Stack::max_udp_payload(&dst) {
            return Err(SendError::TooBig);
        }
        self.route(&dst).inspect_err(|e| {
            if *e == SendError::NoRoute {
                self.stats.no_route += 1;
            }
        })?;
        let src = match src {
            Some(s) if is_unspecified(&s) => self.select_source(&dst),
            Some(s) if self.is_own_unicast(&s) => s,
            // Loopback only toward the device itself: it must never reach a link.
            Some(s) if is_loopback(&s) && self.is_local(&dst) => s,
            Some(_) => return Err(SendError::BadSource),
            None => self.select_source(&dst),
        };
        if wire::is_ipv4(&src) != wire::is_ipv4(&dst) {
            return Err(SendError::BadSource);
        }
        let dgram = wire::udp(&src, &dst, sport, dport, payload);
        self.send_ip(src, dst, proto::UDP, wire::DEFAULT_HOP_LIMIT, &dgram, now)?;
        self.stats.udp_tx += 1;
        Ok(src)
    }

    /// Sends an upper-layer message (its checksum already computed over `src` and `dst`)
    /// in an IPv6 packet, fragmented to the path MTU if needed. For the transports (UDP
    /// here, TCP later).
    pub fn send_ip(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next_header: u8,
        hop_limit: u8,
        upper: &[u8],
        now: Instant,
    ) -> Result<(), SendError> {
        if wire::is_ipv4(&dst) {
            return self.send_ipv4(src, dst, next_header, hop_limit, upper, now);
        }
        let _stage = crate::stages::span(crate::stages::Stage::BuildHeaders);
        let hop = self.route(&dst)?;
        if upper.len() > u16::MAX as usize {
            return Err(SendError::TooBig);
        }
        if self.is_local(&dst) {
            self.loop_back(wire::ipv6_packet(&src, &dst, next_header, hop_limit, upper));
            return Ok(());
        }
        let mtu = self.path_mtu(&dst, now);
        if IPV6_LEN + upper.len() <= mtu {
            let frame = wire::ipv6_packet(&src, &dst, next_header, hop_limit, upper);
            self.output(hop, frame, now);
            return Ok(());
        }
        // Too big for the path: fragment at the source (RFC 8200 §4.5). Identifiers are
        // random, so they cannot be predicted (RFC 7739).
        let id = self.rng.u32(..);
        let mut n = 0;
        for (offset, more, data) in frag::split(upper, mtu, IPV6_LEN + wire::FRAG_LEN) {
            let frame =
                wire::ipv6_fragment(&src, &dst, next_header, hop_limit, id, offset, more, data);
            self.output(hop, frame, now);
            n += 1;
        }
        self.stats.fragmented_tx += 1;
        self.stats.fragments_tx += n;
        Ok(())
    }

    /// Sends a TCP segment (checksum computed over `src` and `dst`) that may be a
    /// super-segment: `mss` not 0 and more payload than one segment of `mss` bytes. It
    /// goes as one frame, to be cut by the link ([`Stack::pop_tx_gso`]), when the
    /// neighbour's address is known; otherwise it is cut here and each segment goes
    /// through [`Stack::send_ip`] (which resolves the address).
    pub fn send_tcp(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        segment: &[u8],
        mss: u16,
        now: Instant,
    ) -> Result<(), SendError> {
        if self.is_local(&dst) {
            // The loopback takes a super-segment whole: nothing on the way cuts it.
            return self.send_ip(src, dst, proto::TCP, hop_limit, segment, now);
        }
        let mtu = self.path_mtu(&dst, now);
        // The pieces must fit the path (it may have shrunk since the segment was built).
        let thl = segment.get(12).map_or(0, |b| (b >> 4) as usize * 4);
        let iph = wire::ip_header_len(&dst);
        let mss = (mss as usize).min(mtu.saturating_sub(iph + thl).max(1));
        if mss == 0 || thl < 20 || segment.len() <= thl + mss {
            // One segment (the peer's MSS, not only the MTU, sets the piece size).
            return self.send_ip(src, dst, proto::TCP, hop_limit, segment, now);
        }
        let mss = mss as u16;
        let _stage = crate::stages::span(crate::stages::Stage::BuildHeaders);
        let hop = self.route(&dst)?;
        if segment.len() > u16::MAX as usize {
            return Err(SendError::TooBig);
        }
        let mac = match self.neighbors.get(&hop) {
            Some((
                neighbor::State::Reachable
                | neighbor::State::Static
                | neighbor::State::Delay
                | neighbor::State::Probe,
                Some(mac),
            )) if !dst.is_multicast() => mac,
            _ => {
                let mut pieces = Vec::new();
                gso::split_tcp(&src, &dst, segment, mss as usize, |p| pieces.push(p))
                    .map_err(|_| SendError::TooBig)?;
                for p in pieces {
                    self.send_ip(src, dst, proto::TCP, hop_limit, &p, now)?;
                }
                return Ok(());
            }
        };
        let mut frame = if iph == IPV6_LEN {
            wire::ipv6_packet(&src, &dst, proto::TCP, hop_limit, segment)
        } else {
            if !wire::is_ipv4(&src) || wire::IPV4_LEN + segment.len() > u16::MAX as usize {
                return Err(SendError::TooBig);
            }
            // Each piece cut from it takes the next identification ([`gso::split_frame`]).
            let pieces = segment.len().div_ceil(mss as usize) as u16;
            let id = self.ipv4_id.wrapping_add(1);
            self.ipv4_id = self.ipv4_id.wrapping_add(pieces);
            let f = wire::Ipv4Fields::whole(proto::TCP, hop_limit, id, true);
            wire::ipv4_packet(&src, &dst, &f, segment)
        };
        wire::write_ethernet(&mut frame, &mac, &self.mac);
        self.push_tx_gso(frame, mss);
        Ok(())
    }

    /// Puts a frame (Ethernet header still blank) on its way to `hop`, the next hop
    /// [`Stack::route`] chose (a multicast group, or a neighbour to resolve).
    fn output(&mut self, hop: Ipv6Addr, mut frame: Vec<u8>, now: Instant) {
        if hop.is_multicast() {
            wire::write_ethernet(&mut frame, &wire::multicast_mac(&hop), &self.mac);
            self.push_tx(frame);
            return;
        }
        self.neighbors.resolve(hop, frame, now, &mut self.actions);
        self.run_actions();
    }

    fn push_tx(&mut self, frame: Vec<u8>) {
        self.push_tx_gso(frame, 0);
    }

    fn push_tx_gso(&mut self, frame: Vec<u8>, gso: u16) {
        if self.tx.len() >= MAX_TX_QUEUE {
            self.stats.tx_errors += 1;
            return;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += frame.len() as u64;
        self.tx.push_back((frame, gso));
    }

    /// The next frame for the wire (a TCP super-frame is cut into its segments first).
    pub fn pop_tx(&mut self) -> Option<Vec<u8>> {
        let (f, gso) = self.tx.pop_front()?;
        if gso == 0 {
            return Some(f);
        }
        let mut pieces = Vec::new();
        let _ = gso::split_frame(&f, gso as usize, |p| pieces.push(p));
        for p in pieces.into_iter().rev() {
            self.tx.push_front((p, 0));
        }
        self.tx.pop_front().map(|(f, _)| f)
    }

    /// The next frame for the wire and, for a TCP super-frame, the size of the segments
    /// to cut it into (else 0): for a link that may take it whole
    /// ([`crate::backend::Backend::send_gso`]).
    pub fn pop_tx_gso(&mut self) -> Option<(Vec<u8>, u16)> {
        self.tx.pop_front()
    }

    pub fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    /// Queues a packet for the device itself; bounded like the transmit queue.
    fn loop_back(&mut self, packet: Vec<u8>) {
        if self.loopback.len() >= MAX_TX_QUEUE {
            self.stats.tx_errors += 1;
            return;
        }
        self.stats.looped += 1;
        self.loopback.push_back(packet);
    }

    /// The next packet sent to the device's own addresses, for [`Stack::receive_looped`].
    pub fn pop_loopback(&mut self) -> Option<Vec<u8>> {
        self.loopback.pop_front()
    }

    /// What the layer above did with a packet: a UDP datagram for no port is answered
    /// "port unreachable"; a drop is counted.
    pub fn delivered(&mut self, u: &Upper<'_>, d: Delivery, now: Instant) {
        match d {
            Delivery::Delivered => {}
            Delivery::NoPort => {
                if let Upper::Udp(d) = u {
                    self.port_unreachable(d, now);
                }
            }
            Delivery::Steered => {
                self.raw_give();
                if matches!(u, Upper::Tcp(_)) {
                    // TCP verified the segment's checksum before looking for its owner.
                    self.raw_csum_verified();
                }
            }
            Delivery::Dropped(why) => {
                if why == DropReason::BadChecksum {
                    // The kernel verifies and counts it too.
                    self.raw_give();
                }
                self.stats.drop(why)
            }
        }
    }

    /// Queues a frame the raw QP sends (checked by the engine's raw unit): after what the
    /// stack queued before it, counted as the stack's own. `gso` as for
    /// [`Stack::pop_tx_gso`].
    pub fn send_raw(&mut self, frame: Vec<u8>, gso: u16) {
        self.push_tx_gso(frame, gso);
    }

    /// Whether packets wait on the loopback.
    pub fn loopback_pending(&self) -> bool {
        !self.loopback.is_empty()
    }

    fn run_actions(&mut self) {
        let mut actions = std::mem::take(&mut self.actions);
        for a in actions.drain(..) {
            match a {
                Action::Send(mut f, mac) => {
                    wire::write_ethernet(&mut f, &mac, &self.mac);
                    self.push_tx(f);
                }
                Action::SolicitMulticast(target) if wire::is_ipv4(&target) => {
                    self.send_arp_request(target, None)
                }
                Action::SolicitUnicast(target, mac) if wire::is_ipv4(&target) => {
                    self.send_arp_request(target, Some(mac))
                }
                Action::SolicitMulticast(target) => {
                    let group = wire::solicited_node(&target);
                    self.send_ns(target, group, wire::multicast_mac(&group));
                }
                Action::SolicitUnicast(target, mac) => self.send_ns(target, target, mac),
                Action::Failed(ip, n) => {
                    debug!("neighbour {ip} did not answer; {n} packets dropped");
                    self.stats.resolution_failed += n as u64;
                }
                Action::Overflow => self.stats.neighbor_queue_overflow += 1,
            }
        }
        self.actions = actions;
    }

    // ---- timers -----------------------------------------------------------------------

    /// Runs the timers that are due: neighbour solicitation retransmissions and probes,
    /// reassembly timeouts. Frames it produces wait in [`Stack::pop_tx`].
    pub fn poll(&mut self, now: Instant) {
        self.neighbors.poll(now, &mut self.actions);
        self.run_actions();
        let mut expired = Vec::new();
        self.reasm.poll(now, &mut expired);
        self.account_expired(expired, now);
        self.expire_path_mtus(now);
    }

    /// Forgets the path MTUs whose time is up; their destinations are back to the link's.
    fn expire_path_mtus(&mut self, now: Instant) {
        let gone: Vec<Ipv6Addr> = self
            .pmtu
            .iter()
            .filter(|(_, (_, until))| now >= *until)
            .map(|(a, _)| *a)
            .collect();
        for a in gone {
            self.pmtu.remove(&a);
            debug!("path MTU to {a} is back to the link's {}", self.mtu);
            self.path_mtu_news(a, self.mtu);
        }
    }

    /// Records that `dst`'s path MTU is now `mtu`, for [`Stack::take_path_mtu_changes`].
    fn path_mtu_news(&mut self, dst: Ipv6Addr, mtu: usize) {
        match self.pmtu_changes.iter_mut().find(|(a, _)| *a == dst) {
            // The latest news is the truth (a packet too big only ever lowers it).
            Some(c) => c.1 = mtu,
            // Bounded like the path MTU cache: beyond, the oldest news goes (its
            // destination's packets are still cut to fit by the IPv6 layer).
            None => {
                if self.pmtu_changes.len() >= MAX_PMTU_ENTRIES {
                    self.pmtu_changes.remove(0);
                }
                self.pmtu_changes.push((dst, mtu));
            }
        }
    }

    /// Hands a checked fragment of either family to the reassembler and counts what came
    /// of it: the packet's next header (IPv4: protocol) and data once it is complete.
    fn reassemble(&mut self, f: frag::Fragment, now: Instant) -> Option<(u8, Vec<u8>)> {
        let mut expired = Vec::new();
        let outcome = self.reasm.insert(f, now, &mut expired);
        self.account_expired(expired, now);
        match outcome {
            Outcome::Held => None,
            Outcome::Duplicate => {
                self.stats.duplicate_fragments += 1;
                None
            }
            Outcome::Overlap(held) => {
                self.stats.drops[DropReason::FragmentOverlap as usize] += 1 + held as u64;
                None
            }
            Outcome::Inconsistent(held) => {
                self.stats.drops[DropReason::BadFragment as usize] += 1 + held as u64;
                None
            }
            Outcome::Complete(next_header, data) => {
                self.stats.reassembled += 1;
                Some((next_header, data))
            }
        }
    }

    fn account_expired(&mut self, expired: Vec<frag::Expired>, now: Instant) {
        for e in expired {
            if !e.timed_out {
                continue;
            }
            self.stats.reassembly_timeouts += 1;
            self.stats.drops[DropReason::ReassemblyFailed as usize] += e.fragments as u64;
            match e.first {
                Some(first) if first.first().is_some_and(|b| b >> 4 == 4) => self.icmpv4_error(
                    &first,
                    wire::icmp4::TIME_EXCEEDED,
                    wire::icmp4::TIME_EXCEEDED_REASSEMBLY,
                    0,
                    now,
                ),
                Some(first) => self.icmp_error(
                    &first,
                    icmp::TIME_EXCEEDED,
                    icmp::TIME_EXCEEDED_REASSEMBLY,
                    0,
                    false,
                    now,
                ),
                None => {}
            }
        }
    }

    /// When [`Stack::poll`] next has work (None: only incoming frames can make work).
    pub fn next_deadline(&mut self) -> Option<Instant> {
        // A lowered path MTU's expiry is due too: connections grow their segments then.
        let pmtu = self.pmtu.values().map(|&(_, until)| until).min();
        [
            self.neighbors.next_deadline(),
            self.reasm.next_deadline(),
            pmtu,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Whether `a` is a loopback address of either family (`::1`, 127.0.0.0/8).
pub(super) fn is_loopback(a: &Ipv6Addr) -> bool {
    a.is_loopback() || wire::ipv4_of(a).is_some_and(|v| v.is_loopback())
}

/// Whether `a` is the unspecified address of either family (`::`, 0.0.0.0).
pub(super) fn is_unspecified(a: &Ipv6Addr) -> bool {
    a.is_unspecified() || wire::ipv4_of(a).is_some_and(|v| v.is_unspecified())
}
