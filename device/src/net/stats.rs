//! Counters of the network layer: what came and went, and every drop by its reason.

/// Why a received frame was dropped. Every frame the stack does not use is counted under
/// exactly one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// Shorter than its headers or length fields, or a field out of range.
    Malformed,
    /// A UDP, ICMP or IPv4 header checksum that does not verify (zero UDP checksums over
    /// IPv6 included).
    BadChecksum,
    /// Another station's MAC, an IP destination that is not ours (or a broadcast for a
    /// protocol the device does not answer on it), or ARP about another station's address.
    NotForUs,
    /// Neither IPv6, IPv4 nor ARP (VLAN tags, other protocols ... on the link).
    NotIp,
    /// A next header the device does not implement (answered with a parameter problem).
    UnsupportedNextHeader,
    /// An extension header option whose type says "discard if unknown".
    UnknownOption,
    /// A routing header with segments left (the device is a host, RFC 8200 §4.4).
    RoutingHeader,
    /// A source address no packet may carry (multicast, or unspecified where not allowed).
    BadSource,
    /// An NDP message that fails RFC 4861 validation (bad code, bad options, multicast
    /// target ...).
    BadNdp,
    /// An NDP message whose hop limit is not 255: it crossed a router (RFC 4861 §7.1).
    HopLimit,
    /// A frame we sent ourselves, seen again (a looped link).
    Looped,
    /// A fragment overlapping another of the same packet (RFC 5722), or one arriving for a
    /// packet already abandoned for that reason.
    FragmentOverlap,
    /// A fragment that cannot be part of a valid packet (length not a multiple of 8, past
    /// 65535 bytes, an incomplete header chain in the first fragment ...).
    BadFragment,
    /// A reassembly abandoned: timed out after 60 s, or evicted to stay within the memory
    /// bound (counted once per fragment it held).
    ReassemblyFailed,
    /// Messages the device understands but does not act on (router advertisements,
    /// redirects, MLD, echo replies, unknown informational ICMPv6 ...).
    Ignored,
    /// The "no next header" value.
    NoNextHeader,
}

impl DropReason {
    pub const ALL: [DropReason; 16] = [
        DropReason::Malformed,
        DropReason::BadChecksum,
        DropReason::NotForUs,
        DropReason::NotIp,
        DropReason::UnsupportedNextHeader,
        DropReason::UnknownOption,
        DropReason::RoutingHeader,
        DropReason::BadSource,
        DropReason::BadNdp,
        DropReason::HopLimit,
        DropReason::Looped,
        DropReason::FragmentOverlap,
        DropReason::BadFragment,
        DropReason::ReassemblyFailed,
        DropReason::Ignored,
        DropReason::NoNextHeader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "drop_malformed",
            DropReason::BadChecksum => "drop_bad_checksum",
            DropReason::NotForUs => "drop_not_for_us",
            DropReason::NotIp => "drop_not_ip",
            DropReason::UnsupportedNextHeader => "drop_unsupported_next_header",
            DropReason::UnknownOption => "drop_unknown_option",
            DropReason::RoutingHeader => "drop_routing_header",
            DropReason::BadSource => "drop_bad_source",
            DropReason::BadNdp => "drop_bad_ndp",
            DropReason::HopLimit => "drop_hop_limit",
            DropReason::Looped => "drop_looped",
            DropReason::FragmentOverlap => "drop_fragment_overlap",
            DropReason::BadFragment => "drop_bad_fragment",
            DropReason::ReassemblyFailed => "drop_reassembly_failed",
            DropReason::Ignored => "drop_ignored",
            DropReason::NoNextHeader => "drop_no_next_header",
        }
    }
}

/// The stack's counters. Plain integers: the stack lives on the engine thread.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NetStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Packets sent to the device's own addresses (they never reach the link: not in the
    /// frame counts).
    pub looped: u64,
    /// UDP datagrams handed up / sent (a fragmented datagram counts once).
    pub udp_rx: u64,
    pub udp_tx: u64,
    pub echo_requests: u64,
    pub echo_replies: u64,
    pub ns_rx: u64,
    pub na_rx: u64,
    pub ns_tx: u64,
    pub na_tx: u64,
    /// ARP requests and replies received (for the device's addresses) and sent
    /// (gratuitous announcements among the requests).
    pub arp_requests_rx: u64,
    pub arp_replies_rx: u64,
    pub arp_requests_tx: u64,
    pub arp_replies_tx: u64,
    /// Someone else's DAD probe for one of our addresses, answered (RFC 4862 §5.4.3).
    pub dad_defended: u64,
    /// Another station claims one of our addresses.
    pub duplicate_address: u64,
    /// ICMP errors (ICMPv6 and ICMPv4) sent, and those the rate limit held back.
    pub icmp_errors_tx: u64,
    pub icmp_errors_rate_limited: u64,
    /// ICMP errors received: packet too big or fragmentation needed (applied to the path
    /// MTU), the others.
    pub ptb_rx: u64,
    pub icmp_errors_rx: u64,
    /// Datagrams sent in fragments, and the fragments.
    pub fragmented_tx: u64,
    pub fragments_tx: u64,
    pub fragments_rx: u64,
    pub reassembled: u64,
    /// Exact duplicate fragments (dropped, the reassembly goes on).
    pub duplicate_fragments: u64,
    pub reassembly_timeouts: u64,
    /// Packets dropped because their next hop never answered (or its queue overflowed).
    pub resolution_failed: u64,
    pub neighbor_queue_overflow: u64,
    /// Sends refused: no on-link route.
    pub no_route: u64,
    /// Frames the backend refused (full, failed).
    pub tx_errors: u64,
    /// Frames dropped because the link was down (not sent, or refused by a link that
    /// went down meanwhile).
    pub tx_link_down: u64,
    pub drops: [u64; DropReason::ALL.len()],
}

impl NetStats {
    pub fn drop(&mut self, why: DropReason) {
        self.drops[why as usize] += 1;
    }

    pub fn dropped(&self, why: DropReason) -> u64 {
        self.drops[why as usize]
    }

    pub fn total_dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Every counter by name, for logs and the device's statistics.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let plain = [
            ("rx_frames", self.rx_frames),
            ("rx_bytes", self.rx_bytes),
            ("tx_frames", self.tx_frames),
            ("tx_bytes", self.tx_bytes),
            ("udp_rx", self.udp_rx),
            ("udp_tx", self.udp_tx),
            ("echo_requests", self.echo_requests),
            ("echo_replies", self.echo_replies),
            ("ns_rx", self.ns_rx),
            ("na_rx", self.na_rx),
            ("ns_tx", self.ns_tx),
            ("na_tx", self.na_tx),
            ("arp_requests_rx", self.arp_requests_rx),
            ("arp_replies_rx", self.arp_replies_rx),
            ("arp_requests_tx", self.arp_requests_tx),
            ("arp_replies_tx", self.arp_replies_tx),
            ("dad_defended", self.dad_defended),
            ("duplicate_address", self.duplicate_address),
            ("icmp_errors_tx", self.icmp_errors_tx),
            ("icmp_errors_rate_limited", self.icmp_errors_rate_limited),
            ("ptb_rx", self.ptb_rx),
            ("icmp_errors_rx", self.icmp_errors_rx),
            ("fragmented_tx", self.fragmented_tx),
            ("fragments_tx", self.fragments_tx),
            ("fragments_rx", self.fragments_rx),
            ("reassembled", self.reassembled),
            ("duplicate_fragments", self.duplicate_fragments),
            ("reassembly_timeouts", self.reassembly_timeouts),
            ("resolution_failed", self.resolution_failed),
            ("neighbor_queue_overflow", self.neighbor_queue_overflow),
            ("no_route", self.no_route),
            ("tx_errors", self.tx_errors),
            ("tx_link_down", self.tx_link_down),
        ];
        plain.into_iter().chain(
            DropReason::ALL
                .iter()
                .map(move |&r| (r.name(), self.drops[r as usize])),
        )
    }
}
