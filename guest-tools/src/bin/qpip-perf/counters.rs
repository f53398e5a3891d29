//! The counters a test reports per message, so that a figure explains itself: the
//! library's own (kicks of a sleeping device, this link's blocking waits for completions)
//! and the device's (`QUERY_STATS`: interrupts, engine sleeps, TCP segments ...), taken
//! before and after each test on each side. The device's counters are the whole device's
//! (every context on it), so they are exact only while the test is all it carries.
//!
//! On the wire the server appends its side to its `DONE` line as `name=value` words.
//!
//! Beside them each side measures its guest's whole busy time over the test
//! ([`guest_busy_us`]): the first line of `/proc/stat`, user, nice, system, irq and softirq
//! (all but idle, iowait and steal) of every CPU, so the kernel's work for the test (a
//! socket's receive work in softirq, interrupts) counts as well as every other process's.

use qpip::Context;
use qpip_abi::admin::{
    STAT_CQ_INTERRUPTS, STAT_DOORBELLS, STAT_KICKS, STAT_NET_RX_FRAMES, STAT_NET_TX_FRAMES,
    STAT_SLEEPS, STAT_TCP_RETRANS_SEGS, STAT_TCP_SEGS_IN, STAT_TCP_SEGS_OUT, STAT_UDP_RX,
    STAT_UDP_RX_NO_WR, STAT_UDP_TX,
};

/// The library's counters: doorbells of this process that found the device asleep and
/// kicked it, and this link's waits for completions that blocked (each ends in a
/// wake-up, or the wait's time running out).
pub const LIBRARY: [&str; 2] = ["kicks", "waits"];

/// The device's counters reported, by name.
pub const DEVICE: [(&str, u32); 12] = [
    ("dev_kicks", STAT_KICKS),
    ("interrupts", STAT_CQ_INTERRUPTS),
    ("sleeps", STAT_SLEEPS),
    ("doorbells", STAT_DOORBELLS),
    ("tcp_segs_out", STAT_TCP_SEGS_OUT),
    ("tcp_segs_in", STAT_TCP_SEGS_IN),
    ("tcp_retrans", STAT_TCP_RETRANS_SEGS),
    ("udp_tx", STAT_UDP_TX),
    ("udp_rx", STAT_UDP_RX),
    ("udp_rx_no_wr", STAT_UDP_RX_NO_WR),
    ("frames_out", STAT_NET_TX_FRAMES),
    ("frames_in", STAT_NET_RX_FRAMES),
];

/// Counters by name, in the order taken.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters(pub Vec<(String, u64)>);

/// The counters now: the library's, and the device's if the context has a device.
pub fn take(ctx: &Context, waits: u64) -> Counters {
    let mut v = vec![
        (LIBRARY[0].to_string(), ctx.kicks()),
        (LIBRARY[1].to_string(), waits),
    ];
    if let Ok(Some(c)) = ctx.device_counters() {
        for (name, i) in DEVICE {
            if let Some(x) = c.get(i as usize) {
                v.push((name.to_string(), *x));
            }
        }
    }
    Counters(v)
}

impl Counters {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// What grew since `before`: the counters both have.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters(
            self.0
                .iter()
                .filter_map(|(n, v)| Some((n.clone(), v.saturating_sub(before.get(n)?))))
                .collect(),
        )
    }

    /// `name=value` words, for the server's `DONE` line.
    pub fn to_words(&self) -> String {
        self.0
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The `name=value` words among `words` (others are skipped); `None` if there are
    /// none (a server without counters: an older one over sockets).
    pub fn from_words<'a>(words: impl Iterator<Item = &'a str>) -> Option<Counters> {
        let v: Vec<(String, u64)> = words
            .filter_map(|w| {
                let (n, v) = w.split_once('=')?;
                let ok = !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                Some((n.to_string(), v.parse().ok().filter(|_| ok)?))
            })
            .collect();
        (!v.is_empty()).then_some(Counters(v))
    }

    /// As a JSON object of numbers.
    pub fn json(&self) -> String {
        let items: Vec<String> = self.0.iter().map(|(n, v)| format!("\"{n}\":{v}")).collect();
        format!("{{{}}}", items.join(","))
    }

    /// Per message: each counter divided by `msgs`, as a JSON object.
    pub fn json_per(&self, msgs: u64) -> String {
        if msgs == 0 {
            return "null".into();
        }
        let items: Vec<String> = self
            .0
            .iter()
            .map(|(n, v)| format!("\"{n}\":{:.4}", *v as f64 / msgs as f64))
            .collect();
        format!("{{{}}}", items.join(","))
    }
}

/// The guest's busy time so far, µs, from `/proc/stat` (see the module's documentation);
/// `None` if it cannot be read.
pub fn guest_busy_us() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    busy_us(&text, u64::try_from(hz).ok().filter(|h| *h > 0)?)
}

/// The busy time in the text of `/proc/stat` whose ticks are `1/hz` s, µs: user, nice,
/// system, irq and softirq of its first line (`cpu  USER NICE SYSTEM IDLE IOWAIT IRQ
/// SOFTIRQ STEAL ...`, every CPU together; guest time is part of user).
pub fn busy_us(stat: &str, hz: u64) -> Option<u64> {
    let mut w = stat.lines().next()?.split_whitespace();
    if w.next()? != "cpu" {
        return None;
    }
    let f: Vec<u64> = w.take(7).map(str::parse).collect::<Result<_, _>>().ok()?;
    if f.len() < 7 || hz == 0 {
        return None;
    }
    let ticks = f[0] + f[1] + f[2] + f[5] + f[6];
    Some(ticks.checked_mul(1_000_000)? / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: &[(&str, u64)]) -> Counters {
        Counters(v.iter().map(|(n, x)| (n.to_string(), *x)).collect())
    }

    #[test]
    fn since_is_the_growth_of_the_counters_both_have() {
        let before = c(&[("kicks", 5), ("sleeps", 10)]);
        let after = c(&[("kicks", 8), ("sleeps", 10), ("interrupts", 4)]);
        assert_eq!(after.since(&before), c(&[("kicks", 3), ("sleeps", 0)]));
        // A counter reset in between does not underflow.
        assert_eq!(before.since(&after), c(&[("kicks", 0), ("sleeps", 0)]));
    }

    #[test]
    fn words_go_there_and_back_and_others_are_skipped() {
        let x = c(&[("kicks", 3), ("tcp_segs_out", 120)]);
        assert_eq!(x.to_words(), "kicks=3 tcp_segs_out=120");
        let line = "QPIPPERF DONE 1 2 3 kicks=3 tcp_segs_out=120 Bad=1 x=y junk";
        assert_eq!(Counters::from_words(line.split_whitespace()), Some(x));
        assert_eq!(Counters::from_words("QPIPPERF DONE 1 2 3".split(' ')), None);
    }

    #[test]
    fn guest_busy_time_is_user_nice_system_irq_and_softirq() {
        let stat = "cpu  100 2 30 5000 40 5 7 9 0 0\ncpu0 50 1 15 2500 20 2 3 4 0 0\nintr 1\n";
        // 144 ticks of 10 ms; idle, iowait and steal left out.
        assert_eq!(busy_us(stat, 100), Some(1_440_000));
        assert_eq!(busy_us(stat, 1000), Some(144_000));
        // Kernels before irq and softirq were counted, other lines first, no clock.
        assert_eq!(busy_us("cpu  1 2 3 4 5\n", 100), None);
        assert_eq!(busy_us("cpu0 1 2 3 4 5 6 7\n", 100), None);
        assert_eq!(busy_us("cpu  1 2 3 4 5 6 x\n", 100), None);
        assert_eq!(busy_us(stat, 0), None);
        assert_eq!(busy_us("", 100), None);
        // This machine's own (Linux).
        let now = guest_busy_us().expect("/proc/stat");
        assert!(guest_busy_us().unwrap() >= now);
    }

    #[test]
    fn json_per_message() {
        let x = c(&[("kicks", 3), ("waits", 8)]);
        assert_eq!(x.json(), "{\"kicks\":3,\"waits\":8}");
        assert_eq!(x.json_per(4), "{\"kicks\":0.7500,\"waits\":2.0000}");
        assert_eq!(x.json_per(0), "null");
        assert_eq!(Counters::default().json(), "{}");
    }
}
