//! Reading a capture with tshark (Wireshark's command line), for the tests that check
//! what the device put on a link with an independent dissector.

use std::path::Path;
use std::process::Command;

/// A capture that tshark reads.
pub struct Tshark<'a>(&'a Path);

impl<'a> Tshark<'a> {
    /// tshark over `pcap`; `None` when tshark is not installed, after saying that the
    /// check of `pcap` is skipped.
    pub fn over(pcap: &'a Path) -> Option<Tshark<'a>> {
        let installed = Command::new("tshark")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            println!(
                "SKIPPED tshark check of {}: not installed (install tshark)",
                pcap.display()
            );
            return None;
        }
        Some(Tshark(pcap))
    }

    /// Runs `tshark -r <pcap> -n <args>` and returns what it prints, one line a packet; a
    /// tshark that fails fails the test.
    pub fn read(&self, args: &[&str]) -> String {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(self.0)
            .arg("-n")
            .args(args)
            .output()
            .expect("tshark runs");
        assert!(
            out.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}
