//! One VM run: devices, QEMU, guest command, checks. See the crate docs for the sequence.

use crate::console;
use crate::netns::{self, LabNet};
use crate::paths;
use crate::procs::{log_tail, Proc};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a qpipd may take to create its socket.
const SOCKET_WAIT: Duration = Duration::from_secs(10);
/// How long a qpipd may take to exit after QEMU disconnected.
const QPIPD_EXIT_WAIT: Duration = Duration::from_secs(5);
/// How long QEMU may take to exit after a qpipd exited under it (QEMU closes its sockets
/// while shutting down, so a device can exit a moment before QEMU is reaped).
const QEMU_GRACE: Duration = Duration::from_secs(3);
/// Poll interval of the wait loop (streams output, checks signals and children).
pub(crate) const POLL: Duration = Duration::from_millis(50);
/// Kernel command line. `panic=-1` reboots at once on a panic and QEMU's `-no-reboot`
/// turns that reboot into an exit, so a panicking guest ends the run instead of hanging.
/// `no_timer_check`: at boot the kernel checks that the IO-APIC timer ticks within a few
/// busy-wait loops; a TCG vCPU that the host starves for a moment fails it and the kernel
/// panics ("IO-APIC + timer doesn't work!"), seen on a loaded 2-CPU host. The check is
/// for broken hardware; virtual machines skip it. For the same reason the soft-lockup
/// and RCU-stall detectors get their longest thresholds (120 s, 300 s): a vCPU starved
/// for 22 s made the watchdog report a "BUG: soft lockup" in a boot-time self-test, which
/// fails the run; a real lockup still shows, as a timeout if nothing else.
const KERNEL_CMDLINE: &str = "console=ttyS0 loglevel=7 panic=-1 no_timer_check \
    watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300 rdinit=/init";
/// Longest unix socket path (sun_path is 108 bytes with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// CPU accelerator for the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accel {
    /// QEMU's software CPU emulator: works everywhere, and the only choice on hosts whose
    /// /dev/kvm cannot run a stock kernel.
    #[default]
    Tcg,
    /// Hardware virtualisation, for real hosts.
    Kvm,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

impl std::str::FromStr for Accel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tcg" => Ok(Accel::Tcg),
            "kvm" => Ok(Accel::Kvm),
            _ => Err(format!("unknown accelerator '{s}' (expected tcg or kvm)")),
        }
    }
}

/// What to boot and run.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// Number of qpip devices (one qpipd each).
    pub devices: usize,
    pub accel: Accel,
    /// Limit for the whole guest run, boot to power-off.
    pub timeout: Duration,
    /// Guest RAM in MiB (shared memfd, so the devices can map it).
    pub memory_mib: u32,
    /// Extra qpipd arguments, by device index; devices past the end get none.
    pub qpipd_args: Vec<Vec<String>>,
    /// Extra properties of every qpip device in QEMU (`vfio-user-pci`), as `NAME=JSON`
    /// (e.g. `x-no-posted-writes=true`, which makes every BAR write wait for the device).
    pub device_props: Vec<String>,
    /// Shell command run by the guest's `sh` (written to `share/cmd.sh`).
    pub cmd: String,
}

impl VmSpec {
    /// One device, TCG, 512 MiB, 180 s.
    pub fn new(cmd: impl Into<String>) -> VmSpec {
        VmSpec {
            devices: 1,
            accel: Accel::Tcg,
            timeout: Duration::from_secs(180),
            memory_mib: 512,
            qpipd_args: Vec::new(),
            device_props: Vec::new(),
            cmd: cmd.into(),
        }
    }
}

/// Which guest stream a chunk passed to the observer of [`run_vm_observed`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The command's stdout and stderr (`share/output`).
    Output,
    /// The serial console (kernel messages, init's messages).
    Console,
}

/// The result of a run in which the guest reported an exit status and no check failed.
#[derive(Debug, Clone)]
pub struct VmOutcome {
    /// The guest command's exit status.
    pub status: i32,
    /// The guest command's stdout and stderr.
    pub output: String,
    /// The serial console log.
    pub console: String,
    /// The guest's `dmesg` after the command.
    pub dmesg: String,
    /// The run folder (logs, share/).
    pub run_dir: PathBuf,
    /// How long the guest ran, QEMU start to exit.
    pub elapsed: Duration,
}

impl VmOutcome {
    pub fn console_log(&self) -> PathBuf {
        self.run_dir.join("console.log")
    }

    /// The log of device `i`'s qpipd.
    pub fn qpipd_log(&self, i: usize) -> String {
        fs::read_to_string(self.run_dir.join(format!("qpipd-{i}.log"))).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Something the run needs is missing or unusable; nothing was started.
    Setup,
    /// The run went wrong, or a check failed.
    Failed,
    /// SIGINT or SIGTERM arrived; the run was stopped.
    Interrupted,
}

/// A failed run: a one-line `message`, indented `details` (log excerpts, offending lines).
#[derive(Debug, Clone)]
pub struct LabError {
    pub kind: ErrorKind,
    pub message: String,
    pub details: String,
    pub run_dir: Option<PathBuf>,
}

impl LabError {
    pub(crate) fn interrupted_before_start() -> LabError {
        LabError {
            kind: ErrorKind::Interrupted,
            message: "interrupted before the run started".into(),
            details: String::new(),
            run_dir: None,
        }
    }

    pub(crate) fn setup(message: String) -> LabError {
        LabError {
            kind: ErrorKind::Setup,
            message,
            details: String::new(),
            run_dir: None,
        }
    }

    pub(crate) fn failed(message: String, details: String, run_dir: &Path) -> LabError {
        LabError {
            kind: ErrorKind::Failed,
            message,
            details,
            run_dir: Some(run_dir.into()),
        }
    }

    pub fn is_interrupted(&self) -> bool {
        self.kind == ErrorKind::Interrupted
    }

    pub fn console_log(&self) -> Option<PathBuf> {
        self.run_dir.as_ref().map(|d| d.join("console.log"))
    }

    /// The first line of the error, with the console log path (or, when the guest never
    /// started, the run folder).
    pub fn headline(&self) -> String {
        match (self.console_log(), &self.run_dir) {
            (Some(c), _) if c.exists() => {
                format!("{} (console log: {})", self.message, c.display())
            }
            (_, Some(d)) => format!("{} (run folder: {})", self.message, d.display()),
            _ => self.message.clone(),
        }
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.headline())?;
        if !self.details.is_empty() {
            write!(f, "\n{}", self.details.trim_end())?;
        }
        Ok(())
    }
}

impl std::error::Error for LabError {}

/// Boots a guest as `spec` says, runs its command, checks the run. See [`run_vm_observed`].
pub fn run_vm(spec: &VmSpec) -> Result<VmOutcome, LabError> {
    run_vm_observed(spec, &mut |_, _| {})
}

/// Like [`run_vm`], and passes the guest's output and console to `observe` while the guest
/// runs, as they grow. The guest is guest 1 (`a`) of a lab of one, without the lab network
/// (see [`crate::run_lab`] for networked and several guests).
pub fn run_vm_observed(
    spec: &VmSpec,
    observe: &mut dyn FnMut(Stream, &[u8]),
) -> Result<VmOutcome, LabError> {
    crate::install_signal_handlers();
    if crate::interrupted() {
        return Err(LabError::interrupted_before_start());
    }
    check_prerequisites(spec)?;
    let run_dir = make_run_dir().map_err(|e| {
        LabError::setup(format!(
            "cannot create a run folder in {}: {e}",
            paths::runs().display()
        ))
    })?;
    log::info!("run folder: {}", run_dir.display());
    let mut run = Run::new(spec, run_dir, Wiring::alone());
    let result = run.start().and_then(|()| loop {
        if let Some(st) = run.poll(observe)? {
            break run.finish(st, observe);
        }
        std::thread::sleep(POLL);
    });
    run.stop_all();
    result
}

pub(crate) fn check_prerequisites(spec: &VmSpec) -> Result<(), LabError> {
    let qemu = paths::runtime().join("usr/bin/qemu-system-x86_64");
    let mut needed = vec![
        ("the QEMU runtime", qemu),
        ("the guest kernel", paths::guest_kernel()),
        ("the guest initramfs", paths::guest_initramfs()),
        ("images/qemu-env.sh", paths::qemu_env()),
    ];
    if spec.devices > 0 {
        needed.push(("qpipd", paths::qpipd()));
    }
    for (what, path) in needed {
        if !path.exists() {
            return Err(LabError::setup(format!(
                "{what} is missing ({}); run ./qpip setup",
                path.display()
            )));
        }
    }
    if spec.accel == Accel::Kvm && !Path::new("/dev/kvm").exists() {
        return Err(LabError::setup(
            "--accel kvm needs /dev/kvm, which this host lacks".into(),
        ));
    }
    Ok(())
}

/// How many run folders are kept; older ones are deleted when a new run starts, so the
/// cache does not grow without bound (each holds logs and the guest's share).
const KEEP_RUNS: usize = 40;

/// Deletes all but the newest `keep - 1` run folders, making room for one more. Run folder
/// names start with a timestamp, so name order is age order.
fn prune_old_runs(runs: &Path, keep: usize) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let excess = dirs.len().saturating_sub(keep.saturating_sub(1));
    for old in &dirs[..excess] {
        if let Err(e) = fs::remove_dir_all(old) {
            log::warn!("cannot remove old run folder {}: {e}", old.display());
        }
    }
}

/// A fresh, uniquely named, empty run folder.
pub(crate) fn make_run_dir() -> io::Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let runs = paths::runs();
    fs::create_dir_all(&runs)?;
    prune_old_runs(&runs, KEEP_RUNS);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = runs.join(format!("{}-{}-{n}", timestamp(), std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Local time as YYYYmmdd-HHMMSS.
fn timestamp() -> String {
    // SAFETY: localtime_r writes only into `tm`; time(NULL) has no preconditions.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return format!("t{t}");
        }
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

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
        }
    }
}

/// One guest's run, in steps: [`Run::start`], [`Run::poll`] until QEMU exits,
/// [`Run::finish`]. A lab steps several at once.
pub(crate) struct Run<'a> {
    spec: &'a VmSpec,
    pub dir: PathBuf,
    wiring: Wiring<'a>,
    // Teardown order is QEMU first (so the devices see a disconnect), then the devices:
    // explicit in `stop_all`, and the field order makes Drop, the backstop on panics, agree.
    qemu: Option<Proc>,
    devices: Vec<Proc>,
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
            started: None,
            tails: Vec::new(),
            device_gone: None,
        }
    }

    /// The pids of the processes this run started (QEMU, then its devices).
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

    fn fail(&self, message: String, details: String) -> LabError {
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

        for i in 0..self.spec.devices {
            self.start_device(i)?;
        }
        for i in 0..self.spec.devices {
            self.wait_for_socket(i)?;
        }

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
                return Err(self.fail(
                    format!(
                        "qpipd {i} exited ({st}) while the guest was running; stopped QEMU; log: {}",
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
        let console = fs::read(&console_log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let found = console::scan(&console);
        if !found.is_empty() {
            problems.push(Problem {
                headline: format!(
                    "kernel problem in the guest console before its reboot ({})",
                    found[0].marker
                ),
                details: console::format_problems(&console, &found, 12),
            });
        }
        if let Some(p) = problems.into_iter().next() {
            return Err(self.fail(p.headline, p.details));
        }
        let k = (1..)
            .find(|k| !self.dir.join(format!("console-{k}.log")).exists())
            .expect("a free name");
        let mut keep = vec![("console.log".to_string(), format!("console-{k}.log"))];
        keep.push(("qemu.log".into(), format!("qemu-{k}.log")));
        for i in 0..self.spec.devices {
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
        for i in 0..self.spec.devices {
            self.start_device(i)?;
        }
        for i in 0..self.spec.devices {
            self.wait_for_socket(i)?;
        }
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

        let read = |p: PathBuf| fs::read(p).map(|b| String::from_utf8_lossy(&b).into_owned());
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

        let in_console = console::scan(&console);
        if !in_console.is_empty() {
            problems.push(Problem {
                headline: format!(
                    "kernel problem in the guest console ({})",
                    in_console[0].marker
                ),
                details: console::format_problems(&console, &in_console, 12),
            });
        } else {
            // dmesg can hold messages above the console log level; the console is the
            // better report when both have them (it also shows what came after).
            let in_dmesg = console::scan(&dmesg);
            if !in_dmesg.is_empty() {
                problems.push(Problem {
                    headline: format!("kernel problem in the guest dmesg ({})", in_dmesg[0].marker),
                    details: console::format_problems(&dmesg, &in_dmesg, 12),
                });
            }
        }

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

    /// The extra qpipd arguments of device `i`: the spec's, and for device 0 of a guest on
    /// the lab network its link, address and MAC there (unless the spec gives a link).
    fn device_args(&self, i: usize) -> Vec<String> {
        let mut args = self.spec.qpipd_args.get(i).cloned().unwrap_or_default();
        let has_net = args.iter().any(|a| a == "--net" || a.starts_with("--net="));
        if let (0, Some(_), false) = (i, self.wiring.net, has_net) {
            let n = self.wiring.n;
            args.extend([
                "--net".into(),
                format!("tap:{}", netns::device_tap(n)),
                "--ip".into(),
                format!("{}/64", netns::device_addr(n)),
                "--mac".into(),
                netns::device_mac(n),
                "--ndp-solicit".into(),
                netns::NDP_SOLICITS.to_string(),
            ]);
        }
        args
    }

    fn start_device(&mut self, i: usize) -> Result<(), LabError> {
        let sock = self.dir.join(format!("qpip{i}.sock"));
        if sock.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(self.fail(
                format!(
                    "socket path {} is longer than {MAX_SOCKET_PATH} bytes; use a shorter QPIP_CACHE",
                    sock.display()
                ),
                String::new(),
            ));
        }
        let log = self.dir.join(format!("qpipd-{i}.log"));
        let file = File::create(&log).map_err(|e| {
            self.fail(
                format!("cannot create {}: {e}", log.display()),
                String::new(),
            )
        })?;
        let file2 = file
            .try_clone()
            .map_err(|e| self.fail(format!("cannot dup {}: {e}", log.display()), String::new()))?;
        let qpipd = paths::qpipd();
        let mut cmd = Command::new(&qpipd);
        cmd.arg("--socket").arg(&sock).args(self.device_args(i));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        if let Some(net) = self.wiring.net {
            // qpipd opens its TAP by name, in the namespace it runs in.
            net.enter(&mut cmd);
        }
        cmd.stdin(Stdio::null()).stdout(file).stderr(file2);
        let p = Proc::spawn(format!("qpipd {i}"), log, cmd).map_err(|e| {
            self.fail(
                format!("cannot start {}: {e}", qpipd.display()),
                String::new(),
            )
        })?;
        log::info!(
            "guest {} device {i}: qpipd pid {}, socket {}",
            self.wiring.name,
            p.pid(),
            sock.display()
        );
        self.devices.push(p);
        Ok(())
    }

    fn wait_for_socket(&mut self, i: usize) -> Result<(), LabError> {
        let sock = self.dir.join(format!("qpip{i}.sock"));
        let deadline = Instant::now() + SOCKET_WAIT;
        loop {
            if fs::metadata(&sock).is_ok_and(|m| m.file_type().is_socket()) {
                return Ok(());
            }
            if crate::interrupted() {
                return Err(self.interrupted());
            }
            let dev = &mut self.devices[i];
            let exited = dev.try_wait().ok().flatten();
            if let Some(st) = exited {
                let (name, log) = (dev.name.clone(), dev.log.clone());
                return Err(self.fail(
                    format!(
                        "{name} exited ({st}) before listening on its socket; log: {}",
                        log.display()
                    ),
                    log_tail(&log, 15),
                ));
            }
            if Instant::now() >= deadline {
                let (name, log) = (dev.name.clone(), dev.log.clone());
                return Err(self.fail(
                    format!(
                        "{name} did not create {} within {} s; log: {}",
                        sock.display(),
                        SOCKET_WAIT.as_secs(),
                        log.display()
                    ),
                    log_tail(&log, 15),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The kernel command line: the fixed part, then what the guest's init reads about
    /// its place in the lab (`qpip_lab.*`; a dotted name the kernel leaves alone).
    fn kernel_cmdline(&self) -> String {
        let w = &self.wiring;
        let mut s = format!(
            "{KERNEL_CMDLINE} qpip_lab.guest={} qpip_lab.name={} qpip_lab.guests={}",
            w.n, w.name, w.guests
        );
        if w.net.is_some() {
            s.push_str(&format!(
                " qpip_lab.addr={}/64 qpip_lab.mac={}",
                netns::virtio_addr(w.n),
                netns::virtio_mac(w.n)
            ));
        }
        if w.shared.is_some() {
            s.push_str(" qpip_lab.shared=1");
        }
        s
    }

    fn start_qemu(&mut self, console_log: &Path) -> Result<(), LabError> {
        let share = self.dir.join("share");
        let mut folders = vec![&share, console_log];
        if let Some(shared) = &self.wiring.shared {
            folders.push(shared);
        }
        for p in folders {
            // QEMU's option syntax has no escape for a comma in these paths.
            if p.to_string_lossy().contains(',') {
                return Err(self.fail(
                    format!(
                        "path {} contains a comma, which QEMU options cannot take",
                        p.display()
                    ),
                    String::new(),
                ));
            }
        }
        let mem = self.spec.memory_mib;
        let mut args: Vec<String> = vec![
            "-machine".into(),
            "q35,memory-backend=mem0".into(),
            // Guest RAM in a shared memfd: QEMU hands its fd to each device, which maps it
            // to reach guest memory (DMA).
            "-object".into(),
            format!("memory-backend-memfd,id=mem0,size={mem}M,share=on"),
            "-m".into(),
            format!("{mem}M"),
            "-cpu".into(),
            "max".into(),
            "-accel".into(),
            self.spec.accel.as_str().into(),
            "-nographic".into(),
            "-no-reboot".into(),
            "-nodefaults".into(),
            "-serial".into(),
            format!("file:{}", console_log.display()),
            "-kernel".into(),
            paths::guest_kernel().display().to_string(),
            "-initrd".into(),
            paths::guest_initramfs().display().to_string(),
            "-append".into(),
            self.kernel_cmdline(),
            "-virtfs".into(),
            format!(
                "local,path={},mount_tag=host,security_model=none,id=h0",
                share.display()
            ),
        ];
        if let Some(shared) = &self.wiring.shared {
            args.push("-virtfs".into());
            args.push(format!(
                "local,path={},mount_tag=lab,security_model=none,id=h1",
                shared.display()
            ));
        }
        if self.wiring.net.is_some() {
            let n = self.wiring.n;
            // The TAP exists on the bridge already; QEMU attaches to it by name (it runs
            // in the namespace). No option ROM: the guest boots by -kernel, not from the
            // network, and the runtime need not carry iPXE.
            args.push("-netdev".into());
            args.push(format!(
                "tap,id=lan,ifname={},script=no,downscript=no",
                netns::virtio_tap(n)
            ));
            args.push("-device".into());
            args.push(format!(
                "virtio-net-pci,netdev=lan,mac={},romfile=",
                netns::virtio_mac(n)
            ));
        }
        for i in 0..self.spec.devices {
            let sock = self.dir.join(format!("qpip{i}.sock"));
            args.push("-device".into());
            let props: String = self
                .spec
                .device_props
                .iter()
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, "true"));
                    format!(",{}:{v}", json_string(k))
                })
                .collect();
            args.push(format!(
                r#"{{"driver":"vfio-user-pci","id":"qpip{i}","socket":{{"path":{},"type":"unix"}}{props}}}"#,
                json_string(&sock.to_string_lossy())
            ));
        }
        let log = self.dir.join("qemu.log");
        fs::write(
            self.dir.join("qemu.cmdline"),
            format!("{} {}\n", paths::qemu_env().display(), args.join(" ")),
        )
        .ok();
        let file = File::create(&log).map_err(|e| {
            self.fail(
                format!("cannot create {}: {e}", log.display()),
                String::new(),
            )
        })?;
        let file2 = file
            .try_clone()
            .map_err(|e| self.fail(format!("cannot dup {}: {e}", log.display()), String::new()))?;
        let mut cmd = Command::new("bash");
        // qemu-env.sh execs QEMU, so the child's pid is QEMU's.
        cmd.arg(paths::qemu_env())
            .args(&args)
            .env("QPIP_CACHE", paths::cache())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2);
        if let Some(net) = self.wiring.net {
            // QEMU opens the virtio-net TAP by name, in the namespace it runs in.
            net.enter(&mut cmd);
        }
        let p = Proc::spawn("QEMU".into(), log, cmd)
            .map_err(|e| self.fail(format!("cannot start QEMU: {e}"), String::new()))?;
        log::info!(
            "guest {}: QEMU pid {} ({} device(s), {}{})",
            self.wiring.name,
            p.pid(),
            self.spec.devices,
            self.spec.accel.as_str(),
            if self.wiring.net.is_some() {
                ", lab network"
            } else {
                ""
            }
        );
        self.qemu = Some(p);
        Ok(())
    }

    /// After QEMU is gone, each qpipd should see the disconnect and exit 0 by itself.
    fn check_devices_exit(&mut self, problems: &mut Vec<Problem>) {
        for (i, d) in self.devices.iter_mut().enumerate() {
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

/// A JSON string literal (QEMU's JSON -device syntax).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
        assert_eq!(json_string("x\ny"), r#""x\u000ay""#);
    }

    #[test]
    fn pruning_keeps_the_newest_run_folders() {
        let root = std::env::temp_dir().join(format!("qpip-prune-{}", std::process::id()));
        for name in [
            "20260101-000003-1-0",
            "20260101-000001-1-0",
            "20260101-000002-1-0",
        ] {
            fs::create_dir_all(root.join(name).join("share")).unwrap();
        }
        prune_old_runs(&root, 2);
        let mut left: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            left,
            ["20260101-000003-1-0"],
            "room for one new run next to the newest"
        );
    }

    #[test]
    fn timestamps_have_the_run_folder_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 15, "{t}");
        assert_eq!(&t[8..9], "-");
        assert!(
            t.chars().filter(|c| *c != '-').all(|c| c.is_ascii_digit()),
            "{t}"
        );
    }

    #[test]
    fn accel_parses() {
        assert_eq!("tcg".parse::<Accel>(), Ok(Accel::Tcg));
        assert_eq!("kvm".parse::<Accel>(), Ok(Accel::Kvm));
        assert!("hvf".parse::<Accel>().is_err());
    }

    #[test]
    fn error_headline_names_the_console_log_or_the_run_folder() {
        let dir = std::env::temp_dir().join(format!("qpip-lab-headline-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let e = LabError::failed("qpipd 0 exited".into(), "  x\n".into(), &dir);
        let d = dir.display();
        assert_eq!(e.headline(), format!("qpipd 0 exited (run folder: {d})"));
        fs::write(dir.join("console.log"), "").unwrap();
        assert_eq!(
            e.headline(),
            format!("qpipd 0 exited (console log: {d}/console.log)")
        );
        assert_eq!(
            e.to_string(),
            format!("qpipd 0 exited (console log: {d}/console.log)\n  x")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
