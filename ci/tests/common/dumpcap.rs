//! dumpcap on the lab bridge: a capture of some TCP ports that loses no frame at its end.

use qpip_lab::netns;
use qpip_lab::LabHost;
use std::fs;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// dumpcap on the lab bridge, capturing the TCP segments of some ports into a pcap file.
///
/// Stopping it is where frames could be lost: dumpcap, stopped while the frames already on
/// the bridge still wait in its socket, writes only those it has read. So the lab host
/// sends a marker frame after the guests are done (a ping from the host's address, which
/// the capture filter lets in too), and dumpcap is stopped only once the marker is in the
/// file: every frame before it is there too. The file then keeps only the ports' frames.
///
/// The marker is a ping to guest a's kernel address, so guest a must still be up when
/// `stop` runs: scripts end with `lab-wait host-done`, which the lab writes once the host's
/// side (and so `stop`) has returned. A guest gone takes its bridge port with it, and the
/// ping never leaves the host.
pub struct Capture {
    child: Option<Child>,
    raw: PathBuf,
    file: PathBuf,
    ports: RangeInclusive<u16>,
}

impl Capture {
    /// Starts capturing TCP `ports` into `file` (`snaplen`: bytes kept of each frame, all
    /// when None) and returns once dumpcap has written the file's header, i.e. once it
    /// captures.
    pub fn start(
        host: &LabHost,
        file: &Path,
        ports: RangeInclusive<u16>,
        snaplen: Option<u32>,
    ) -> Result<Capture, String> {
        let raw = file.with_extension("raw.pcap");
        let log = fs::File::create(file.with_extension("log"))
            .map_err(|e| format!("cannot create dumpcap's log: {e}"))?;
        let mut cmd = host.command("dumpcap");
        cmd.args(["-q", "-P", "-i", netns::BRIDGE, "-f"])
            .arg(format!(
                "tcp portrange {}-{} or (icmp6 and src host {})",
                ports.start(),
                ports.end(),
                netns::HOST_ADDR
            ))
            .arg("-w")
            .arg(&raw);
        if let Some(n) = snaplen {
            cmd.args(["-s", &n.to_string()]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run dumpcap (tshark's capture tool): {e}"))?;
        let mut cap = Capture {
            child: Some(child),
            raw,
            file: file.to_path_buf(),
            ports,
        };
        // A pcap file header is 24 bytes; dumpcap writes it once its capture is open.
        let deadline = Instant::now() + Duration::from_secs(30);
        while fs::metadata(&cap.raw).map_or(0, |m| m.len()) < 24 {
            cap.check_running()?;
            if Instant::now() >= deadline {
                return Err(format!(
                    "dumpcap wrote no {} within 30 s",
                    cap.raw.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(cap)
    }

    fn log(&self) -> String {
        self.file.with_extension("log").display().to_string()
    }

    fn check_running(&mut self) -> Result<(), String> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(st))) => Err(format!("dumpcap exited ({st}); see {}", self.log())),
            _ => Ok(()),
        }
    }

    /// Sends markers until one is in the file, stops dumpcap as Ctrl-C does (it writes
    /// what it holds and exits 0), then writes the file of the ports' frames.
    pub fn stop(&mut self, host: &LabHost) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_running()?;
            // Its echo reply does not matter, only that the request crosses the bridge.
            let _ = host
                .command("ping")
                .args(["-6", "-c", "1", "-W", "1", &netns::virtio_addr(1)])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let bytes = fs::read(&self.raw).map_err(|e| format!("{}: {e}", self.raw.display()))?;
            if pcap::records(&bytes, true)?
                .1
                .iter()
                .any(|r| pcap::is_marker(r.1))
            {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no marker frame reached {} in 60 s (is guest a still up?)",
                    self.raw.display()
                ));
            }
        }
        let mut child = self.child.take().expect("checked running");
        // SAFETY: kill() on the pid of our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let st = child
            .wait()
            .map_err(|e| format!("waiting for dumpcap: {e}"))?;
        if !st.success() {
            return Err(format!("dumpcap ended with {st}; see {}", self.log()));
        }
        let bytes = fs::read(&self.raw).map_err(|e| format!("{}: {e}", self.raw.display()))?;
        let (header, records) = pcap::records(&bytes, false)?;
        let mut out = header.to_vec();
        for (whole, frame) in records {
            if pcap::is_port_in(frame, &self.ports) {
                out.extend_from_slice(whole);
            }
        }
        fs::write(&self.file, out).map_err(|e| format!("{}: {e}", self.file.display()))?;
        let _ = fs::remove_file(&self.raw);
        Ok(())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Just enough of the pcap file format (the classic one dumpcap -P writes) to find the
/// marker frames and keep the others.
pub mod pcap {
    use std::net::Ipv6Addr;

    /// The file header and each record (the whole record, and its frame). `growing`: the
    /// file is still being written, so a cut-short last record ends the list instead of
    /// being an error.
    #[allow(clippy::type_complexity)]
    pub fn records(bytes: &[u8], growing: bool) -> Result<(&[u8], Vec<(&[u8], &[u8])>), String> {
        let magic = bytes.get(..4).ok_or("shorter than a pcap header")?;
        let le = match magic {
            [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
            [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
            _ => return Err(format!("not a pcap file (magic {magic:02x?})")),
        };
        let u32_at = |b: &[u8], at: usize| -> Option<u32> {
            let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
            Some(if le {
                u32::from_le_bytes(w)
            } else {
                u32::from_be_bytes(w)
            })
        };
        let header = bytes.get(..24).ok_or("shorter than a pcap header")?;
        let mut at = 24;
        let mut out = Vec::new();
        while at < bytes.len() {
            let len = u32_at(bytes, at + 8).map(|l| l as usize);
            match len.and_then(|l| bytes.get(at..at + 16 + l)) {
                Some(whole) => {
                    out.push((whole, &whole[16..]));
                    at += whole.len();
                }
                None if growing => break,
                None => return Err(format!("record at byte {at} is cut short")),
            }
        }
        Ok((header, out))
    }

    /// An Ethernet frame carrying IPv6 (no extension headers) of next header `proto`:
    /// the IPv6 packet.
    fn ipv6(frame: &[u8], proto: u8) -> Option<&[u8]> {
        (frame.get(12..14)? == [0x86, 0xdd] && *frame.get(20)? == proto).then(|| &frame[14..])
    }

    /// The lab host's ICMPv6 echo request.
    pub fn is_marker(frame: &[u8]) -> bool {
        let host: Ipv6Addr = qpip_lab::netns::HOST_ADDR.parse().expect("an IPv6 address");
        ipv6(frame, 58)
            .is_some_and(|p| p.get(8..24) == Some(&host.octets()) && p.get(40) == Some(&128))
    }

    /// A TCP segment from or to one of `ports`.
    pub fn is_port_in(frame: &[u8], ports: &std::ops::RangeInclusive<u16>) -> bool {
        let port =
            |p: &[u8], at: usize| p.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        ipv6(frame, 6).is_some_and(|p| {
            [40, 42]
                .iter()
                .any(|&at| port(p, at).is_some_and(|n| ports.contains(&n)))
        })
    }
}
