//! Starting a guest's devices (one qpipd each) and its QEMU: their command lines, sockets
//! and logs.

use super::run::Run;
use super::LabError;
use crate::adapter::MAX_SOCKET_PATH;
use crate::netns;
use crate::paths;
use crate::procs::{log_tail, Proc};
use std::fs::{self, File};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a qpipd may take to create its socket.
const SOCKET_WAIT: Duration = Duration::from_secs(10);
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

impl Run<'_> {
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
                format!("{}/{}", netns::device_addr(n), netns::PREFIX_LEN),
                "--mac".into(),
                netns::device_mac(n),
                "--ndp-solicit".into(),
                netns::NDP_SOLICITS.to_string(),
            ]);
            if n <= netns::MAX_GUESTS4 {
                args.extend([
                    "--ip".into(),
                    format!("{}/{}", netns::device_addr4(n), netns::PREFIX4_LEN),
                ]);
            }
            if self.wiring.far_routes {
                args.extend(netns::far_routes());
            }
        }
        args
    }

    /// Starts every device of this guest's own, then waits until each listens on its
    /// socket (device 0 too when it is the adapter's: after a power cycle, until the
    /// adapter has bound it afresh).
    pub(super) fn start_devices(&mut self) -> Result<(), LabError> {
        for i in self.first_own()..self.spec.devices {
            self.start_device(i)?;
        }
        if self.wiring.adapter && self.spec.devices > 0 {
            self.wait_for_adapter_socket()?;
        }
        for i in self.first_own()..self.spec.devices {
            self.wait_for_socket(i)?;
        }
        Ok(())
    }

    /// Waits until device 0's socket, the adapter's, is there and is not the one the last
    /// QEMU used (the adapter removes and binds it again once a QEMU has gone; it listens
    /// right after binding, long before a new QEMU gets to connect).
    fn wait_for_adapter_socket(&mut self) -> Result<(), LabError> {
        let sock = crate::adapter::function_socket(&self.dir);
        let deadline = Instant::now() + SOCKET_WAIT;
        loop {
            let id = crate::adapter::socket_id(&sock);
            if id.is_some() && id != self.adapter_socket {
                self.adapter_socket = id;
                return Ok(());
            }
            if crate::interrupted() {
                return Err(self.interrupted());
            }
            if Instant::now() >= deadline {
                return Err(self.fail(
                    format!(
                        "the adapter qpipd did not listen afresh on {} within {} s; log: {}",
                        sock.display(),
                        SOCKET_WAIT.as_secs(),
                        self.dir
                            .parent()
                            .map(|d| d.join(crate::adapter::ADAPTER_LOG))
                            .unwrap_or_default()
                            .display()
                    ),
                    String::new(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log file `log`, created, twice: a child's stdout and its stderr.
    fn log_files(&self, log: &Path) -> Result<(File, File), LabError> {
        let file = File::create(log).map_err(|e| {
            self.fail(
                format!("cannot create {}: {e}", log.display()),
                String::new(),
            )
        })?;
        let file2 = file
            .try_clone()
            .map_err(|e| self.fail(format!("cannot dup {}: {e}", log.display()), String::new()))?;
        Ok((file, file2))
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
        let (file, file2) = self.log_files(&log)?;
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
            let first = self.first_own();
            let dev = &mut self.devices[i - first];
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
                " qpip_lab.addr={}/{} qpip_lab.mac={}",
                netns::virtio_addr(w.n),
                netns::PREFIX_LEN,
                netns::virtio_mac(w.n)
            ));
            if w.n <= netns::MAX_GUESTS4 {
                s.push_str(&format!(
                    " qpip_lab.addr4={}/{}",
                    netns::virtio_addr4(w.n),
                    netns::PREFIX4_LEN
                ));
            }
        }
        if w.shared.is_some() {
            s.push_str(" qpip_lab.shared=1");
        }
        s
    }

    pub(super) fn start_qemu(&mut self, console_log: &Path) -> Result<(), LabError> {
        let share = self.dir.join("share");
        let extras = paths::guest_extras();
        let mut folders = vec![&share, console_log, &extras];
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
        // Mounted by the guest only when a test needs what it holds (lab-storage): the
        // share costs the boot nothing.
        let extras = paths::guest_extras();
        if extras.is_dir() {
            args.push("-virtfs".into());
            args.push(format!(
                "local,path={},mount_tag=extras,security_model=none,readonly=on,id=h2",
                extras.display()
            ));
        }
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
        let (file, file2) = self.log_files(&log)?;
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
}
