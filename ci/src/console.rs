//! Scanning guest kernel logs for signs of a kernel problem.
//!
//! A guest that finishes its command with status 0 can still have hit a bug in the driver:
//! the kernel reports those with a warning, an oops or a stack dump and carries on. Every VM
//! run therefore scans the console and the guest's dmesg and fails when it finds one.

/// Markers the kernel prints when something went wrong, matched case-sensitively.
///
/// Each one is matched only at a word start (so `DEBUG:` does not count as `BUG:`), and
/// `Oops` also only as a whole word.
const MARKERS: &[&str] = &[
    "Oops",          // "Oops: general protection fault ...", "Oops: 0002 [#1] SMP"
    "BUG:",          // "BUG: kernel NULL pointer dereference", "BUG: sleeping function ..."
    "kernel BUG at", // BUG_ON(): "kernel BUG at drivers/...!"
    "WARNING:",      // WARN_ON(): "WARNING: CPU: 0 PID: 1 at drivers/... "
    "Call Trace:",   // any stack dump, whatever printed it
    "Kernel panic",  // "Kernel panic - not syncing: ..."
];

/// One line of a kernel log that carries a problem marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProblem {
    /// Line number in the scanned text, from 1.
    pub line_no: usize,
    /// The marker that matched.
    pub marker: &'static str,
    /// The line itself, without trailing whitespace or carriage return.
    pub line: String,
}

/// Returns the lines of `text` that carry a kernel problem marker, in order.
pub fn scan(text: &str) -> Vec<KernelProblem> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(marker) = MARKERS.iter().find(|m| contains_marker(line, m)) {
            found.push(KernelProblem {
                line_no: i + 1,
                marker,
                line: line.trim_end().to_string(),
            });
        }
    }
    found
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn contains_marker(line: &str, marker: &str) -> bool {
    let mut from = 0;
    while let Some(pos) = line[from..].find(marker) {
        let start = from + pos;
        let end = start + marker.len();
        let before_ok = !line[..start].chars().next_back().is_some_and(is_word_char);
        // Markers ending in punctuation or a space end the word themselves; bare words
        // ("Oops") must not continue ("Oopsie").
        let after_ok = !marker.ends_with(is_word_char)
            || !line[end..].chars().next().is_some_and(is_word_char);
        if before_ok && after_ok {
            return true;
        }
        from = start + marker.len();
    }
    false
}

/// Formats problems found in `text` for an error message: the first one with the lines
/// around it (a marker line alone rarely says what happened: the location of a warning and
/// the stack frames follow it), then the other marker lines, at most `max` of them.
pub fn format_problems(text: &str, problems: &[KernelProblem], max: usize) -> String {
    const BEFORE: usize = 2;
    const AFTER: usize = 10;
    let Some(first) = problems.first() else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    let from = first.line_no.saturating_sub(1 + BEFORE);
    let to = (first.line_no + AFTER).min(lines.len());
    let mut s = String::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        let mark = if i + 1 == first.line_no { '>' } else { ' ' };
        s.push_str(&format!("  {mark}{:>5}: {}\n", i + 1, line.trim_end()));
    }
    let rest: Vec<_> = problems.iter().filter(|p| p.line_no > to).collect();
    if !rest.is_empty() {
        s.push_str("  other problem lines:\n");
    }
    for p in rest.iter().take(max) {
        s.push_str(&format!("  >{:>5}: {}\n", p.line_no, p.line));
    }
    if rest.len() > max {
        s.push_str(&format!("   ... and {} more\n", rest.len() - max));
    }
    s
}

/// Removes terminal control sequences from console bytes, so that streaming a guest
/// console to a terminal does not reset or reconfigure it (SeaBIOS and the kernel's early
/// console send "ESC c", "ESC [2J" and the like). Keeps text, newlines and tabs. Sequences
/// may be split across chunks, so the filter keeps state between calls.
#[derive(Debug, Default)]
pub struct TerminalFilter {
    state: FilterState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum FilterState {
    #[default]
    Text,
    Escape,
    Csi,
}

impl TerminalFilter {
    pub fn filter(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            self.state = match (self.state, b) {
                (FilterState::Text, 0x1b) => FilterState::Escape,
                (FilterState::Text, b'\n' | b'\t') => {
                    out.push(b);
                    FilterState::Text
                }
                (FilterState::Text, b) if b < 0x20 || b == 0x7f => FilterState::Text,
                (FilterState::Text, b) => {
                    out.push(b);
                    FilterState::Text
                }
                (FilterState::Escape, b'[') => FilterState::Csi,
                (FilterState::Escape, _) => FilterState::Text,
                // CSI parameters and intermediates run until a final byte in 0x40..=0x7e.
                (FilterState::Csi, 0x40..=0x7e) => FilterState::Text,
                (FilterState::Csi, _) => FilterState::Csi,
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Excerpts of real 6.12 kernel output.
    const WARN: &str = "\
[    2.101234] qpip 0000:00:03.0: enabling device (0000 -> 0002)
[    2.102000] ------------[ cut here ]------------
[    2.102001] WARNING: CPU: 0 PID: 1 at drivers/qpip/main.c:120 qpip_probe+0x5b/0x1f0 [qpip]
[    2.102002] Modules linked in: qpip(O+) 9p 9pnet_virtio
[    2.102010] Call Trace:
[    2.102011]  <TASK>
[    2.102012]  ? __warn+0x89/0x130
";
    const OOPS: &str = "\
[    3.000000] BUG: kernel NULL pointer dereference, address: 0000000000000008
[    3.000001] #PF: supervisor read access in kernel mode
[    3.000002] Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI
[    3.000003] Kernel panic - not syncing: Fatal exception
";
    const CLEAN: &str = "\
[    0.000000] Linux version 6.12.107+deb13-amd64 (debian-kernel@lists.debian.org)
[    0.120000] DEBUG: nothing to see (a driver's own debug prefix)
[    0.130000] ACPI: Warning: this is not a kernel WARNING marker
[    0.140000] Oopsie is not an oops; NOWARNING: is not a warning either
[    1.500000] qpip 0000:00:03.0: qpip0: qpip device interface 1.0, 64 doorbell pages, 16 MSI-X vectors
qpip-guest: exit status 0
";

    #[test]
    fn finds_a_warning_and_its_stack_dump() {
        let p = scan(WARN);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!((p[0].line_no, p[0].marker), (3, "WARNING:"));
        assert!(p[0].line.contains("qpip_probe"));
        assert_eq!((p[1].line_no, p[1].marker), (5, "Call Trace:"));
    }

    #[test]
    fn finds_bug_oops_and_panic() {
        let markers: Vec<_> = scan(OOPS).iter().map(|p| p.marker).collect();
        assert_eq!(markers, ["BUG:", "Oops", "Kernel panic"]);
        assert_eq!(
            scan("[ 1.0] kernel BUG at mm/slub.c:435!")[0].marker,
            "kernel BUG at"
        );
    }

    #[test]
    fn clean_boot_log_has_no_problems() {
        assert_eq!(scan(CLEAN), vec![]);
    }

    #[test]
    fn markers_match_at_line_start_and_after_punctuation() {
        assert_eq!(scan("WARNING: at start").len(), 1);
        assert_eq!(scan("x:Oops").len(), 1);
        assert_eq!(scan("Oops").len(), 1);
        assert_eq!(scan("Oops_x").len(), 0);
        assert_eq!(scan("xBUG: y").len(), 0);
        // A rejected occurrence does not hide a later real one on the same line.
        assert_eq!(scan("DEBUG: then BUG: for real").len(), 1);
    }

    #[test]
    fn formatting_shows_context_and_caps_the_rest() {
        let s = format_problems(WARN, &scan(WARN), 5);
        assert!(s.contains(">    3: [    2.102001] WARNING: CPU: 0"), "{s}");
        assert!(s.contains("     1: [    2.101234] qpip"), "{s}");
        assert!(s.contains("     7: "), "{s}");
        assert!(!s.contains("other problem lines"), "{s}");

        let text = format!("{}{}", "x\n".repeat(20), "WARNING: a\n".repeat(20));
        let s = format_problems(&text, &scan(&text), 3);
        assert!(s.contains("other problem lines:"), "{s}");
        assert!(s.ends_with("... and 6 more\n"), "{s}");
    }

    #[test]
    fn terminal_filter_drops_control_sequences_across_chunks() {
        let mut f = TerminalFilter::default();
        let mut out = f.filter(b"\x1bc\x1b[?7l\x1b[2JSeaBIOS\r\n\x1b[");
        out.extend(f.filter(b"0mLinux\tok\n"));
        assert_eq!(String::from_utf8(out).unwrap(), "SeaBIOS\nLinux\tok\n");
    }
}
