//! The qpipd process the latency sections measure: started on a socket in a temporary
//! folder, connected to with the `vfio_user` crate's client, and watched through /proc (CPU
//! time, wake-ups).

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vfio_user::Client;

use super::{fail, Options};

pub struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    pub fn start(o: &Options) -> (Daemon, Client) {
        let dir = std::env::temp_dir().join(format!("qpip-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
        let socket = dir.join("qpip.sock");
        let log = File::create(dir.join("qpipd.log")).unwrap_or_else(|e| fail(e));
        let mut cmd = Command::new(&o.qpipd);
        cmd.arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(us) = o.idle_poll_us {
            cmd.arg("--idle-poll-us").arg(us.to_string());
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| fail(format!("cannot start {}: {e}", o.qpipd.display())));
        let mut d = Daemon { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            if socket.exists() {
                if let Ok(c) = Client::new(&socket) {
                    break c;
                }
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                fail(format!(
                    "qpipd exited ({status}) before listening; see {}",
                    d.dir.join("qpipd.log").display()
                ));
            }
            if Instant::now() > deadline {
                d.stop();
                fail("qpipd did not listen within 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (d, client)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time (user + system) of the whole process so far, from /proc/PID/stat.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .unwrap_or_else(|e| fail(format!("/proc/{}/stat: {e}", self.pid())));
        // Fields after the command name (which is in parentheses and may contain spaces):
        // state is field 3, utime field 14, stime field 15 (1-based, proc(5)).
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        // SAFETY: sysconf with a valid name.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_nanos(ticks * 1_000_000_000 / hz)
    }

    /// Context switches of all the process's threads (voluntary + involuntary): how often
    /// something woke it.
    pub fn wakeups(&self) -> u64 {
        let mut total = 0;
        let tasks =
            std::fs::read_dir(format!("/proc/{}/task", self.pid())).unwrap_or_else(|e| fail(e));
        for t in tasks.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for line in status.lines() {
                if line.starts_with("voluntary_ctxt_switches:")
                    || line.starts_with("nonvoluntary_ctxt_switches:")
                {
                    total += line
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
        total
    }

    /// Waits for qpipd to exit after the client disconnected (it should, promptly), else
    /// stops it.
    pub fn stop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("engine_bench: qpipd did not exit after the disconnect; stopping it");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
