//! ICMPv6: neighbour solicitations and advertisements in and out (the neighbour cache's
//! actions made frames), echo, errors sent with their rate limit, and packets too big
//! that lower a path MTU.

use std::net::Ipv6Addr;
use std::time::Instant;

use log::{debug, warn};

use crate::net::config::MIN_MTU;
use crate::net::stats::DropReason;
use crate::net::wire::{self, icmp, proto, Mac, MacDisplay, ParseError, IPV6_LEN};

use super::*;

impl Stack {
    /// A neighbour solicitation for `target`, to `dst` (its solicited-node group, or itself
    /// when probing reachability), with our link-layer address.
    pub(super) fn send_ns(&mut self, target: Ipv6Addr, dst: Ipv6Addr, dst_mac: Mac) {
        let src = self.select_source(&target);
        let body = wire::ns_body(&target, Some(&self.mac));
        let msg = wire::icmpv6(&src, &dst, icmp::NEIGHBOR_SOLICIT, 0, &body);
        let mut f = wire::ipv6_packet(&src, &dst, proto::ICMPV6, wire::NDP_HOP_LIMIT, &msg);
        wire::write_ethernet(&mut f, &dst_mac, &self.mac);
        self.stats.ns_tx += 1;
        self.push_tx(f);
    }

    /// A duplicate address detection probe: from the unspecified address, no link-layer
    /// option (RFC 4862 §5.4.2).
    pub(super) fn send_dad_probe(&mut self, addr: Ipv6Addr) {
        if !self.link {
            return; // nobody to ask
        }
        let src = Ipv6Addr::UNSPECIFIED;
        let group = wire::solicited_node(&addr);
        let msg = wire::icmpv6(
            &src,
            &group,
            icmp::NEIGHBOR_SOLICIT,
            0,
            &wire::ns_body(&addr, None),
        );
        let mut f = wire::ipv6_packet(&src, &group, proto::ICMPV6, wire::NDP_HOP_LIMIT, &msg);
        wire::write_ethernet(&mut f, &wire::multicast_mac(&group), &self.mac);
        self.stats.ns_tx += 1;
        self.push_tx(f);
    }

    pub(super) fn send_na(
        &mut self,
        target: Ipv6Addr,
        dst: Ipv6Addr,
        dst_mac: Mac,
        solicited: bool,
    ) {
        let body = wire::na_body(&target, solicited, true, &self.mac);
        let msg = wire::icmpv6(&target, &dst, icmp::NEIGHBOR_ADVERT, 0, &body);
        let mut f = wire::ipv6_packet(&target, &dst, proto::ICMPV6, wire::NDP_HOP_LIMIT, &msg);
        wire::write_ethernet(&mut f, &dst_mac, &self.mac);
        self.stats.na_tx += 1;
        self.push_tx(f);
    }

    /// Sends an ICMPv6 error about `invoking` (an IPv6 packet as received), within the
    /// rules of RFC 4443 §2.4: never about an error message, about a packet from no unique
    /// source, or (unless `multicast_ok`) about one sent to a group; rate limited.
    pub(super) fn icmp_error(
        &mut self,
        invoking: &[u8],
        ty: u8,
        code: u8,
        word: u32,
        multicast_ok: bool,
        now: Instant,
    ) {
        let Ok(ip) = wire::parse_ipv6(invoking) else {
            return;
        };
        if ip.src.is_unspecified() || ip.src.is_multicast() || self.is_local(&ip.src) {
            return;
        }
        if ip.dst.is_multicast() && !multicast_ok {
            return;
        }
        if ip.next_header == proto::ICMPV6 && ip.payload().first().is_some_and(|&t| t < 128) {
            return; // an error message (the common case; deeper chains are not searched)
        }
        if !self.icmp_error_allowed(now) {
            return;
        }
        let src = if self.is_own_unicast(&ip.dst) {
            ip.dst
        } else {
            self.select_source(&ip.src)
        };
        // As much of the invoking packet as fits in the minimum MTU (RFC 4443 §2.4 (c)).
        let body = icmp_error_body(word, invoking, MIN_MTU - IPV6_LEN - 8);
        let msg = wire::icmpv6(&src, &ip.src, ty, code, &body);
        self.send_icmp_error(src, ip.src, proto::ICMPV6, &msg, now);
    }

    /// Sends an ICMP error message of either family (`protocol` says which) that
    /// [`Stack::icmp_error_allowed`] let go, taking its token when it leaves.
    pub(super) fn send_icmp_error(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        protocol: u8,
        msg: &[u8],
        now: Instant,
    ) {
        if self
            .send_ip(src, dst, protocol, wire::DEFAULT_HOP_LIMIT, msg, now)
            .is_ok()
        {
            self.icmp_tokens -= 1.0;
            self.stats.icmp_errors_tx += 1;
        }
    }

    /// Whether the error rate limit (a token bucket shared by ICMPv6 and ICMPv4) lets one
    /// more error go now; the caller takes the token (`icmp_tokens`) when it
    /// sent one. Counts what it holds back.
    pub(super) fn icmp_error_allowed(&mut self, now: Instant) -> bool {
        if let Some(last) = self.icmp_refilled {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.icmp_tokens = (self.icmp_tokens + dt * ICMP_ERROR_RATE).min(ICMP_ERROR_BURST);
        }
        self.icmp_refilled = Some(now);
        if self.icmp_tokens < 1.0 {
            self.stats.icmp_errors_rate_limited += 1;
            return false;
        }
        true
    }

    /// The engine found no QP bound to the datagram's port: answer "port unreachable".
    pub fn port_unreachable(&mut self, d: &UdpIn<'_>, now: Instant) {
        if wire::is_ipv4(&d.src) {
            self.icmpv4_error(
                &d.packet,
                wire::icmp4::DEST_UNREACHABLE,
                wire::icmp4::UNREACH_PORT,
                0,
                now,
            );
            return;
        }
        self.icmp_error(
            &d.packet,
            icmp::DEST_UNREACHABLE,
            icmp::UNREACH_PORT,
            0,
            false,
            now,
        );
    }

    // ---- ICMPv6 -----------------------------------------------------------------------

    pub(super) fn icmpv6(&mut self, upper: &[u8], a: Arrival) {
        let Arrival { src, dst, now, .. } = a;
        let m = match wire::parse_icmpv6(upper) {
            Ok(m) => m,
            Err(_) => {
                self.stats.drop(DropReason::Malformed);
                return;
            }
        };
        if !wire::checksum_ok(&src, &dst, proto::ICMPV6, upper) {
            self.stats.drop(DropReason::BadChecksum);
            return;
        }
        match m.ty {
            icmp::ECHO_REQUEST => {
                self.stats.echo_requests += 1;
                if src.is_unspecified() {
                    self.stats.drop(DropReason::BadSource);
                    return;
                }
                let from = if self.is_own_unicast(&dst) {
                    dst
                } else {
                    self.select_source(&src)
                };
                let mut body = Vec::with_capacity(4 + m.body.len());
                body.extend_from_slice(&m.word);
                body.extend_from_slice(m.body);
                let reply = wire::icmpv6(&from, &src, icmp::ECHO_REPLY, 0, &body);
                match self.send_ip(
                    from,
                    src,
                    proto::ICMPV6,
                    wire::DEFAULT_HOP_LIMIT,
                    &reply,
                    now,
                ) {
                    Ok(()) => self.stats.echo_replies += 1,
                    Err(e) => {
                        debug!("echo request from {src}: no reply ({e})");
                        self.stats.no_route += 1;
                    }
                }
            }
            // Neighbour discovery, once its messages pass RFC 4861's checks (§7.1).
            icmp::NEIGHBOR_SOLICIT | icmp::NEIGHBOR_ADVERT
                if !self.ndp_acceptable(&m, a.hop_limit) => {}
            icmp::NEIGHBOR_SOLICIT => self.neighbor_solicitation(&m, a),
            icmp::NEIGHBOR_ADVERT => self.neighbor_advertisement(&m, a),
            icmp::PACKET_TOO_BIG => self.packet_too_big(&m, now),
            icmp::DEST_UNREACHABLE | icmp::TIME_EXCEEDED | icmp::PARAM_PROBLEM => {
                // A destination unreachable may end a connection attempt (TCP decides);
                // the others change nothing. All are counted.
                if m.ty == icmp::DEST_UNREACHABLE {
                    self.unreachable_v6(m.body);
                }
                self.stats.icmp_errors_rx += 1;
                debug!("{} from {src}", wire::icmp_type_name(m.ty, m.code));
            }
            _ => {
                // Echo replies, router and multicast listener discovery, redirects, and
                // unknown informational messages (RFC 4443 §2.4 (b)).
                self.stats.drop(DropReason::Ignored);
            }
        }
    }

    /// RFC 4861 §7.1.1 validation and §7.2.3/§7.2.4 processing.
    /// The checks every neighbour solicitation and advertisement must pass (RFC 4861
    /// §7.1.1, §7.1.2): hop limit 255 (it came from the link), code 0, a target address.
    /// Counts the drop when one fails.
    pub(super) fn ndp_acceptable(&mut self, m: &wire::Icmpv6Message, hop_limit: u8) -> bool {
        if hop_limit != wire::NDP_HOP_LIMIT {
            self.stats.drop(DropReason::HopLimit);
            return false;
        }
        if m.code != 0 || m.body.len() < 16 {
            self.stats.drop(DropReason::BadNdp);
            return false;
        }
        true
    }

    /// (Validated by the caller: [`Stack::ndp_acceptable`].)
    pub(super) fn neighbor_solicitation(&mut self, m: &wire::Icmpv6Message, a: Arrival) {
        let Arrival {
            src,
            dst,
            eth_src,
            now,
            ..
        } = a;
        let target = Ipv6Addr::from(<[u8; 16]>::try_from(&m.body[..16]).expect("16 bytes"));
        let Ok(opts) = wire::parse_ndp_options(&m.body[16..]) else {
            self.stats.drop(DropReason::BadNdp);
            return;
        };
        if target.is_multicast()
            || src.is_unspecified() && (!is_solicited_node_group(&dst) || opts.source_ll.is_some())
        {
            self.stats.drop(DropReason::BadNdp);
            return;
        }
        self.stats.ns_rx += 1;
        if !self.is_own_unicast(&target) {
            self.stats.drop(DropReason::NotForUs);
            return;
        }
        if src.is_unspecified() {
            // Another station's duplicate address detection for one of our addresses:
            // defend it, to all nodes (RFC 4861 §7.2.4, RFC 4862 §5.4.3).
            warn!(
                "{} is probing for {target}, one of our addresses; defending it",
                MacDisplay(&eth_src)
            );
            self.stats.dad_defended += 1;
            self.send_na(
                target,
                wire::ALL_NODES,
                wire::multicast_mac(&wire::ALL_NODES),
                false,
            );
            return;
        }
        if self.is_own_unicast(&src) {
            warn!("{} uses {src}, one of our addresses", MacDisplay(&eth_src));
            self.stats.duplicate_address += 1;
            return;
        }
        if let Some(mac) = opts.source_ll {
            self.neighbors
                .on_solicitation(src, mac, now, &mut self.actions);
            self.run_actions();
        }
        // Reply to the solicitation's sender. Without a source link-layer option (allowed
        // for unicast solicitations) the frame's source address is where it came from.
        let mac = opts.source_ll.unwrap_or(eth_src);
        self.send_na(target, src, mac, true);
    }

    /// RFC 4861 §7.1.2 validation and §7.2.5 processing.
    /// (Validated by the caller: [`Stack::ndp_acceptable`].)
    pub(super) fn neighbor_advertisement(&mut self, m: &wire::Icmpv6Message, a: Arrival) {
        let Arrival {
            dst, eth_src, now, ..
        } = a;
        let (router, solicited, override_) = (
            m.word[0] & 0x80 != 0,
            m.word[0] & 0x40 != 0,
            m.word[0] & 0x20 != 0,
        );
        let _ = router; // on-link only: router flags change nothing
        let target = Ipv6Addr::from(<[u8; 16]>::try_from(&m.body[..16]).expect("16 bytes"));
        let Ok(opts) = wire::parse_ndp_options(&m.body[16..]) else {
            self.stats.drop(DropReason::BadNdp);
            return;
        };
        if target.is_multicast() || dst.is_multicast() && solicited {
            self.stats.drop(DropReason::BadNdp);
            return;
        }
        self.stats.na_rx += 1;
        if self.is_own_unicast(&target) {
            warn!(
                "{} claims {target}, one of our addresses: duplicate address",
                MacDisplay(&opts.target_ll.unwrap_or(eth_src))
            );
            self.stats.duplicate_address += 1;
            return;
        }
        self.neighbors.on_advertisement(
            target,
            opts.target_ll,
            solicited,
            override_,
            now,
            &mut self.actions,
        );
        self.run_actions();
    }

    /// A packet too big about one of our packets lowers the path MTU toward its
    /// destination, never below 1280 (RFC 8201 §4).
    pub(super) fn packet_too_big(&mut self, m: &wire::Icmpv6Message, now: Instant) {
        let Ok(quoted) = parse_quoted(m.body) else {
            self.stats.drop(DropReason::Malformed);
            return;
        };
        if !self.is_own_unicast(&quoted.0) {
            self.stats.drop(DropReason::NotForUs);
            return;
        }
        self.stats.ptb_rx += 1;
        let reported = u32::from_be_bytes(m.word) as usize;
        self.lower_path_mtu(quoted.1, reported, MIN_MTU, now);
    }

    /// An ICMP error said packets to `dst` must be at most `reported` bytes: the path MTU
    /// is lowered to that, never below `floor` (IPv6's 1280, RFC 8201 §4; IPv4's 576)
    /// nor raised above the link's.
    pub(super) fn lower_path_mtu(
        &mut self,
        dst: Ipv6Addr,
        reported: usize,
        floor: usize,
        now: Instant,
    ) {
        let mtu = reported.clamp(floor, self.mtu);
        if mtu < self.path_mtu(&dst, now) {
            debug!("path MTU to {dst} is now {mtu} (packet too big said {reported})");
            if self.pmtu.len() >= MAX_PMTU_ENTRIES {
                self.expire_path_mtus(now);
                if self.pmtu.len() >= MAX_PMTU_ENTRIES {
                    let oldest = self
                        .pmtu
                        .iter()
                        .min_by_key(|(_, (_, until))| *until)
                        .map(|(a, _)| *a);
                    if let Some(a) = oldest {
                        // Forgotten early: its connections may grow again (a packet
                        // too big cuts them back if the path still needs it).
                        self.pmtu.remove(&a);
                        self.path_mtu_news(a, self.mtu);
                    }
                }
            }
            self.pmtu.insert(dst, (mtu, now + PMTU_TIMEOUT));
            self.path_mtu_news(dst, mtu);
        }
    }
}

pub(super) fn is_solicited_node_group(a: &Ipv6Addr) -> bool {
    let o = a.octets();
    o[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
}

/// Source and destination of the packet an ICMPv6 error quotes (its fixed header must be
/// there; the rest may be cut).
pub(super) fn parse_quoted(body: &[u8]) -> Result<(Ipv6Addr, Ipv6Addr), ParseError> {
    if body.len() < IPV6_LEN {
        return Err(ParseError::Truncated);
    }
    if body[0] >> 4 != 6 {
        return Err(ParseError::Invalid);
    }
    let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&body[at..at + 16]).expect("16"));
    Ok((a(8), a(24)))
}

/// An ICMP error's body, the same in both families: the type's 32-bit word, then as much
/// of the invoking packet as `quote_max` bytes hold.
pub(super) fn icmp_error_body(word: u32, invoking: &[u8], quote_max: usize) -> Vec<u8> {
    let quote = invoking.len().min(quote_max);
    let mut body = Vec::with_capacity(4 + quote);
    body.extend_from_slice(&word.to_be_bytes());
    body.extend_from_slice(&invoking[..quote]);
    body
}
