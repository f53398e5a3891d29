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

/// A writer that swallows its first `skip` bytes.
struct Skipping {
    inner: Shared,
    skip: usize,
}

impl Shared {
    fn skipping(self, skip: usize) -> Skipping {
        Skipping { inner: self, skip }
    }
}

impl Write for Skipping {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.skip > 0 {
            let n = self.skip.min(b.len());
            self.skip -= n;
            return Ok(n);
        }
        self.inner.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub struct PcapSink {
    writer: Option<PcapWriter<Skipping>>,
    file: Shared,
    last_flush: Instant,
    path: String,
}

/// Every capture open in the process, for [`flush_all`].
static OPEN: Mutex<Vec<std::sync::Weak<Mutex<BufWriter<File>>>>> = Mutex::new(Vec::new());

/// Writes out what every open capture holds in its buffer: for a process about to exit
/// without dropping its links (a signal), so the capture ends with its last frames.
pub fn flush_all() {
    let open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    for f in open.iter().filter_map(std::sync::Weak::upgrade) {
        let _ = f.lock().unwrap_or_else(|p| p.into_inner()).flush();
    }
}

/// The size of a pcap file's header.
const FILE_HEADER: u64 = 24;

impl PcapSink {
    /// A new capture in `path` (replacing what was there).
    pub fn create(path: &Path) -> io::Result<PcapSink> {
        Self::open(path, false)
    }

    /// Goes on with the capture in `path` if there is one (its records are appended, the
    /// file keeps its one header), else starts it: one file for every session of a
    /// function that serves guest after guest.
    pub fn append(path: &Path) -> io::Result<PcapSink> {
        Self::open(path, true)
    }

    fn open(path: &Path, append: bool) -> io::Result<PcapSink> {
        let cannot = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("cannot create capture {}: {e}", path.display()),
            )
        };
        let resume = append && std::fs::metadata(path).is_ok_and(|m| m.len() >= FILE_HEADER);
        let file = if resume {
            std::fs::OpenOptions::new().append(true).open(path)
        } else {
            File::create(path)
        }
        .map_err(cannot)?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535 + 14 + 40,
            ..Default::default()
        };
        let shared = Shared(Arc::new(Mutex::new(BufWriter::new(file))));
        {
            let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
            open.retain(|w| w.strong_count() > 0);
            open.push(Arc::downgrade(&shared.0));
        }
        // Resuming, the writer's own header must not reach the file a second time.
        let skip = if resume { FILE_HEADER as usize } else { 0 };
        let writer = PcapWriter::with_header(shared.clone().skipping(skip), header)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_in(path: &Path) -> Vec<Vec<u8>> {
        let mut r = pcap_file::pcap::PcapReader::new(File::open(path).unwrap()).unwrap();
        let mut out = Vec::new();
        while let Some(p) = r.next_packet() {
            out.push(p.unwrap().data.into_owned());
        }
        out
    }

    #[test]
    fn a_capture_goes_on_in_the_same_file_with_one_header() {
        let dir = std::env::temp_dir().join(format!("qpip-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.pcap");
        // append on no file starts one; create replaces an old one.
        std::fs::write(&path, b"old").unwrap();
        let mut s = PcapSink::create(&path).unwrap();
        s.record(&[1; 60]);
        s.record(&[2; 70]);
        drop(s);
        let mut s = PcapSink::append(&path).unwrap();
        s.record(&[3; 80]);
        drop(s);
        assert_eq!(frames_in(&path), [vec![1; 60], vec![2; 70], vec![3; 80]]);
        let fresh = dir.join("g.pcap");
        let mut s = PcapSink::append(&fresh).unwrap();
        s.record(&[4; 64]);
        drop(s);
        assert_eq!(frames_in(&fresh), [vec![4; 64]]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
