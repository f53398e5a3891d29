//! What the lab host does while the guests run: `host.py` in the lab's namespace (the
//! demo), and the host's CPU marks of the bench's CPU windows.

use super::scripts;
use crate::netns;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the lab host's side did.
#[derive(Debug, Default)]
pub(super) struct HostSide {
    pub(super) ok: bool,
    pub(super) output: String,
}

/// The lab host's side: `host.py` in the namespace, stopped if it outlives `limit`.
pub(super) fn run_host_side(host: &crate::LabHost, bytes: u64, limit: Duration) -> HostSide {
    let shared = host.shared_dir().to_string_lossy().into_owned();
    let mut cmd = host.command("python3");
    cmd.arg("-c")
        .arg(include_str!("host.py"))
        .args([
            shared.as_str(),
            netns::HOST_ADDR,
            &netns::device_addr(1),
            &bytes.to_string(),
            &scripts::HOST_TCP_PORT.to_string(),
            &scripts::HOST_UDP_PORT.to_string(),
            &scripts::GUEST_LISTEN_PORT.to_string(),
        ])
        .stdin(Stdio::null());
    let dir = host.shared_dir().to_path_buf();
    let out = dir.join(".host.out");
    match run_limited(cmd, &out, limit) {
        Ok((ok, output)) => HostSide { ok, output },
        Err(e) => HostSide {
            ok: false,
            output: format!(
                "cannot run python3 in the lab's namespace: {e} (./qpip setup installs it)"
            ),
        },
    }
}

/// The lab host's side of the CPU windows: for each `/lab/cpu-mark.N` guest a creates (N
/// from 1, in order) it writes `/lab/cpu-mark.N.host`, one line of the CPU seconds so far of
/// each guest's QEMU and of its own qpipd, and of the adapter qpipd that serves them all
/// (`qemu-a=12.3 qpipd-a=4.56 qemu-b=... qpipd-adapter=...`), until guest a is done
/// (`/lab/a-done`), the lab ends early or `limit` has passed.
pub(super) fn serve_cpu_marks(host: &crate::LabHost, limit: Duration) {
    let dir = host.shared_dir();
    let deadline = Instant::now() + limit;
    let mut n = 1u64;
    loop {
        if dir.join(format!("cpu-mark.{n}")).exists() {
            let tmp = dir.join(format!(".cpu-mark.{n}.host"));
            let done = dir.join(format!("cpu-mark.{n}.host"));
            let line = host_cpu_line(host);
            if let Err(e) =
                std::fs::write(&tmp, line + "\n").and_then(|()| std::fs::rename(&tmp, &done))
            {
                log::warn!("cannot write {}: {e}", done.display());
            }
            n += 1;
            continue;
        }
        if dir.join("a-done").exists()
            || host.ending()
            || crate::interrupted()
            || Instant::now() >= deadline
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `qemu-NAME=SECS qpipd-NAME=SECS` for each guest: the CPU time (user + system, all
/// threads) of its QEMU and of all its own qpipd (none in the adapter layout: then no
/// `qpipd-NAME`), then `qpipd-adapter=SECS`, the adapter's, once for all guests (it is
/// shared: split by guest it would be a guess). A process that cannot be read is left out.
/// Whoever adds up the `qpipd-*` figures gets every qpipd of the lab exactly once.
fn host_cpu_line(host: &crate::LabHost) -> String {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let secs = |pid: &u32| -> Option<f64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(proc_cpu_ticks(&text)? as f64 / hz)
    };
    let mut parts = Vec::new();
    for (i, name) in host.guests().iter().enumerate() {
        let Some((qemu, devices)) = host.pids(i).split_first() else {
            continue;
        };
        if let Some(s) = secs(qemu) {
            parts.push(format!("qemu-{name}={s}"));
        }
        if devices.is_empty() {
            continue;
        }
        if let Some(s) = devices.iter().map(secs).sum::<Option<f64>>() {
            parts.push(format!("qpipd-{name}={s}"));
        }
    }
    if let Some(s) = host.adapter_pid().as_ref().and_then(secs) {
        parts.push(format!("qpipd-adapter={s}"));
    }
    parts.join(" ")
}

/// utime + stime (ticks) from the text of `/proc/PID/stat`.
fn proc_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name in parentheses may hold spaces; the figures follow its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is f[0]: utime is field 14, stime field 15.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Runs `cmd` with stdout and stderr to `out`, killing it after `limit`; (success, output).
fn run_limited(mut cmd: Command, out: &Path, limit: Duration) -> std::io::Result<(bool, String)> {
    let f = std::fs::File::create(out)?;
    cmd.stdout(f.try_clone()?).stderr(f);
    let mut child: Child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if Instant::now() >= deadline || crate::interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut text = std::fs::read_to_string(out).unwrap_or_default();
    if status.is_none() {
        text.push_str(&format!("(stopped after {} s)\n", limit.as_secs()));
    }
    Ok((status.is_some_and(|s| s.success()), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_cpu_is_read_from_proc_stat() {
        // A command name with spaces and a ')' of its own.
        let stat = "4242 (qemu (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9";
        assert_eq!(proc_cpu_ticks(stat), Some(1234 + 567));
        assert_eq!(proc_cpu_ticks("4242 (qpipd) S 1 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(proc_cpu_ticks(&own).is_some());
    }
}
