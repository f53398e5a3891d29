//! One guest's run in steps, and the checks of how it ended.

use super::{ErrorKind, LabError, Stream, VmOutcome, VmSpec};
use crate::console;
use crate::netns::LabNet;
use crate::procs::{log_tail, Proc};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How long a qpipd may take to exit after QEMU disconnected.
const QPIPD_EXIT_WAIT: Duration = Duration::from_secs(5);
/// How long QEMU may take to exit after a qpipd exited under it (QEMU closes its sockets
/// while shutting down, so a device can exit a moment before QEMU is reaped).
const QEMU_GRACE: Duration = Duration::from_secs(3);

/// Follows a file that another process appends to.
struct Tail {
    path: PathBuf,
    pos: u64,
    stream: Stream,
}

impl Tail {
    fn poll(&mut self, observe: &mut dyn FnMut(Stream, &[u8])) {
        let Ok(mut f) = File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if let Ok(n) = f.read_to_end(&mut buf) {
            if n > 0 {
                self.pos += n as u64;
                observe(self.stream, &buf);
            }
        }
    }
}

/// A problem found while checking a run: a one-line headline and optional detail lines.
struct Problem {
    headline: String,
    details: String,
}

/// The kernel warnings, oopses and traces in `log` (a console log or dmesg) as a problem,
/// if it has any; `place` says where they were found.
fn kernel_problem(log: &str, place: &str) -> Option<Problem> {
    let found = console::scan(log);
    let first = found.first()?;
    Some(Problem {
        headline: format!("kernel problem in {place} ({})", first.marker),
        details: console::format_problems(log, &found, 12),
    })
}

/// A file's text, with any bytes that are not UTF-8 replaced.
fn read_lossy(path: &Path) -> std::io::Result<String> {
    fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Where a guest stands in a lab: its number and name, how many guests there are, and the
/// lab network and shared folder when the lab has them.
pub(crate) struct Wiring<'n> {
    /// Guest number, from 1 (addresses, TAP names and `QPIP_GUEST` use it).
    pub n: usize,
    /// Guest name (`a`, `b`, ...): its hostname and its run folder in a lab.
    pub name: String,
    pub guests: usize,
    pub net: Option<&'n LabNet>,
    /// The folder every guest of the lab sees at `/lab`.
    pub shared: Option<PathBuf>,
    /// Device 0 is a function of the lab's adapter qpipd (started and stopped by the lab),
    /// not a qpipd of this guest's own.
    pub adapter: bool,
    /// Device 0 on the lab network routes the far subnet through the lab host
    /// (`qpipd --route`).
    pub far_routes: bool,
}

impl Wiring<'_> {
    /// A guest on its own: guest 1, `a`, no network, no shared folder.
    pub fn alone() -> Wiring<'static> {
        Wiring {
            n: 1,
            name: "a".into(),
            guests: 1,
            net: None,
            shared: None,
            adapter: false,
            far_routes: true,
        }
    }
}

/// One guest's run, in steps: [`Run::start`], [`Run::poll`] until QEMU exits,
/// [`Run::finish`]. A lab steps several at once.
pub(crate) struct Run<'a> {
    pub(super) spec: &'a VmSpec,
    pub dir: PathBuf,
    pub(super) wiring: Wiring<'a>,
    // Teardown order is QEMU first (so the devices see a disconnect), then the devices:
    // explicit in `stop_all`, and the field order makes Drop, the backstop on panics, agree.
    pub(super) qemu: Option<Proc>,
    /// The qpipd of this guest's own devices, from device [`Run::first_own`] on.
    pub(super) devices: Vec<Proc>,
    /// With the adapter: the identity of device 0's socket as the last QEMU found it (a
    /// power cycle waits until the adapter has bound it afresh).
    pub(super) adapter_socket: Option<crate::adapter::SocketId>,
    started: Option<Instant>,
    tails: Vec<Tail>,
    device_gone: Option<(usize, ExitStatus, Instant)>,
}

impl<'a> Run<'a> {
    pub fn new(spec: &'a VmSpec, dir: PathBuf, wiring: Wiring<'a>) -> Run<'a> {
        Run {
            spec,
            dir,
            wiring,
            qemu: None,
            devices: Vec::new(),
            adapter_socket: None,
            started: None,
            tails: Vec::new(),
            device_gone: None,
        }
    }

    /// The first device with a qpipd of this run's own: 1 if device 0 is the adapter's.
    pub(super) fn first_own(&self) -> usize {
        usize::from(self.wiring.adapter)
    }

    /// The pids of the processes this run started (QEMU, then its own devices' qpipd).
    /// With the adapter: device 0's socket and its identity as this guest's last QEMU
    /// found it (the adapter binds it afresh once that QEMU has gone).
    pub fn adapter_attachment(&self) -> Option<(PathBuf, crate::adapter::SocketId)> {
        let id = self.adapter_socket?;
        Some((crate::adapter::function_socket(&self.dir), id))
    }

    pub fn pids(&self) -> Vec<u32> {
        self.qemu
            .iter()
            .chain(&self.devices)
            .map(Proc::pid)
            .collect()
    }

    /// True once the guest's init has reported it is about to run the command (the
    /// guest is up: modules loaded, network configured, share mounted).
    pub fn is_ready(&self) -> bool {
        self.dir.join("share/ready").exists()
    }

    pub fn stop_all(&mut self) {
        if let Some(q) = self.qemu.as_mut() {
            q.kill();
        }
        for d in &mut self.devices {
            d.kill();
        }
    }

    pub(super) fn fail(&self, message: String, details: String) -> LabError {
        LabError::failed(message, details, &self.dir)
    }

    pub fn interrupted(&mut self) -> LabError {
        self.stop_all();
        LabError {
            kind: ErrorKind::Interrupted,
            message: format!(
                "interrupted: stopped QEMU and {} qpipd; logs in {}",
                self.devices.len(),
                self.dir.display()
            ),
            details: String::new(),
            run_dir: Some(self.dir.clone()),
        }
    }

    /// Writes the command, starts the devices, waits for their sockets, starts QEMU.
    pub fn start(&mut self) -> Result<(), LabError> {
        let share = self.dir.join("share");
        fs::create_dir_all(&share).map_err(|e| {
            self.fail(
                format!("cannot create {}: {e}", share.display()),
                String::new(),
            )
        })?;
        fs::write(share.join("cmd.sh"), format!("{}\n", self.spec.cmd)).map_err(|e| {
            self.fail(
                format!("cannot write {}/cmd.sh: {e}", share.display()),
                String::new(),
            )
        })?;

        self.start_devices()?;

        let console_log = self.dir.join("console.log");
        self.started = Some(Instant::now());
        self.start_qemu(&console_log)?;
        self.tails = vec![
            Tail {
                path: share.join("output"),
                pos: 0,
                stream: Stream::Output,
            },
            Tail {
                path: console_log,
                pos: 0,
                stream: Stream::Console,
            },
        ];
        Ok(())
    }

    /// Does not block: streams what the guest wrote since the last call, and returns
    /// QEMU's exit status once it has exited. Fails on a signal, the timeout, or a device
    /// that died under a running guest (stopping this run's processes).
    pub fn poll(
        &mut self,
        observe: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Option<ExitStatus>, LabError> {
        for t in self.tails.iter_mut() {
            t.poll(observe);
        }
        if crate::interrupted() {
            return Err(self.interrupted());
        }
        let qemu = self.qemu.as_mut().expect("QEMU started");
        match qemu.try_wait() {
            Ok(Some(st)) if st.success() && self.reboot_requested() => {
                self.power_cycle()?;
                return Ok(None);
            }
            Ok(Some(st)) => return Ok(Some(st)),
            Ok(None) => {}
            Err(e) => return Err(self.fail(format!("cannot wait for QEMU: {e}"), String::new())),
        }
        if self.device_gone.is_none() {
            for (i, d) in self.devices.iter_mut().enumerate() {
                if let Ok(Some(st)) = d.try_wait() {
                    self.device_gone = Some((i, st, Instant::now()));
                    break;
                }
            }
        }
        if let Some((i, st, when)) = self.device_gone {
            if when.elapsed() >= QEMU_GRACE {
                self.stop_all();
                let log = self.devices[i].log.clone();
                let dev = i + self.first_own();
                return Err(self.fail(
                    format!(
                        "qpipd {dev} exited ({st}) while the guest was running; stopped QEMU; log: {}",
                        log.display()
                    ),
                    log_tail(&log, 15),
                ));
            }
        }
        let started = self.started.expect("QEMU started");
        if started.elapsed() >= self.spec.timeout {
            self.stop_all();
            let console = self.dir.join("console.log");
            return Err(self.fail(
                format!(
                    "guest did not finish within {} s; killed QEMU",
                    self.spec.timeout.as_secs()
                ),
                format!("  last console lines:\n{}", log_tail(&console, 15)),
            ));
        }
        Ok(None)
    }

    /// True when the guest asked to be power-cycled: it wrote `/host/reboot` and rebooted
    /// (with `-no-reboot` a guest reboot ends QEMU) without reporting a status.
    fn reboot_requested(&self) -> bool {
        let share = self.dir.join("share");
        share.join("reboot").exists() && !share.join("status").exists()
    }

    /// A guest reboot as the lab offers it: a power cycle. The devices saw QEMU disconnect
    /// and exit (checked, like at the end of a run), the console of the boot that ended is
    /// checked for kernel problems and kept as `console-<k>.log` (qpipd and QEMU logs
    /// likewise), then fresh devices and QEMU start on the same sockets, TAPs and share:
    /// the same machine with the same addresses, its device state gone. The guest's init
    /// runs `/host/cmd.sh` again; the command tells the boots apart by files it leaves in
    /// `/host`. The run's timeout still counts from the first boot.
    fn power_cycle(&mut self) -> Result<(), LabError> {
        let mut problems = Vec::new();
        self.check_devices_exit(&mut problems);
        let console_log = self.dir.join("console.log");
        let console = read_lossy(&console_log).unwrap_or_default();
        problems.extend(kernel_problem(
            &console,
            "the guest console before its reboot",
        ));
        if let Some(p) = problems.into_iter().next() {
            return Err(self.fail(p.headline, p.details));
        }
        let k = (1..)
            .find(|k| !self.dir.join(format!("console-{k}.log")).exists())
            .expect("a free name");
        let mut keep = vec![("console.log".to_string(), format!("console-{k}.log"))];
        keep.push(("qemu.log".into(), format!("qemu-{k}.log")));
        for i in self.first_own()..self.spec.devices {
            keep.push((format!("qpipd-{i}.log"), format!("qpipd-{i}-{k}.log")));
        }
        for (from, to) in keep {
            let _ = fs::rename(self.dir.join(from), self.dir.join(to));
        }
        let share = self.dir.join("share");
        let _ = fs::remove_file(share.join("ready"));
        fs::remove_file(share.join("reboot")).map_err(|e| {
            self.fail(
                format!("cannot remove {}/reboot: {e}", share.display()),
                String::new(),
            )
        })?;
        log::info!(
            "guest {}: power cycle {k} (the guest rebooted)",
            self.wiring.name
        );
        self.qemu = None;
        self.devices.clear();
        self.device_gone = None;
        self.start_devices()?;
        self.start_qemu(&console_log)?;
        for t in self
            .tails
            .iter_mut()
            .filter(|t| t.stream == Stream::Console)
        {
            t.pos = 0;
        }
        Ok(())
    }

    /// After QEMU exited with `qemu_status`: checks the devices' exits, the reported
    /// status and the kernel logs.
    pub fn finish(
        &mut self,
        qemu_status: ExitStatus,
        observe: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<VmOutcome, LabError> {
        let elapsed = self.started.expect("QEMU started").elapsed();
        log::info!(
            "guest {} ran for {:.1} s",
            self.wiring.name,
            elapsed.as_secs_f64()
        );
        for t in self.tails.iter_mut() {
            t.poll(observe);
        }
        let share = self.dir.join("share");
        let console_log = self.dir.join("console.log");

        let mut problems = Vec::new();
        if !qemu_status.success() {
            problems.push(Problem {
                headline: format!("QEMU failed ({qemu_status})"),
                details: log_tail(&self.dir.join("qemu.log"), 15),
            });
        }
        self.check_devices_exit(&mut problems);

        let read = |p: PathBuf| read_lossy(&p);
        let console = read(console_log.clone()).unwrap_or_default();
        let dmesg = read(share.join("dmesg")).unwrap_or_default();
        let output = read(share.join("output")).unwrap_or_default();
        let status = match read(share.join("status")) {
            Ok(s) => match s.trim().parse::<i32>() {
                Ok(n) => Some(n),
                Err(_) => {
                    problems.push(Problem {
                        headline: format!("guest reported an unreadable exit status {s:?}"),
                        details: String::new(),
                    });
                    None
                }
            },
            Err(_) => {
                problems.push(Problem {
                    headline: "guest did not report an exit status".into(),
                    details: format!("  last console lines:\n{}", log_tail(&console_log, 15)),
                });
                None
            }
        };

        // dmesg can hold messages above the console log level; the console is the better
        // report when both have them (it also shows what came after).
        problems.extend(
            kernel_problem(&console, "the guest console")
                .or_else(|| kernel_problem(&dmesg, "the guest dmesg")),
        );

        if problems.is_empty() {
            let status = status.expect("a missing status is a problem");
            return Ok(VmOutcome {
                status,
                output,
                console,
                dmesg,
                run_dir: self.dir.clone(),
                elapsed,
            });
        }
        let mut message = problems[0].headline.clone();
        if problems.len() > 1 {
            message.push_str(&format!(" (and {} more problems)", problems.len() - 1));
        }
        let details = if problems.len() == 1 {
            problems.remove(0).details
        } else {
            problems
                .iter()
                .map(|p| format!("  {}\n{}", p.headline, p.details))
                .collect()
        };
        Err(self.fail(message, details))
    }

    /// After QEMU is gone, each of this guest's own qpipd should see the disconnect and
    /// exit 0 by itself (the adapter serves on; the lab stops it at the end).
    fn check_devices_exit(&mut self, problems: &mut Vec<Problem>) {
        let first = self.first_own();
        for (j, d) in self.devices.iter_mut().enumerate() {
            let i = j + first;
            match d.wait_for(QPIPD_EXIT_WAIT) {
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => problems.push(Problem {
                    headline: format!("qpipd {i} exited with {st}; log: {}", d.log.display()),
                    details: log_tail(&d.log, 15),
                }),
                Ok(None) => {
                    d.kill();
                    problems.push(Problem {
                        headline: format!(
                            "qpipd {i} did not exit within {} s after QEMU disconnected; killed it; log: {}",
                            QPIPD_EXIT_WAIT.as_secs(),
                            d.log.display()
                        ),
                        details: log_tail(&d.log, 15),
                    });
                }
                Err(e) => problems.push(Problem {
                    headline: format!("cannot wait for qpipd {i}: {e}"),
                    details: String::new(),
                }),
            }
        }
    }
}
