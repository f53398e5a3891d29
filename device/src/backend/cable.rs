//! `cable:PATH`: two `qpipd` joined by unix datagram sockets, one frame per datagram.
//!
//! Both ends are given the same PATH. Each end binds a socket of its own beside it: the
//! first to start takes `PATH.a`, the other `PATH.b` (bind(2) decides atomically which),
//! and each sends to the other's. A socket file left by an end that died is recognised
//! (nobody accepts a connection on it) and taken over. Either end may stop and start
//! again; frames sent while the other end is absent are lost, as on an unplugged cable.
//! No privileges are needed.
//!
//! Each end connects its socket to the other's once that exists (and again after the other
//! end came back): datagrams then go without a path lookup each, and between two sockets
//! connected to each other Linux does not apply `net.unix.max_dgram_qlen` (often 10
//! datagrams queued at the receiver, far fewer than the segments of one TCP window or the
//! fragments of one large datagram); only the sender's buffer bounds what is in flight.
//! Until then (and whenever the kernel refuses for room), frames the receiver has no room
//! for yet wait here, in order, in a bounded backlog that is retried on every call (and
//! [`Backend::next_deadline`] asks to be called soon while it is not empty), as a NIC's
//! transmit ring would hold them.
//!
//! An end that restarts binds a new socket at its path; the other end, still connected to
//! the old one, learns it when a send is refused (and sends by path again at once), and
//! connects afresh at least every second while connected ([`Backend::next_deadline`]),
//! so an end that only listens also takes the new one's frames (until then the kernel
//! refuses them at the sender, which counts them as lost).
//!
//! Its link is always up ([`Backend::link_up`]'s default): whether the other end is there
//! is only learnt by sending to it, and an unplugged cable's frames are lost as they are.

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
    /// The socket is connected to the other end's.
    connected: bool,
    /// While connected: when to connect again (the other end may have been replaced).
    recheck_at: Option<Instant>,
}

/// Frames the backlog holds at most (beyond, `send` refuses with `WouldBlock`).
pub const BACKLOG: usize = 4096;
/// How soon a non-empty backlog is retried.
const RETRY: Duration = Duration::from_micros(200);
/// How often a connected end connects again (see the module text).
const RECHECK: Duration = Duration::from_secs(1);

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
                        // What is in flight is bounded by the send buffer: as large as
                        // the system allows (net.core.wmem_max).
                        let size: libc::c_int = 4 << 20;
                        // SAFETY: setsockopt with a c_int option value of its size.
                        unsafe {
                            libc::setsockopt(
                                sock.as_raw_fd(),
                                libc::SOL_SOCKET,
                                libc::SO_SNDBUF,
                                &size as *const libc::c_int as *const libc::c_void,
                                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                            );
                        }
                        log::info!(
                            "cable {}: this end is {}, the other {}",
                            path.display(),
                            own.display(),
                            peer.display()
                        );
                        let mut c = Cable {
                            sock,
                            own: own.clone(),
                            peer: peer.clone(),
                            unplugged_drops: 0,
                            backlog: VecDeque::new(),
                            connected: false,
                            recheck_at: None,
                        };
                        c.connect();
                        return Ok(c);
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
    /// Frames waiting in the backlog for room at the receiver.
    pub fn backlogged(&self) -> usize {
        self.backlog.len()
    }

    /// Whether the socket is connected to the other end's (see the module text).
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Connects to the other end's socket if it is there.
    fn connect(&mut self) {
        self.connected = self.sock.connect(&self.peer).is_ok();
        self.recheck_at = self.connected.then(|| Instant::now() + RECHECK);
    }

    /// Undoes a connection to an end that went away (connect to AF_UNSPEC), so frames go
    /// by path again and reach the end that takes its place.
    fn disconnect(&mut self) {
        if !self.connected {
            return;
        }
        self.connected = false;
        self.recheck_at = None;
        let addr = libc::sockaddr {
            sa_family: libc::AF_UNSPEC as libc::sa_family_t,
            sa_data: [0; 14],
        };
        // SAFETY: connect(2) with a valid sockaddr of its size on our own socket.
        unsafe {
            libc::connect(
                self.sock.as_raw_fd(),
                &addr,
                std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
            );
        }
    }

    /// Sends one frame now: Ok(true) sent (or lost to an absent peer), Ok(false) no room.
    fn try_send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let mut r = if self.connected {
            self.sock.send(frame)
        } else {
            self.sock.send_to(frame, &self.peer)
        };
        if self.connected
            && r.as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
        {
            // The end we were connected to is gone; another may be at its path already.
            self.disconnect();
            r = self.sock.send_to(frame, &self.peer);
        }
        match r {
            Ok(_) => {
                if !self.connected {
                    self.connect();
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                // Nobody there (any more): lost, as on an unplugged cable.
                self.disconnect();
                self.unplugged_drops += 1;
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                // The other end is new and still connected to the end we replaced; it
                // connects to us when it next sends. Lost meanwhile.
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

    fn poll(&mut self, now: Instant) -> io::Result<()> {
        if self.recheck_at.is_some_and(|t| t <= now) {
            self.connect();
        }
        self.flush_backlog()
    }

    fn next_deadline(&self) -> Option<Instant> {
        let retry = (!self.backlog.is_empty()).then(|| Instant::now() + RETRY);
        match (retry, self.recheck_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.flush_backlog()?;
        loop {
            match self.sock.recv_from(buf) {
                Ok((n, from)) => {
                    // Only the other end may send on this cable.
                    if from.as_pathname() == Some(self.peer.as_path()) {
                        if !self.connected {
                            self.connect();
                        }
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
