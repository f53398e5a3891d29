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
        let before_ok = line[..start].chars().next_back().map_or(true, |c| !is_word_char(c));
        // Markers ending in punctuation or a space end the word themselves; bare words
        // ("Oops") must not continue ("Oopsie").
        let after_ok = !marker.ends_with(is_word_char)
            || line[end..].chars().next().map_or(true, |c| !is_word_char(c));
        if before_ok && after_ok {
            return true;
        }
        from = start + marker.len();
    }
    false
}

/// Formats problems for an error message: at most `max` lines, then a count of the rest.
pub fn format_problems(problems: &[KernelProblem], max: usize) -> String {
    let mut s = String::new();
    for p in problems.iter().take(max) {
        s.push_str(&format!("    {:>5}: {}\n", p.line_no, p.line));
    }
    if problems.len() > max {
        s.push_str(&format!("    ... and {} more\n", problems.len() - max));
    }
    s
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
        assert_eq!(scan("[ 1.0] kernel BUG at mm/slub.c:435!")[0].marker, "kernel BUG at");
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
    fn formatting_caps_the_line_count() {
        let text = "WARNING: a\n".repeat(5);
        let s = format_problems(&scan(&text), 3);
        assert_eq!(s.lines().count(), 4);
        assert!(s.ends_with("... and 2 more\n"), "{s}");
    }
}
