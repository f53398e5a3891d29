//! `--pcap FILE`: a classic pcap capture (Ethernet link type) of frames, readable by
//! tcpdump, tshark and Wireshark.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

/// How often buffered records reach the file (and at the end).
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The buffered file, shared between the pcap writer and the sink so the sink can flush
/// it (`PcapWriter` does not give its writer back without consuming itself).
#[derive(Clone)]
struct Shared(Arc<Mutex<BufWriter<File>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("not poisoned").write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().expect("not poisoned").flush()
    }
}

pub struct PcapSink {
    writer: Option<PcapWriter<Shared>>,
    file: Shared,
    last_flush: Instant,
    path: String,
}

impl PcapSink {
    pub fn create(path: &Path) -> io::Result<PcapSink> {
        let file = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create capture {}: {e}", path.display()),
            )
        })?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535 + 14 + 40,
            ..Default::default()
        };
        let shared = Shared(Arc::new(Mutex::new(BufWriter::new(file))));
        let writer = PcapWriter::with_header(shared.clone(), header)
            .map_err(|e| io::Error::other(format!("cannot write {}: {e}", path.display())))?;
        Ok(PcapSink {
            writer: Some(writer),
            file: shared,
            last_flush: Instant::now(),
            path: path.display().to_string(),
        })
    }

    /// Appends one frame. A write error is logged once and ends the capture (the link
    /// goes on).
    pub fn record(&mut self, frame: &[u8]) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut res = w
            .write_packet(&PcapPacket::new(ts, frame.len() as u32, frame))
            .map(|_| ())
            .map_err(|e| e.to_string());
        if res.is_ok() && self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            res = self.file.flush().map_err(|e| e.to_string());
        }
        if let Err(e) = res {
            log::error!("capture {}: {e}; capture stopped", self.path);
            self.writer = None;
        }
    }

    pub fn flush(&mut self) {
        let _ = self.file.flush();
    }
}

impl Drop for PcapSink {
    fn drop(&mut self) {
        self.flush();
    }
}
