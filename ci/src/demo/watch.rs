//! Guest output read as it comes: progress lines, failures, measurements.

use super::plan::Step;
use super::results::Measurements;
use std::time::Instant;

/// Reads the guests' output line by line as it comes: progress, failures, measurements.
pub(super) struct Watcher<'a> {
    pub(super) steps: Vec<Step>,
    partial: [Vec<u8>; 2],
    /// The step guest a is in (its index in `steps`) and when it began.
    pub(super) current: Option<(usize, Instant)>,
    /// (step id, message) of the first failure a guest reported.
    pub(super) failure: Option<(String, String)>,
    pub(super) measurements: Measurements,
    /// A measurement line that could not be read.
    pub(super) bad_line: Option<String>,
    progress: &'a mut dyn FnMut(&str),
    verbose: bool,
}

impl<'a> Watcher<'a> {
    /// Watches a run of `steps` in `rounds` rounds; `progress` gets a line per event,
    /// and with `verbose` every guest output line.
    pub(super) fn new(
        steps: Vec<Step>,
        rounds: usize,
        progress: &'a mut dyn FnMut(&str),
        verbose: bool,
    ) -> Watcher<'a> {
        Watcher {
            steps,
            partial: [Vec::new(), Vec::new()],
            current: None,
            failure: None,
            measurements: Measurements::with_rounds(rounds),
            bad_line: None,
            progress,
            verbose,
        }
    }

    pub(super) fn feed(&mut self, guest: usize, bytes: &[u8]) {
        let i = guest.min(1);
        self.partial[i].extend_from_slice(bytes);
        while let Some(pos) = self.partial[i].iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial[i].drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line).trim_end().to_string();
            self.line(guest, &line);
        }
    }

    fn line(&mut self, guest: usize, line: &str) {
        let name = if guest == 0 { "a" } else { "b" };
        if self.verbose && !line.starts_with("@perf.") {
            (self.progress)(&format!("  [{name}] {line}"));
        }
        if let Some(rest) = line.strip_prefix("@fail=") {
            let (id, why) = rest.split_once(": ").unwrap_or((rest, ""));
            if self.failure.is_none() {
                self.failure = Some((id.to_string(), format!("guest {name}: {why}")));
            }
            return;
        }
        if guest != 0 {
            return;
        }
        if let Some(id) = line.strip_prefix("@step=") {
            let i = self.steps.iter().position(|s| s.id == id);
            let Some(i) = i else {
                return;
            };
            let n = self.steps.len();
            (self.progress)(&format!("[{}/{n}] {} ...", i + 1, self.steps[i].what));
            self.current = Some((i, Instant::now()));
        } else if let Some(note) = line.strip_prefix("@note=") {
            (self.progress)(&format!("      {note}"));
        } else if line.starts_with("@ok=") {
            if let Some((_, t0)) = self.current.take() {
                (self.progress)(&format!("      ok ({:.1} s)", t0.elapsed().as_secs_f64()));
            }
        } else if let Err(e) = self.measurements.take_line(line) {
            self.bad_line.get_or_insert(e);
        }
    }

    pub(super) fn describe(&self, id: &str) -> String {
        self.steps
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.what.clone())
            .unwrap_or_else(|| id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::Plan;

    #[test]
    fn watcher_reports_progress_failures_and_measurements() {
        let mut said = Vec::new();
        let mut progress = |s: &str| said.push(s.to_string());
        let plan = Plan::bench();
        let mut w = Watcher::new(plan.steps(), 3, &mut progress, false);
        w.feed(0, b"@step=udp-qp.1\n@perf.udp-qp.1={\"results\":[]}\n@o");
        w.feed(
            0,
            b"k=udp-qp.1\n@step=udp-sk.2\n@perf.udp-sk.2={\"results\":[]}\n",
        );
        w.feed(1, b"@fail=ready: nothing listens\n");
        w.feed(0, b"@fail=udp-sk.2: timeout\n");
        let (id, why) = w.failure.clone().unwrap();
        assert_eq!(id, "ready");
        assert_eq!(why, "guest b: nothing listens");
        assert!(w.measurements.rounds[0].perf.contains_key("udp-qp"));
        assert!(w.measurements.rounds[1].perf.contains_key("udp-sk"));
        assert!(w.current.is_some());
        assert!(w
            .describe("udp-sk.2")
            .starts_with("round 2/3: UDP ping-pong"));
        drop(w);
        // Ready, the netdevs, then QPs on IPv4 before QPs on IPv6; in round 2 sockets over
        // the netdev before those over virtio-net (each round's 6 RDMA tests on qpip0, siw
        // and rxe, 4 of them on qpip's own library too).
        assert!(said[0].starts_with("[4/122] round 1/3: UDP"), "{said:?}");
        assert!(said[1].starts_with("      ok ("), "{said:?}");
        assert!(
            said[2].starts_with("[44/122] round 2/3: UDP ping-pong a⇄b over kernel"),
            "{said:?}"
        );
    }

    #[test]
    fn a_note_of_guest_a_is_a_progress_line() {
        let mut said = Vec::new();
        let mut progress = |s: &str| said.push(s.to_string());
        let mut w = Watcher::new(Plan::bench().steps(), 3, &mut progress, false);
        w.feed(
            0,
            b"@step=netdev\n@note=no qpip netdev (guest b: none): skipped\n",
        );
        drop(w);
        assert_eq!(said[1], "      no qpip netdev (guest b: none): skipped");
    }
}
