//! The adapter layout of a lab: one qpipd serves the lab-network device (device 0) of every
//! guest as one of its PCI functions (`qpipd --function ...`), its embedded switch carries
//! frames between the guests' devices in memory and everything else through one TAP on the
//! lab bridge ([`netns::ADAPTER_TAP`]), so the lab host still reaches every device.
//!
//! Unlike a per-guest qpipd, the adapter does not exit when a QEMU goes away: its function
//! starts afresh on the same socket (a guest's power cycle reuses it). The lab starts it
//! before any QEMU, waits for all its sockets, and once every QEMU has exited stops it with
//! SIGTERM, expecting it to exit from that signal (status 128+15) and remove its sockets.
//! Its log is `RUN/qpipd-adapter.log` in the lab's run folder.

use crate::netns::{self, LabNet};
use crate::paths;
use crate::procs::{log_tail, Proc};
use crate::vm::LabError;
use std::fs::{self, File};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The adapter's log, in the lab's run folder.
pub const ADAPTER_LOG: &str = "qpipd-adapter.log";
/// How long the adapter may take to create its sockets.
const SOCKET_WAIT: Duration = Duration::from_secs(10);
/// How long the adapter may take to exit after SIGTERM.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// The status qpipd exits with on SIGTERM (it removes its sockets, then exits 128+15).
const SIGTERM_STATUS: i32 = 128 + libc::SIGTERM;
/// Longest unix socket path (sun_path is 108 bytes with the terminating NUL).
pub(crate) const MAX_SOCKET_PATH: usize = 107;

/// Where the qpip devices of a lab's guests live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QpipdLayout {
    /// With the lab network: one qpipd for every guest's device 0, a function each, with
    /// one TAP as its uplink; the guests' other devices have a qpipd each. Without the lab
    /// network, as [`QpipdLayout::PerGuest`].
    #[default]
    Adapter,
    /// One qpipd per device of every guest, device 0 with its own TAP on the lab bridge.
    PerGuest,
}

/// The vfio-user socket of a guest's device 0, in the guest's folder `guest_dir`.
pub(crate) fn function_socket(guest_dir: &Path) -> PathBuf {
    guest_dir.join("qpip0.sock")
}

/// The identity of a socket file (device, inode, change time): a socket bound again has a
/// new one, which is how a power cycle knows the adapter's function listens afresh.
pub(crate) type SocketId = (u64, u64, i64, i64);

/// The identity of the socket at `path`, if a socket is there.
pub(crate) fn socket_id(path: &Path) -> Option<SocketId> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    m.file_type()
        .is_socket()
        .then(|| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// The running adapter qpipd.
pub(crate) struct Adapter {
    proc: Proc,
    sockets: Vec<PathBuf>,
}

/// The adapter's extra arguments: the guests' device-0 qpipd arguments, which must be the
/// same for all (they apply to the whole adapter) and must not name a link or identity of
/// their own.
pub(crate) fn adapter_args<'a>(
    args: impl IntoIterator<Item = &'a [String]>,
) -> Result<Vec<String>, String> {
    let mut it = args.into_iter();
    let first = it.next().unwrap_or_default();
    if it.any(|a| a != first) {
        return Err(
            "the guests' device 0 have different qpipd arguments, which one adapter \
             qpipd cannot take: use the per-guest layout (--qpipd-per-guest)"
                .into(),
        );
    }
    for a in first {
        let name = a.split('=').next().unwrap_or_default();
        if ["--net", "--socket", "--mac", "--ip", "--function"].contains(&name) {
            return Err(format!(
                "qpipd argument {a} is the lab's to give with the adapter layout: use the \
                 per-guest layout (--qpipd-per-guest)"
            ));
        }
    }
    Ok(first.to_vec())
}

impl Adapter {
    /// Starts the adapter in the lab's namespace with one function per `(n, guest folder)`
    /// (guest number n's lab MAC and address) and, with `far_routes`, the far subnet's
    /// routes through the lab host, then waits until every socket is there.
    pub fn start(
        dir: &Path,
        guests: &[(usize, PathBuf)],
        extra: &[String],
        far_routes: bool,
        net: &LabNet,
    ) -> Result<Adapter, LabError> {
        let fail = |m: String, d: String| LabError::failed(m, d, dir);
        let mut cmd = Command::new(paths::qpipd());
        let mut sockets = Vec::new();
        for (n, guest_dir) in guests {
            fs::create_dir_all(guest_dir).map_err(|e| {
                fail(
                    format!("cannot create {}: {e}", guest_dir.display()),
                    String::new(),
                )
            })?;
            let sock = function_socket(guest_dir);
            let text = sock.to_string_lossy();
            if text.len() > MAX_SOCKET_PATH || text.contains(',') {
                return Err(fail(
                    format!(
                        "socket path {text} is longer than {MAX_SOCKET_PATH} bytes or has a \
                         comma (qpipd --function separates by commas); use a shorter QPIP_CACHE"
                    ),
                    String::new(),
                ));
            }
            let mut spec = format!(
                "socket={text},mac={},ip={}/{}",
                netns::device_mac(*n),
                netns::device_addr(*n),
                netns::PREFIX_LEN
            );
            if *n <= netns::MAX_GUESTS4 {
                spec += &format!(",ip={}/{}", netns::device_addr4(*n), netns::PREFIX4_LEN);
            }
            cmd.arg("--function").arg(spec);
            sockets.push(sock);
        }
        cmd.args(["--engine-threads", "1", "--net"])
            .arg(format!("tap:{}", netns::ADAPTER_TAP))
            .args(["--ndp-solicit", &netns::NDP_SOLICITS.to_string()]);
        if far_routes {
            cmd.args(netns::far_routes());
        }
        cmd.args(extra);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // qpipd opens its TAP by name, in the namespace it runs in.
        net.enter(&mut cmd);
        let log = dir.join(ADAPTER_LOG);
        let file = File::create(&log)
            .and_then(|f| Ok((f.try_clone()?, f)))
            .map_err(|e| {
                fail(
                    format!("cannot create {}: {e}", log.display()),
                    String::new(),
                )
            })?;
        cmd.stdin(Stdio::null()).stdout(file.0).stderr(file.1);
        let proc = Proc::spawn("the adapter qpipd".into(), log, cmd).map_err(|e| {
            fail(
                format!("cannot start {}: {e}", paths::qpipd().display()),
                String::new(),
            )
        })?;
        log::info!(
            "adapter qpipd pid {}: {} function(s), uplink {}",
            proc.pid(),
            sockets.len(),
            netns::ADAPTER_TAP
        );
        let mut adapter = Adapter { proc, sockets };
        adapter.wait_for_sockets(dir)?;
        Ok(adapter)
    }

    fn wait_for_sockets(&mut self, dir: &Path) -> Result<(), LabError> {
        let deadline = Instant::now() + SOCKET_WAIT;
        loop {
            if self.sockets.iter().all(|s| socket_id(s).is_some()) {
                return Ok(());
            }
            if crate::interrupted() {
                return Err(LabError::failed(
                    "interrupted while the adapter qpipd started".into(),
                    String::new(),
                    dir,
                ));
            }
            if let Some(st) = self.proc.try_wait().ok().flatten() {
                return Err(LabError::failed(
                    format!(
                        "the adapter qpipd exited ({st}) before listening on its sockets; log: {}",
                        self.proc.log.display()
                    ),
                    log_tail(&self.proc.log, 15),
                    dir,
                ));
            }
            if Instant::now() >= deadline {
                return Err(LabError::failed(
                    format!(
                        "the adapter qpipd did not create its sockets within {} s; log: {}",
                        SOCKET_WAIT.as_secs(),
                        self.proc.log.display()
                    ),
                    log_tail(&self.proc.log, 15),
                    dir,
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// A failure if the adapter has exited (it must serve until the lab stops it).
    pub fn check_running(&mut self, dir: &Path) -> Result<(), LabError> {
        match self.proc.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => Err(LabError::failed(
                format!(
                    "the adapter qpipd exited ({st}) while the guests were running; log: {}",
                    self.proc.log.display()
                ),
                log_tail(&self.proc.log, 15),
                dir,
            )),
            Err(e) => Err(LabError::failed(
                format!("cannot wait for the adapter qpipd: {e}"),
                String::new(),
                dir,
            )),
        }
    }

    /// Kills the adapter (on a lab's way out after a failure).
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Stops the adapter once every QEMU has exited: waits until it has seen each of them
    /// go (`attached`: each function's socket and the identity its last QEMU found; the
    /// adapter binds it afresh once it has dropped that QEMU's function), then SIGTERM, and
    /// checks that it exited from it (not earlier, not with an error) and removed its
    /// sockets. A QEMU's exit reaches the adapter a moment later, over its socket: without
    /// the wait a function could still be serving the QEMU just gone when the signal came.
    pub fn stop(&mut self, dir: &Path, attached: &[(PathBuf, SocketId)]) -> Result<(), LabError> {
        let fail = |m: String, log: &Path| LabError::failed(m, log_tail(log, 15), dir);
        let log = self.proc.log.clone();
        if let Some(st) = self.proc.try_wait().ok().flatten() {
            return Err(fail(
                format!(
                    "the adapter qpipd exited ({st}) before the lab stopped it; log: {}",
                    log.display()
                ),
                &log,
            ));
        }
        let deadline = Instant::now() + STOP_WAIT;
        while let Some((sock, _)) = attached
            .iter()
            .find(|(sock, id)| socket_id(sock) == Some(*id))
        {
            if Instant::now() >= deadline {
                return Err(fail(
                    format!(
                        "the adapter qpipd did not see the QEMU of {} go within {} s; log: {}",
                        sock.display(),
                        STOP_WAIT.as_secs(),
                        log.display()
                    ),
                    &log,
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill(2) on our own child, not yet reaped (try_wait saw it running).
        unsafe { libc::kill(self.proc.pid() as i32, libc::SIGTERM) };
        let st = match self.proc.wait_for(STOP_WAIT) {
            Ok(Some(st)) => st,
            Ok(None) => {
                self.proc.kill();
                return Err(fail(
                    format!(
                        "the adapter qpipd did not exit within {} s of SIGTERM; killed it; log: {}",
                        STOP_WAIT.as_secs(),
                        log.display()
                    ),
                    &log,
                ));
            }
            Err(e) => {
                return Err(fail(
                    format!("cannot wait for the adapter qpipd: {e}"),
                    &log,
                ))
            }
        };
        if st.code() != Some(SIGTERM_STATUS) {
            return Err(fail(
                format!(
                    "the adapter qpipd exited with {st} after SIGTERM, not status {SIGTERM_STATUS}; log: {}",
                    log.display()
                ),
                &log,
            ));
        }
        if let Some(s) = self.sockets.iter().find(|s| s.exists()) {
            return Err(fail(
                format!(
                    "the adapter qpipd left its socket {} behind; log: {}",
                    s.display(),
                    log.display()
                ),
                &log,
            ));
        }
        log::info!("adapter qpipd stopped by SIGTERM ({st})");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_guests_device_0_arguments_go_to_the_adapter_if_they_agree() {
        let same = [v(&["--tcp-retries", "3"]), v(&["--tcp-retries", "3"])];
        assert_eq!(
            adapter_args(same.iter().map(Vec::as_slice)).unwrap(),
            v(&["--tcp-retries", "3"])
        );
        let differ = [v(&["--impair", "loss=1"]), v(&[])];
        assert!(adapter_args(differ.iter().map(Vec::as_slice)).is_err());
        for own in ["--net", "--net=tap:x", "--mac", "--ip", "--socket"] {
            let one = [v(&[own, "x"])];
            assert!(
                adapter_args(one.iter().map(Vec::as_slice)).is_err(),
                "{own}"
            );
        }
        assert!(adapter_args(std::iter::empty()).unwrap().is_empty());
    }
}
