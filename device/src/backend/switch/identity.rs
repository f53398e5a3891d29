//! Who a function is, and that it sends only as itself: the identity a port claims, the
//! claims refused because another function holds or was configured with the MAC or an
//! address, and the check of every frame of an untrusted port (see the switch's
//! documentation).

use std::net::Ipv6Addr;

use super::{Mac, PortId, Slot, State};
use crate::backend::IdentityTaken;

const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_ARP: [u8; 2] = [0x08, 0x06];
/// Where an IPv6 frame's source address is.
const IPV6_SRC: std::ops::Range<usize> = 22..38;
/// Where an IPv4 frame's source address is.
const IPV4_SRC: std::ops::Range<usize> = 26..30;
/// Where an ARP message (Ethernet/IPv4) says who sends it: its sender MAC and IPv4 address.
const ARP_SENDER: std::ops::Range<usize> = 22..32;

/// Who a function is: the MAC and the IP addresses it sends from (IPv4 ones mapped; its
/// link-local address, from the MAC, goes without saying).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub mac: Mac,
    pub addrs: Vec<Ipv6Addr>,
}

impl Identity {
    /// Every address it may use, as bytes: the link-local address first (IPv4 ones
    /// mapped).
    fn sources(&self) -> Vec<[u8; 16]> {
        std::iter::once(crate::net::wire::link_local(&self.mac))
            .chain(self.addrs.iter().copied())
            .map(|a| a.octets())
            .collect()
    }

    /// Its IPv4 addresses, as an IPv4 header or ARP carries them.
    fn sources4(&self) -> Vec<[u8; 4]> {
        self.addrs
            .iter()
            .filter_map(crate::net::wire::ipv4_of)
            .map(|a| a.octets())
            .collect()
    }
}

/// How the host sets up a function's port ([`Switch::declare`](super::Switch::declare)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortOptions {
    /// May send as anyone (any source MAC and IPv6 address); its other sources are
    /// learned, up to its share. For a function that bridges hosts behind it.
    pub trusted: bool,
    /// The identity the host configured for the function: nobody else may claim its MAC
    /// or addresses, even while the function has other ones or no guest.
    pub reserved: Option<Identity>,
}

/// Whether `frame` comes from `mac` and, if IPv6, IPv4 or ARP, from one of the IPv6
/// `sources` or IPv4 `sources4` — or from the unspecified address where a host that has
/// none yet uses it: IPv6's `::` (duplicate address detection, and the listener reports
/// sent with it, RFC 3590), ARP's 0.0.0.0 (address probes, RFC 5227) and IPv4's 0.0.0.0
/// in DHCP's client-to-server datagrams (UDP 68 to 67, RFC 2131 §4.1). What a normal host
/// sends passes; anything else is a spoof. The cost of a send: a 6-byte compare, and for
/// IP a compare per address (a handful). A frame too short to say who sent it is not its
/// own. The switch checks every frame of an untrusted port with it, and the raw QP's unit
/// every frame the guest kernel sends.
pub fn sent_as(frame: &[u8], mac: &Mac, sources: &[[u8; 16]], sources4: &[[u8; 4]]) -> bool {
    if frame.len() < 14 || frame[6..12] != *mac {
        return false;
    }
    let ethertype = &frame[12..14];
    if ethertype == ETHERTYPE_IPV6 {
        let Some(src) = frame.get(IPV6_SRC) else {
            return false;
        };
        return src == [0u8; 16] || sources.iter().any(|s| s[..] == *src);
    }
    if ethertype == ETHERTYPE_IPV4 {
        let Some(src) = frame.get(IPV4_SRC) else {
            return false;
        };
        if src == [0u8; 4] {
            return is_dhcp_from_client(&frame[14..]);
        }
        return sources4.iter().any(|s| s[..] == *src);
    }
    if ethertype == ETHERTYPE_ARP {
        let Some(sender) = frame.get(ARP_SENDER) else {
            return false;
        };
        let (sender_mac, ip) = sender.split_at(6);
        return sender_mac == mac && (ip == [0u8; 4] || sources4.iter().any(|s| s[..] == *ip));
    }
    true
}

/// Whether an IPv4 packet is a UDP datagram from port 68 to port 67 (DHCP, client to
/// server).
fn is_dhcp_from_client(ip: &[u8]) -> bool {
    const UDP: u8 = 17;
    let Some(&vihl) = ip.first() else {
        return false;
    };
    let ihl = (vihl & 0x0f) as usize * 4;
    if vihl >> 4 != 4 || ihl < 20 || ip.get(9) != Some(&UDP) {
        return false;
    }
    match ip.get(ihl..ihl + 4) {
        Some(ports) => ports == [0, 68, 0, 67],
        None => false,
    }
}

impl Slot {
    /// Whether an untrusted port's frame comes from its own MAC and, if IPv6, IPv4 or
    /// ARP, from one of its own addresses (or the unspecified one where address probes
    /// use it). The cost of a send: a 6-byte compare, and for IP a compare per address (a
    /// handful). A frame too short to say who sent it is not its own.
    pub(super) fn sends_as_itself(&self, frame: &[u8]) -> bool {
        let Some(id) = &self.identity else {
            return false;
        };
        sent_as(frame, &id.mac, &self.sources, &self.sources4)
    }

    /// Whether `identity` shares its MAC or an address with what this slot holds or was
    /// configured with; the conflict, said.
    fn conflict(&self, mac: &Mac, sources: &[[u8; 16]]) -> Option<String> {
        for held in [&self.identity, &self.options.reserved]
            .into_iter()
            .flatten()
        {
            if held.mac == *mac {
                return Some(format!("MAC {} is function {}'s", fmt_mac(mac), self.name));
            }
            if let Some(a) = held.sources().iter().find(|a| sources.contains(a)) {
                return Some(format!(
                    "address {} is function {}'s",
                    Ipv6Addr::from(*a),
                    self.name
                ));
            }
        }
        None
    }
}

impl State {
    /// Counts a frame of `from` dropped as not its own (and says so once a port).
    pub(super) fn spoofed(&mut self, from: PortId, src: &Mac) {
        self.stats_mut(from).spoofed += 1;
        if let PortId::Port(i) = from {
            let slot = &mut self.ports[i];
            if !slot.spoof_logged {
                slot.spoof_logged = true;
                log::warn!(
                    "switch port {}: a frame from {} that is not the function's own MAC or \
                     address: dropped (counted as spoofed from now on)",
                    slot.name,
                    fmt_mac(src)
                );
            }
        }
    }

    /// Function `port` claims `identity` (see
    /// [`Backend::claim_identity`](crate::backend::Backend::claim_identity)).
    pub(super) fn claim(&mut self, port: usize, identity: Identity) -> Result<(), IdentityTaken> {
        let sources = identity.sources();
        for (j, other) in self.ports.iter().enumerate() {
            if j != port {
                if let Some(why) = other.conflict(&identity.mac, &sources) {
                    return Err(IdentityTaken(why));
                }
            }
        }
        let slot = &mut self.ports[port];
        slot.sources4 = identity.sources4();
        let old = slot.identity.replace(identity.clone());
        // An IPv4 address (mapped) is no IPv6 source.
        slot.sources = sources
            .into_iter()
            .filter(|a| !crate::net::wire::is_ipv4(&Ipv6Addr::from(*a)))
            .collect();
        if let Some(old) = old.filter(|o| o.mac != identity.mac) {
            if self
                .table
                .get(&old.mac)
                .is_some_and(|e| e.pinned && e.at == PortId::Port(port))
            {
                self.table.remove(&old.mac);
            }
        }
        if self.ports[port].ready.is_some() {
            self.pin(identity.mac, port);
        }
        Ok(())
    }
}

fn fmt_mac(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
