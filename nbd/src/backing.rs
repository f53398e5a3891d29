//! What the server exports — a regular file or a block device — and its I/O, submitted
//! through io_uring so that many requests are in flight at once and complete in any
//! order. One [`Disk`] a connection: its ring, and the operations in flight on it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use io_uring::{opcode, types, IoUring};

use crate::proto::flags;

/// The exported file or block device.
pub struct Backing {
    file: File,
    size: u64,
    read_only: bool,
    block_device: bool,
}

/// `BLKGETSIZE64`: a block device's size in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

impl Backing {
    /// Opens `path` for export (read-only if asked, or if it cannot be opened for writing
    /// and `read_only` is not forced off).
    pub fn open(path: &Path, read_only: bool) -> io::Result<Backing> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let meta = file.metadata()?;
        let block_device = meta.file_type().is_block_device();
        let size = if block_device {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which lives.
            let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            size
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or a block device",
            ));
        };
        Ok(Backing {
            file,
            size,
            read_only,
            block_device,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// The transmission flags of the export: flush and FUA always (a write-back page
    /// cache sits between the server and the storage); trim and write-zeroes as
    /// `fallocate` (hole punching, zeroing); one server's connections share the page
    /// cache, so a flush on one covers writes replied on any (multi-connection).
    pub fn transmission_flags(&self) -> u16 {
        let mut f = flags::HAS_FLAGS
            | flags::SEND_FLUSH
            | flags::SEND_FUA
            | flags::SEND_TRIM
            | flags::SEND_WRITE_ZEROES
            | flags::CAN_MULTI_CONN;
        if self.read_only {
            f |= flags::READ_ONLY;
        }
        f
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    /// A write; with `fua`, on stable storage when it completes.
    Write {
        fua: bool,
    },
    /// Everything written so far to stable storage.
    Flush,
    /// `fallocate` with this mode.
    Fallocate(i32),
}

/// One operation in flight: a buffer the caller keeps alive until it completes.
#[derive(Debug, Clone, Copy)]
struct Op {
    tag: u64,
    kind: OpKind,
    buf: *mut u8,
    len: usize,
    offset: u64,
    /// Bytes done so far (reads and writes may complete in parts).
    done: usize,
}

/// Operations in flight at most on one ring (its submission queue's size; the
/// completion queue is twice that).
pub const RING_ENTRIES: u32 = 256;

/// A connection's I/O ring.
pub struct Disk {
    ring: IoUring,
    efd: OwnedFd,
    fd: RawFd,
    ops: Vec<Option<Op>>,
    free: Vec<usize>,
}

impl Disk {
    /// A ring for I/O on `backing`, which must outlive it. Its completions signal
    /// [`Disk::event_fd`].
    pub fn new(backing: &Backing) -> io::Result<Disk> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: eventfd returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created and owned by nothing else.
        let efd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(efd.as_raw_fd())?;
        Ok(Disk {
            ring,
            efd,
            fd: backing.fd(),
            ops: Vec::new(),
            free: Vec::new(),
        })
    }

    /// The descriptor that becomes readable when an operation completes.
    pub fn event_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    /// Operations in flight.
    pub fn in_flight(&self) -> usize {
        self.ops.len() - self.free.len()
    }

    /// Whether another operation may be started.
    pub fn has_room(&self) -> bool {
        self.in_flight() < RING_ENTRIES as usize
    }

    /// Starts an operation tagged `tag` on `len` bytes at `buf` (reads and writes) and
    /// `offset` of the export.
    ///
    /// # Safety
    /// For reads and writes, `buf..buf+len` must stay valid (and, for reads, not be read
    /// or written by anyone else) until the operation's completion is returned by
    /// [`Disk::complete`].
    pub unsafe fn start(&mut self, tag: u64, kind: OpKind, buf: *mut u8, len: usize, offset: u64) {
        let op = Op {
            tag,
            kind,
            buf,
            len,
            offset,
            done: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.ops[s] = Some(op);
                s
            }
            None => {
                self.ops.push(Some(op));
                self.ops.len() - 1
            }
        };
        self.push(slot);
    }

    fn push(&mut self, slot: usize) {
        let op = self.ops[slot].expect("an operation in flight");
        let fd = types::Fd(self.fd);
        let rest = op.len - op.done;
        // One submission moves at most 2 GiB; a longer transfer continues in parts.
        let n = rest.min(1 << 30) as u32;
        let at = op.offset + op.done as u64;
        // SAFETY (the pointers): valid for the whole operation, as `start` requires.
        let ptr = unsafe { op.buf.add(op.done) };
        let sqe = match op.kind {
            OpKind::Read => opcode::Read::new(fd, ptr, n).offset(at).build(),
            OpKind::Write { fua } => opcode::Write::new(fd, ptr, n)
                .offset(at)
                .rw_flags(if fua { libc::RWF_DSYNC } else { 0 })
                .build(),
            OpKind::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            OpKind::Fallocate(mode) => opcode::Fallocate::new(fd, op.len as u64)
                .offset(op.offset)
                .mode(mode)
                .build(),
        }
        .user_data(slot as u64);
        loop {
            // SAFETY: the entry's buffer stays valid until its completion (see `start`).
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                break;
            }
            // The submission queue is full: hand it to the kernel and try again.
            let _ = self.ring.submit();
        }
    }

    /// Submits what was started.
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }

    /// The operations completed since the last call: (tag, result: bytes or -errno),
    /// appended to `out`. A read or write that moved part of its bytes continues on its
    /// own; a read that meets the end of the file completes with what it read.
    pub fn complete(&mut self, out: &mut Vec<(u64, i32)>) {
        let mut buf = [0u8; 8];
        // SAFETY: reads 8 bytes into a buffer of 8 (clears the eventfd's count).
        unsafe { libc::read(self.efd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        let done: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        let mut resubmitted = false;
        for (slot, res) in done {
            let Some(op) = self.ops.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let moves = matches!(op.kind, OpKind::Read | OpKind::Write { .. });
            if moves && res > 0 && op.done + (res as usize) < op.len {
                op.done += res as usize;
                self.push(slot);
                resubmitted = true;
                continue;
            }
            let result = match (moves, res) {
                (true, r) if r >= 0 => (op.done + r as usize).min(i32::MAX as usize) as i32,
                (_, r) => r,
            };
            out.push((op.tag, result));
            self.ops[slot] = None;
            self.free.push(slot);
        }
        if resubmitted {
            let _ = self.ring.submit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tmp_file(bytes: &[u8]) -> (std::path::PathBuf, Backing) {
        let dir = std::env::temp_dir().join(format!("qpip-nbd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}", bytes.as_ptr() as usize));
        File::create(&path).unwrap().write_all(bytes).unwrap();
        let b = Backing::open(&path, false).unwrap();
        (path, b)
    }

    fn wait(disk: &mut Disk, n: usize) -> Vec<(u64, i32)> {
        let mut out = Vec::new();
        while out.len() < n {
            disk.ring.submit_and_wait(1).unwrap();
            disk.complete(&mut out);
        }
        out
    }

    #[test]
    fn reads_and_writes_go_through_the_ring() {
        let (path, b) = tmp_file(&[7u8; 8192]);
        assert_eq!(b.size(), 8192);
        assert!(!b.is_block_device());
        let mut disk = Disk::new(&b).unwrap();
        let mut w = vec![0xabu8; 4096];
        let mut r = vec![0u8; 8192];
        unsafe {
            disk.start(1, OpKind::Write { fua: true }, w.as_mut_ptr(), 4096, 4096);
        }
        disk.submit().unwrap();
        assert_eq!(wait(&mut disk, 1), [(1, 4096)]);
        unsafe {
            disk.start(2, OpKind::Flush, std::ptr::null_mut(), 0, 0);
            disk.start(3, OpKind::Read, r.as_mut_ptr(), 8192, 0);
        }
        disk.submit().unwrap();
        let mut got = wait(&mut disk, 2);
        got.sort();
        assert_eq!(got, [(2, 0), (3, 8192)]);
        assert!(r[..4096].iter().all(|&x| x == 7));
        assert!(r[4096..].iter().all(|&x| x == 0xab));
        // A read past the end completes with what there was.
        unsafe { disk.start(4, OpKind::Read, r.as_mut_ptr(), 8192, 4096) };
        disk.submit().unwrap();
        assert_eq!(wait(&mut disk, 1), [(4, 4096)]);
        assert_eq!(disk.in_flight(), 0);
        std::fs::remove_file(path).unwrap();
    }
}
