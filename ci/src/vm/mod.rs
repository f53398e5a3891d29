//! One VM run: devices, QEMU, guest command, checks. See the crate docs for the sequence.
//!
//! - [`run`]: one guest's run in steps (start, poll, finish, power cycles), and its checks;
//! - [`launch`]: starting the guest's qpipd devices and QEMU (command lines, sockets, logs);
//! - [`run_dir`]: the run folders in the cache;
//! - [`error`]: how a run fails ([`LabError`]).

mod error;
mod launch;
mod run;
mod run_dir;

pub use error::{ErrorKind, LabError};
pub(crate) use run::{Run, Wiring};
pub(crate) use run_dir::make_run_dir;
pub use run_dir::{local_time, timestamp_of};

use crate::paths;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Poll interval of the wait loop (streams output, checks signals and children).
pub(crate) const POLL: Duration = Duration::from_millis(50);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accel_parses() {
        assert_eq!("tcg".parse::<Accel>(), Ok(Accel::Tcg));
        assert_eq!("kvm".parse::<Accel>(), Ok(Accel::Kvm));
        assert!("hvf".parse::<Accel>().is_err());
    }
}
