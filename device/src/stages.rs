//! Per-stage cost of the data path (the QPIP paper's Tables 2 and 3): how long the engine
//! spends in each stage of sending and receiving.
//!
//! Built only with the Cargo feature `stage-timing` (off by default): without it, [`span`]
//! returns a guard of size zero with no drop code, so the hooks in the engine and the
//! network compile to nothing. With it, a hook reads the CPU's time-stamp counter when its
//! stage begins and ends, and only while timing was switched on at run time on that thread
//! ([`enable`]); otherwise it costs a thread-local read and a branch.
//!
//! Times are *exclusive*: when a stage runs inside another (the data of a segment is
//! gathered while its headers are being built), the inner one's time is not counted in the
//! outer one, so the stages add up to the time spent in all of them. An engine runs on one
//! thread, so the counters are per thread; a thread that drives several engines (the
//! bench) chooses which table the counts go to with [`select`].

/// The stages, in the order of the paper's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Stage {
    /// Scanning the doorbell pages for producer indices that moved.
    Doorbell,
    /// Choosing the QPs with send work and giving each a turn.
    Schedule,
    /// Reading a work request from its ring, decoding and validating it, translating its
    /// addresses through the memory region.
    GetWr,
    /// Copying payload out of guest memory (through the memory region's translation).
    GetData,
    /// TCP deciding what to send and building the segment, IPv6 and Ethernet headers,
    /// checksums included.
    BuildHeaders,
    /// Handing frames to the link.
    Send,
    /// Taking frames from the link.
    Receive,
    /// Parsing Ethernet, IPv6 and TCP headers (checksum verification included) and
    /// finding the connection.
    Parse,
    /// TCP processing a received segment: sequence and acknowledgement checks, windows,
    /// congestion control, reassembly bookkeeping.
    Protocol,
    /// Placing received payload into the posted receive buffers in guest memory.
    Place,
    /// Writing completion queue entries (and raising interrupts).
    Complete,
}

pub const STAGES: [Stage; 11] = [
    Stage::Doorbell,
    Stage::Schedule,
    Stage::GetWr,
    Stage::GetData,
    Stage::BuildHeaders,
    Stage::Send,
    Stage::Receive,
    Stage::Parse,
    Stage::Protocol,
    Stage::Place,
    Stage::Complete,
];

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Doorbell => "doorbell",
            Stage::Schedule => "schedule",
            Stage::GetWr => "get WR",
            Stage::GetData => "get data",
            Stage::BuildHeaders => "build headers",
            Stage::Send => "send",
            Stage::Receive => "receive",
            Stage::Parse => "parse",
            Stage::Protocol => "protocol",
            Stage::Place => "place",
            Stage::Complete => "complete",
        }
    }
}

/// Tables a thread can count into ([`select`]).
pub const TABLES: usize = 2;

/// Counts of one table: (nanoseconds, entries) per stage, indexed by `Stage as usize`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub ns: [u64; STAGES.len()],
    pub entries: [u64; STAGES.len()],
}

#[cfg(feature = "stage-timing")]
mod imp {
    use super::*;
    use std::cell::RefCell;
    use std::time::Instant;

    #[inline(always)]
    fn ticks() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rdtsc has no preconditions.
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            thread_local!(static T0: Instant = Instant::now());
            T0.with(|t| t.elapsed().as_nanos() as u64)
        }
    }

    struct State {
        enabled: bool,
        table: usize,
        active: Option<Stage>,
        last: u64,
        ticks: [[u64; STAGES.len()]; TABLES],
        entries: [[u64; STAGES.len()]; TABLES],
        /// Tick count and time when timing was enabled, to convert ticks to time.
        origin: (u64, Instant),
    }

    thread_local! {
        static STATE: RefCell<State> = RefCell::new(State {
            enabled: false,
            table: 0,
            active: None,
            last: 0,
            ticks: [[0; STAGES.len()]; TABLES],
            entries: [[0; STAGES.len()]; TABLES],
            origin: (0, Instant::now()),
        });
    }

    /// Ends the stage it began and resumes the one it interrupted.
    pub struct Span {
        prev: Option<Stage>,
        live: bool,
    }

    #[inline]
    pub fn span(stage: Stage) -> Span {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            if !s.enabled {
                return Span {
                    prev: None,
                    live: false,
                };
            }
            let now = ticks();
            let t = s.table;
            if let Some(a) = s.active {
                s.ticks[t][a as usize] += now.wrapping_sub(s.last);
            }
            s.entries[t][stage as usize] += 1;
            let prev = s.active.replace(stage);
            s.last = now;
            Span { prev, live: true }
        })
    }

    impl Drop for Span {
        #[inline]
        fn drop(&mut self) {
            if !self.live {
                return;
            }
            STATE.with(|s| {
                let mut s = s.borrow_mut();
                let now = ticks();
                let t = s.table;
                if let Some(a) = s.active {
                    s.ticks[t][a as usize] += now.wrapping_sub(s.last);
                }
                s.active = self.prev;
                s.last = now;
            })
        }
    }

    pub fn enable(on: bool) {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            if on && !s.enabled {
                s.origin = (ticks(), Instant::now());
            }
            s.enabled = on;
        })
    }

    pub fn select(table: usize) {
        STATE.with(|s| s.borrow_mut().table = table.min(TABLES - 1))
    }

    /// Nanoseconds per tick, from the ticks and the time since timing was enabled.
    fn ns_per_tick(s: &State) -> f64 {
        let ticks = ticks().wrapping_sub(s.origin.0);
        let ns = s.origin.1.elapsed().as_nanos() as f64;
        if ticks == 0 {
            1.0
        } else {
            ns / ticks as f64
        }
    }

    pub fn take(table: usize) -> Counts {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let k = ns_per_tick(&s);
            let t = table.min(TABLES - 1);
            let mut c = Counts::default();
            for i in 0..STAGES.len() {
                c.ns[i] = (s.ticks[t][i] as f64 * k) as u64;
                c.entries[i] = s.entries[t][i];
            }
            s.ticks[t] = [0; STAGES.len()];
            s.entries[t] = [0; STAGES.len()];
            c
        })
    }
}

#[cfg(not(feature = "stage-timing"))]
mod imp {
    use super::*;

    /// Nothing: the feature is off.
    pub struct Span;

    #[inline(always)]
    pub fn span(_stage: Stage) -> Span {
        Span
    }
    pub fn enable(_on: bool) {}
    pub fn select(_table: usize) {}
    pub fn take(_table: usize) -> Counts {
        Counts::default()
    }
}

/// Whether this build counts anything (the `stage-timing` feature).
pub const BUILT_IN: bool = cfg!(feature = "stage-timing");

/// Switches timing on or off for this thread (off at start).
pub use imp::enable;
/// Chooses the table ([`TABLES`]) this thread counts into.
pub use imp::select;
/// Begins `stage` on this thread; it ends when the guard is dropped.
pub use imp::span;
/// Takes (and clears) a table of this thread.
pub use imp::take;
pub use imp::Span;

#[cfg(all(test, feature = "stage-timing"))]
mod tests {
    use super::*;

    /// An inner stage's time is not counted again in the outer one: the stages never add
    /// up to more than the time that passed (bounds only, no speed is assumed).
    #[test]
    fn nested_stages_count_exclusively() {
        enable(true);
        select(1);
        take(1);
        let t0 = std::time::Instant::now();
        {
            let _outer = span(Stage::BuildHeaders);
            {
                let _inner = span(Stage::GetData);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let wall = t0.elapsed().as_nanos() as f64;
        let c = take(1);
        let (outer, inner) = (
            c.ns[Stage::BuildHeaders as usize] as f64,
            c.ns[Stage::GetData as usize] as f64,
        );
        assert_eq!(c.entries[Stage::BuildHeaders as usize], 1);
        assert_eq!(c.entries[Stage::GetData as usize], 1);
        assert!(inner >= 19e6, "the inner stage slept 20 ms: {c:?}");
        assert!(
            outer + inner <= wall * 1.05 + 1e6,
            "counted twice: {c:?}, wall {wall} ns"
        );
        assert_eq!(take(1).entries, [0; STAGES.len()], "take clears");
        enable(false);
    }
}
