//! Child processes the lab starts, and the guarantee that none outlives a run.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A started child: what it is (for messages), and where its log goes.
pub(crate) struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Child,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `cmd` as a lab child.
    ///
    /// The child gets its own process group, so a Ctrl-C in the terminal reaches only the
    /// lab, which then stops the children in order (QEMU first, then the devices) instead
    /// of all of them dying at once in an arbitrary order. It also gets SIGKILL should the
    /// lab itself die without cleaning up (PR_SET_PDEATHSIG), so no QEMU or qpipd is ever
    /// left behind, even after a `kill -9` of the lab.
    pub fn spawn(name: String, log: PathBuf, mut cmd: Command) -> io::Result<Proc> {
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        log::debug!("started {name} (pid {})", child.id());
        Ok(Proc {
            name,
            log,
            child,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has exited (reaping it), without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Waits up to `limit` for the child to exit by itself.
    pub fn wait_for(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the child (SIGKILL) if it is still running, and reaps it.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        if let Err(e) = self.child.kill() {
            log::warn!("cannot kill {} (pid {}): {e}", self.name, self.child.id());
        }
        match self.child.wait() {
            Ok(st) => {
                log::debug!("stopped {} (pid {}): {st}", self.name, self.child.id());
                self.status = Some(st);
            }
            Err(e) => log::warn!("cannot reap {} (pid {}): {e}", self.name, self.child.id()),
        }
    }
}

impl Drop for Proc {
    /// The last line of defence: whatever path leaves the run (an error, a panic), the
    /// child is killed and reaped.
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `max_lines` lines of a log file, for error messages.
pub(crate) fn log_tail(path: &std::path::Path, max_lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(max_lines)..];
            if tail.is_empty() {
                "    (empty)\n".to_string()
            } else {
                tail.iter().map(|l| format!("    | {l}\n")).collect()
            }
        }
        Err(e) => format!("    (cannot read {}: {e})\n", path.display()),
    }
}

/// Runs `script` with `sh -c` (`sh` is the command of the shell, e.g. one that enters the
/// lab's namespace), stdin from /dev/null, and waits for it: how it ended, and what it
/// printed (stdout, then stderr).
pub(crate) fn run_sh(mut sh: Command, script: &str) -> io::Result<(ExitStatus, String)> {
    let out = sh.arg("-c").arg(script).stdin(Stdio::null()).output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status, text))
}
