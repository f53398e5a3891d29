//! `cable:PATH`: two `qpipd` joined by unix datagram sockets, one frame per datagram.
//!
//! Both ends are given the same PATH. Each end binds a socket of its own beside it: the
//! first to start takes `PATH.a`, the other `PATH.b` (bind(2) decides atomically which),
//! and each sends to the other's. A socket file left by an end that died is recognised
//! (nobody accepts a connection on it) and taken over. Either end may stop and start
//! again; frames sent while the other end is absent are lost, as on an unplugged cable.
//! No privileges are needed.
//!
//! A unix datagram socket refuses to queue more than `net.unix.max_dgram_qlen` (often 10)
//! datagrams at the receiver, far fewer than the fragments of one large datagram. So
//! frames the receiver has no room for yet wait here, in order, in a bounded backlog that
//! is retried on every call (and [`Backend::next_deadline`] asks to be called soon while
//! it is not empty), as a NIC's transmit ring would hold them.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Backend;

pub struct Cable {
    sock: UnixDatagram,
    own: PathBuf,
    peer: PathBuf,
    /// Frames sent while nobody was at the other end.
    pub unplugged_drops: u64,
    backlog: VecDeque<Vec<u8>>,
}

/// Frames the backlog holds at most (beyond, `send` refuses with `WouldBlock`).
pub const BACKLOG: usize = 4096;
/// How soon a non-empty backlog is retried.
const RETRY: Duration = Duration::from_micros(200);

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Whether a socket file is left over from a process that is gone.
fn is_stale(path: &Path) -> bool {
    match UnixDatagram::unbound().and_then(|s| s.connect(path)) {
        Ok(()) => false,
        Err(e) => e.kind() == io::ErrorKind::ConnectionRefused,
    }
}

impl Cable {
    pub fn open(path: &Path) -> io::Result<Cable> {
        let a = with_suffix(path, ".a");
        let b = with_suffix(path, ".b");
        for (own, peer) in [(&a, &b), (&b, &a)] {
            for attempt in 0..2 {
                match UnixDatagram::bind(own) {
                    Ok(sock) => {
                        sock.set_nonblocking(true)?;
                        log::info!(
                            "cable {}: this end is {}, the other {}",
                            path.display(),
                            own.display(),
                            peer.display()
                        );
                        return Ok(Cable {
                            sock,
                            own: own.clone(),
                            peer: peer.clone(),
                            unplugged_drops: 0,
                            backlog: VecDeque::new(),
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt == 0 => {
                        if !is_stale(own) {
                            break; // a live end holds it: try the other name
                        }
                        let _ = std::fs::remove_file(own);
                    }
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => break,
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("cannot bind {}: {e}", own.display()),
                        ))
                    }
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "cable {} already has both ends ({} and {} are in use)",
                path.display(),
                a.display(),
                b.display()
            ),
        ))
    }

    pub fn own_path(&self) -> &Path {
        &self.own
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.own);
    }
}

impl Cable {
    /// Sends one frame now: Ok(true) sent (or lost to an absent peer), Ok(false) no room.
    fn try_send(&mut self, frame: &[u8]) -> io::Result<bool> {
        match self.sock.send_to(frame, &self.peer) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                self.unplugged_drops += 1;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    fn flush_backlog(&mut self) -> io::Result<()> {
        while let Some(f) = self.backlog.front() {
            let f = f.clone();
            if !self.try_send(&f)? {
                break;
            }
            self.backlog.pop_front();
        }
        Ok(())
    }
}

impl Backend for Cable {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.flush_backlog()?;
        if self.backlog.is_empty() && self.try_send(frame)? {
            return Ok(());
        }
        if self.backlog.len() >= BACKLOG {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.backlog.push_back(frame.to_vec());
        Ok(())
    }

    fn poll(&mut self, _now: Instant) -> io::Result<()> {
        self.flush_backlog()
    }

    fn next_deadline(&self) -> Option<Instant> {
        (!self.backlog.is_empty()).then(|| Instant::now() + RETRY)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.flush_backlog()?;
        loop {
            match self.sock.recv_from(buf) {
                Ok((n, from)) => {
                    // Only the other end may send on this cable.
                    if from.as_pathname() == Some(self.peer.as_path()) {
                        return Ok(Some(n));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!("cable:{}", self.own.display())
    }
}
