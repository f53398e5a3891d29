//! `qpip-info`: lists the qpip devices in this machine, one line each, and checks that each
//! one's character device can be opened. Exit status 0 when there is at least one device
//! and all are usable, 1 otherwise (with the reason on stderr).

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::ExitCode;

use qpip::{driver_loaded, list_devices, AbiVersion, DeviceInfo};

const USAGE: &str = "\
usage: qpip-info [--sysfs DIR] [--dev DIR]
Lists the qpip devices (from DIR/class/qpip, default /sys) and checks that each character
device (DIR/qpipN, default /dev) opens. Exits 1 when there is no device or one is unusable.";

fn main() -> ExitCode {
    let mut sysfs = PathBuf::from("/sys");
    let mut dev_dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{flag} needs a directory"))
        };
        let parsed = match arg.as_str() {
            "--sysfs" => value("--sysfs").map(|v| sysfs = v),
            "--dev" => value("--dev").map(|v| dev_dir = Some(v)),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(msg) = parsed {
            eprintln!("qpip-info: error: {msg}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    }

    let devices = match list_devices(&sysfs) {
        Ok(devices) => devices,
        Err(e) => {
            eprintln!("qpip-info: error: cannot read the qpip devices: {e}");
            return ExitCode::FAILURE;
        }
    };
    if devices.is_empty() {
        if driver_loaded(&sysfs) {
            eprintln!(
                "qpip-info: error: no qpip device: the qpip driver is loaded but bound no device"
            );
        } else {
            eprintln!(
                "qpip-info: error: no qpip device: the qpip driver is not loaded (insmod qpip.ko)"
            );
        }
        return ExitCode::FAILURE;
    }

    let mut ok = true;
    for dev in &devices {
        let node = match &dev_dir {
            Some(dir) => dir.join(&dev.name),
            None => dev.dev_path.clone(),
        };
        println!("{}", line(dev, &node));
        if dev.ident != qpip_abi::regs::IDENT_MAGIC {
            eprintln!(
                "qpip-info: warning: {}: ident {:#010x} is not the qpip magic {:#010x}",
                dev.name,
                dev.ident,
                qpip_abi::regs::IDENT_MAGIC
            );
        }
        if dev.abi_version.major != AbiVersion::CURRENT.major {
            eprintln!(
                "qpip-info: warning: {}: device interface {} is not {}.x, which this tool knows",
                dev.name,
                dev.abi_version,
                AbiVersion::CURRENT.major
            );
        }
        // Open read-write as an application will; the file is closed when it is dropped.
        if let Err(e) = OpenOptions::new().read(true).write(true).open(&node) {
            eprintln!("qpip-info: error: cannot open {}: {e}", node.display());
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn line(dev: &DeviceInfo, node: &std::path::Path) -> String {
    format!(
        "{}  pci {}  abi {}  ident {:#010x}  doorbell-pages {}  msix-vectors {}  reset-count {}",
        node.display(),
        dev.pci_address.as_deref().unwrap_or("-"),
        dev.abi_version,
        dev.ident,
        dev.doorbell_pages,
        dev.msix_vectors,
        dev.reset_count
    )
}
