//! The qpip lab: boots QEMU guests with qpip devices attached over vfio-user, runs a shell
//! command in each guest and collects what happened.
//!
//! One VM run ([`run_vm`]) is:
//! 1. a fresh run folder `$QPIP_CACHE/runs/<YYYYmmdd-HHMMSS>-<pid>-<n>/` with `share/`, the
//!    folder the guest mounts at `/host` (virtio-9p); the command goes to `share/cmd.sh`;
//! 2. one `qpipd` per device, each listening on `RUN/qpip<i>.sock`, logging to
//!    `RUN/qpipd-<i>.log` (in a lab on the lab network, by default, device 0 of every
//!    guest is instead a function of one adapter qpipd the lab runs, see [`adapter`]);
//! 3. QEMU (TCG by default) with the guest kernel and initramfs, one `vfio-user-pci` device
//!    per socket, console to `RUN/console.log`;
//! 4. the guest's init runs `sh /host/cmd.sh`, writes `share/output`, `share/status` and
//!    `share/dmesg`, and powers off; QEMU exits; each `qpipd` exits when QEMU disconnects
//!    (the adapter serves on until the lab stops it, after every guest);
//!    a command that writes `/host/reboot` and reboots (`reboot -f`) gets a power cycle
//!    instead: the devices and QEMU start again, and init runs the command again;
//! 5. the lab checks everything: QEMU's exit, each `qpipd`'s exit, that the guest reported a
//!    status, and that neither the console nor dmesg shows a kernel warning, oops or trace.
//!
//! [`run_lab`] runs several guests at once, on the lab network (a network namespace with a
//! bridge, see [`netns`]), with host-side work done in that namespace while they are up.
//!
//! Every process the lab starts is killed and reaped on every path out of [`run_vm`] and
//! [`run_lab`]: success, error, panic, and Ctrl-C/SIGTERM (see [`interrupted`]); the lab
//! network is removed likewise.

mod adapter;
pub mod console;
pub mod demo;
mod lab;
pub mod netns;
pub mod paths;
pub mod payload;
mod procs;
mod vm;

pub use adapter::QpipdLayout;
pub use lab::{
    exit_status, guest_name, run_lab, unique_netns, GuestSpec, LabHost, LabOutcome, LabSpec,
    Network,
};
pub use vm::{
    local_time, run_vm, run_vm_observed, timestamp_of, Accel, LabError, Stream, VmOutcome, VmSpec,
};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static INTERRUPT: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the SIGINT/SIGTERM handlers (once per process). From then on, those signals
/// no longer kill the process: they set a flag that the VM wait loop checks, so the lab
/// stops its children, says where the logs are, and returns a [`LabError`] for which
/// [`LabError::is_interrupted`] holds.
pub fn install_signal_handlers() {
    INTERRUPT.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&flag)) {
                log::warn!("cannot install a handler for signal {sig}: {e}");
            }
        }
        flag
    });
}

/// True once SIGINT or SIGTERM arrived after [`install_signal_handlers`].
pub fn interrupted() -> bool {
    INTERRUPT.get().is_some_and(|f| f.load(Ordering::SeqCst))
}
