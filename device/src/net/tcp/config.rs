//! Settings of a TCP connection. One `Config` is shared by the connections of a device
//! (or a listener); tests shorten the timers.

use std::time::Duration;

/// Which congestion control a connection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionKind {
    /// RFC 9438 (the default, as in Linux).
    #[default]
    Cubic,
    /// RFC 5681 slow start and congestion avoidance.
    Reno,
}

/// Keepalive probing (RFC 9293 §3.8.4; off unless asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe (at least two hours by default, MUST-27).
    pub idle: Duration,
    pub interval: Duration,
    /// Unanswered probes before the connection is given up.
    pub probes: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The MSS we announce and the most payload we put in a segment before options: the
    /// link (or path) MTU less the IPv6 and TCP headers.
    pub mss: u16,
    /// Our window shift (RFC 7323), None to not offer window scaling.
    pub window_scale: Option<u8>,
    pub timestamps: bool,
    pub sack: bool,
    pub congestion: CongestionKind,
    /// Initial congestion window, in segments (RFC 6928).
    pub initial_window: u32,
    /// RFC 6298 initial RTO (1 s), floor and ceiling.
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Retransmissions of a SYN or SYN-ACK before the attempt fails.
    pub syn_retries: u32,
    /// Retransmissions of data (or unanswered zero-window probes) before the connection
    /// times out (RFC 9293 R2).
    pub max_retries: u32,
    /// Delayed ACK timeout (RFC 9293 §3.8.6.3 allows up to 500 ms); None acknowledges
    /// every segment at once.
    pub delayed_ack: Option<Duration>,
    /// Maximum segment lifetime: TIME_WAIT lasts twice this.
    pub msl: Duration,
    /// How long an orphaned connection (its owner closed it and went away) waits in
    /// FIN-WAIT-2 for the peer's FIN before it is dropped without a word: a peer that
    /// never closes must not hold the connection forever (Linux: `net.ipv4.tcp_fin_timeout`,
    /// 60 s). Connections with an owner wait as long as the owner does.
    pub fin_timeout: Duration,
    pub keepalive: Option<Keepalive>,
    /// The staging allowance: how much more than the posted receive space the window
    /// offers, held in the connection until receive buffers are posted. Also the window
    /// offered before any buffer is posted. When posted space is given up after the
    /// window offered it (a stream receive completed early), staging grows to take what
    /// was offered (charged to the memory pool), and back to this as it is used up.
    pub staging: usize,
    /// Bytes of out-of-order data the connection buffers itself (data that the receive
    /// sink cannot place directly).
    pub ooo_limit: usize,
    /// Nagle's algorithm (RFC 9293 §3.7.4). Off by default: a QP's send WR is a message,
    /// sent at once.
    pub nagle: bool,
    /// Challenge ACKs (RFC 5961 §7) per second per connection.
    pub challenge_ack_limit: u32,
    /// Segmentation offload: with this much new data to send (and the windows open), a
    /// connection builds one super-segment of up to 64 KiB of payload, headers built once,
    /// for the link to cut into segments of the MSS (or to carry whole: [`Outgoing::gso`]).
    /// Retransmissions stay one MSS. For a link that takes super-frames.
    ///
    /// [`Outgoing::gso`]: super::Outgoing::gso
    pub gso: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mss: 1440,
            window_scale: Some(7),
            timestamps: true,
            sack: true,
            congestion: CongestionKind::Cubic,
            initial_window: 10,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            syn_retries: 6,
            max_retries: 15,
            delayed_ack: Some(Duration::from_millis(40)),
            msl: Duration::from_secs(30),
            fin_timeout: Duration::from_secs(60),
            keepalive: None,
            staging: 64 * 1024,
            ooo_limit: 256 * 1024,
            nagle: false,
            challenge_ack_limit: 10,
            gso: false,
        }
    }
}

impl Config {
    /// The MSS for a link MTU: less 40 bytes of IPv6 and 20 of TCP.
    pub fn mss_for_mtu(mtu: usize) -> u16 {
        mtu.saturating_sub(60).clamp(536, u16::MAX as usize) as u16
    }

    /// The MSS a connection with `remote` announces: [`Config::mss`] is sized for IPv6's
    /// header, and IPv4's is 20 bytes shorter (RFC 9293 §3.7.1: MTU less 40).
    pub fn mss_toward(&self, remote: &std::net::Ipv6Addr) -> u16 {
        let saved = crate::net::wire::IPV6_LEN - crate::net::wire::ip_header_len(remote);
        self.mss.saturating_add(saved as u16)
    }
}
