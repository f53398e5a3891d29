//! Stdin: what it is, a regular file sent from its mapped pages, anything else read into
//! registered buffers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use qpip::{MemoryRegion, SendWr};

use super::Cat;
use crate::args::Fail;
use crate::mapalloc::adopt_mapping;

/// What stdin is, for the copy loop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Input {
    /// A pipe, terminal or socket: read when poll(2) says so.
    Poll,
    /// A regular file (or block device): reads never wait, so no poll(2).
    File,
}

/// A regular-file stdin sent from its pages: the file from `pos` to `end` (its size when
/// the transfer began), mapped and registered a window at a time.
pub(super) struct Mapped {
    /// The descriptor mapped: stdin, or stdin reopened read-write (device).
    fd: Option<OwnedFd>,
    /// A shared, writable mapping (the device pins its pages for writing) or a private,
    /// read-only one (software provider).
    shared: bool,
    pos: u64,
    end: u64,
    /// Windows mapped so far.
    windows: usize,
    /// The window being sent: its region and the file offset of the region's first byte.
    win: Option<(MemoryRegion, u64)>,
}

impl Mapped {
    fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(0, |f| f.as_raw_fd())
    }
}

/// `wr_id` of a send from a mapped file (copy buffers are named by their index).
pub(super) const MAPPED_WR: u64 = 1 << 63;

/// Bytes of a regular-file stdin mapped and registered at a time: 2 MiB first, so the
/// first send goes out soon, then twice the window before, up to 16 MiB; each window is
/// registered while the sends of the one before are in flight.
const WINDOW: usize = 16 << 20;
const FIRST_WINDOW: usize = 2 << 20;

impl Cat<'_> {
    /// Looks at stdin: a regular file is sent from its mapping where that works (TCP),
    /// read without waiting otherwise; anything else is read when poll(2) says so.
    pub(crate) fn open_input(&mut self) -> Result<(), Fail> {
        // SAFETY: fstat writes into the zeroed stat it is given.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(0, &mut st) } != 0 {
            // No stdin at all: treat it like an empty one, as read() would.
            return Ok(());
        }
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFBLK {
            return Ok(());
        }
        self.input = Input::File;
        if fmt != libc::S_IFREG || self.udp {
            return Ok(());
        }
        // SAFETY: lseek on descriptor 0 only moves or reads its offset.
        let pos = unsafe { libc::lseek(0, 0, libc::SEEK_CUR) };
        if pos < 0 || pos >= st.st_size {
            return Ok(());
        }
        match self.map_file(pos as u64, st.st_size as u64) {
            Ok(m) => {
                self.say(format!(
                    "stdin: {} bytes of a regular file, sent from its mapped pages (zero-copy)",
                    m.end - m.pos
                ));
                self.map = Some(m);
            }
            Err(why) => self.say(format!("stdin: a regular file, read into buffers ({why})")),
        }
        Ok(())
    }

    /// Prepares sending `pos..end` of stdin from its pages and maps the first window.
    fn map_file(&self, pos: u64, end: u64) -> Result<Mapped, String> {
        let soft = self.ctx.provider() == qpip::ProviderKind::Soft;
        let fd = if soft {
            None
        } else {
            // The device pins the pages for writing (every region may be written), which
            // the kernel allows long-term for shared memory (tmpfs) only, and which needs a
            // writable shared mapping: a read-write descriptor. Nothing is ever written.
            // SAFETY: fstatfs writes into the zeroed statfs it is given.
            let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstatfs(0, &mut fs) } != 0 {
                return Err(format!("fstatfs: {}", io::Error::last_os_error()));
            }
            if fs.f_type as i64 != libc::TMPFS_MAGIC {
                return Err("not in tmpfs".into());
            }
            // SAFETY: opening a path; the descriptor returned is owned below.
            let fd =
                unsafe { libc::open(c"/proc/self/fd/0".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(format!(
                    "cannot reopen it read-write: {}",
                    io::Error::last_os_error()
                ));
            }
            // SAFETY: fd was just opened and nothing else owns it.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let mut m = Mapped {
            fd,
            shared: !soft,
            pos,
            end,
            windows: 0,
            win: None,
        };
        self.next_window(&mut m)?;
        Ok(m)
    }

    /// Maps and registers the window of the file that starts at `m.pos`.
    fn next_window(&self, m: &mut Mapped) -> Result<(), String> {
        m.win = None;
        let page = page_size() as u64;
        let base = m.pos / page * page;
        let most = (FIRST_WINDOW << m.windows.min(8)).min(WINDOW);
        let len = (m.end - base).min(most as u64) as usize;
        let (prot, flags) = if m.shared {
            (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
        } else {
            (libc::PROT_READ, libc::MAP_PRIVATE)
        };
        // SAFETY: a new mapping at an address the kernel picks; nothing refers to it yet.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                m.raw_fd(),
                base as _,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", io::Error::last_os_error()));
        }
        // SAFETY: p is a fresh mapping of len bytes that nothing else refers to.
        let buf = unsafe { adopt_mapping(p.cast(), len) }.ok_or("too many mappings")?;
        let mr = self
            .ctx
            .register(buf)
            .map_err(|e| format!("cannot register its mapping: {e}"))?;
        m.win = Some((mr, base));
        m.windows += 1;
        Ok(())
    }

    /// One send from the mapped file; the next window is mapped when one is used up. When
    /// the mapped part is sent (or a window cannot be mapped) stdin's offset moves past
    /// what was sent and reads take over (a file that grew meanwhile is read to its end).
    pub(super) fn send_mapped(&mut self) -> Result<(), Fail> {
        let mut m = self.map.take().expect("a mapped stdin");
        if m.pos < m.end {
            let win_end = m.win.as_ref().map(|(mr, base)| base + mr.len() as u64);
            if win_end.is_none_or(|e| m.pos >= e) {
                if let Err(why) = self.next_window(&mut m) {
                    self.say(format!("stdin: reading the rest of the file ({why})"));
                    m.end = m.pos;
                }
            }
        }
        if m.pos < m.end {
            let (mr, base) = m.win.as_ref().expect("a mapped window");
            let off = (m.pos - base) as usize;
            let len = (mr.len() - off).min(self.chunk);
            let sge = [mr.sge(off, len)];
            self.qp
                .post_send(&SendWr::new(MAPPED_WR, &sge))
                .map_err(|e| ("send", e))?;
            self.in_flight += 1;
            m.pos += len as u64;
        }
        if m.pos < m.end {
            self.map = Some(m);
            return Ok(());
        }
        // The sends in flight keep the last window registered and mapped until they
        // complete; the region goes with the last of them.
        // SAFETY: lseek on descriptor 0 only moves its offset.
        if unsafe { libc::lseek(0, m.pos as libc::off_t, libc::SEEK_SET) } < 0 {
            return Err(("seek stdin", io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// One read from stdin into a free copy buffer (registering one if none is free), sent
    /// at once; end of stdin starts the close (TCP).
    pub(super) fn read_stdin(&mut self) -> Result<(), Fail> {
        let slot = match self.free_sends.pop() {
            Some(s) => s,
            None => {
                let mr = self
                    .ctx
                    .alloc(self.chunk)
                    .map_err(|e| ("register memory", e))?;
                self.send_bufs.push(mr);
                self.send_bufs.len() - 1
            }
        };
        let buf = &mut self.send_bufs[slot].as_mut_slice()[..self.chunk];
        let n = loop {
            // SAFETY: buf is valid for writes of buf.len() bytes.
            let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(("read stdin", e).into());
            }
        };
        if n == 0 {
            self.free_sends.push(slot);
            self.stdin_done = true;
            self.last_input = Instant::now();
            if !self.udp {
                self.start_close()?;
            }
            return Ok(());
        }
        let sge = [self.send_bufs[slot].sge(0, n)];
        let mut wr = SendWr::new(slot as u64, &sge);
        if self.udp {
            wr = wr.to(self.peer.expect("UDP peer known"));
        }
        self.qp.post_send(&wr).map_err(|e| ("send", e))?;
        self.in_flight += 1;
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system value.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}
