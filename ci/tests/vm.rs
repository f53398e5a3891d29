//! VM integration tests: real guests under QEMU, real qpipd processes, the real driver.
//!
//! Each test boots at least one guest (several seconds under TCG), so they are ignored by a
//! plain `cargo test`; `./qpip test` runs them with `-- --ignored` after building
//! everything they need. Expected values come from `qpip-abi`, the same constants the
//! device and the driver are built from, never from copies.
//!
//! Guest scripts report facts as `@key=value` lines on their output; the assertions are
//! made here, in Rust, so a failure message shows the guest's whole report.

use qpip_abi::pci::{PCI_CLASS_CODE, PCI_DEVICE_ID, PCI_VENDOR_ID};
use qpip_abi::regs::IDENT_MAGIC;
use qpip_abi::{pci, ABI_VERSION_MAJOR, ABI_VERSION_MINOR};
mod common;

use common::Report;
use qpip_lab::{run_vm, VmOutcome, VmSpec};

/// The shell helpers of this file's guest scripts (after common's).
///  pci TAG        one `TAG.pci` line per PCI function: slot vendor device class driver
///  qpip_state TAG N  what /dev/qpipN and /sys/class/qpip/qpipN show
const HELPERS: &str = r#"
pci() {
    for d in /sys/bus/pci/devices/*; do
        drv=none
        [ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
        kv "$1.pci" "${d##*/} $(cat "$d/vendor") $(cat "$d/device") $(cat "$d/class") $drv"
    done
}
qpip_state() {
    if [ -c "/dev/qpip$2" ]; then kv "$1.dev$2" yes; else kv "$1.dev$2" no; fi
    for a in abi_version ident doorbell_pages msix_vectors reset_count irq_count; do
        kv "$1.qpip$2.$a" "$(cat "/sys/class/qpip/qpip$2/$a" 2>/dev/null || echo missing)"
    done
}
"#;

/// Runs a guest; an interrupted run ends the test process (the lab has already stopped
/// its children), so a Ctrl-C does not fall through to the next test's boot.
fn boot(spec: VmSpec) -> VmOutcome {
    let spec = VmSpec {
        cmd: common::script(HELPERS, &spec.cmd),
        ..spec
    };
    common::boot(&spec)
}

/// The PCI functions with the qpip vendor and device ID, as (slot, class, driver).
fn qpip_functions<'a>(rep: &Report<'a>, tag: &str) -> Vec<PciFunction<'a>> {
    let vendor = format!("{PCI_VENDOR_ID:#06x}");
    let device = format!("{PCI_DEVICE_ID:#06x}");
    rep.all(&format!("{tag}.pci"))
        .into_iter()
        .filter_map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            [slot, v, d, class, driver] if v == vendor && d == device => Some(PciFunction {
                slot,
                class,
                driver,
            }),
            _ => None,
        })
        .collect()
}

#[derive(Debug)]
struct PciFunction<'a> {
    slot: &'a str,
    class: &'a str,
    driver: &'a str,
}

fn abi_version() -> String {
    format!("{ABI_VERSION_MAJOR}.{ABI_VERSION_MINOR}")
}

/// The driver's probe line for `qpipN`, e.g.
/// `qpip 0000:00:03.0: qpip0: qpip device interface 1.0, 64 doorbell pages, 16 MSI-X vectors`.
fn probe_lines(dmesg: &str, n: usize) -> Vec<&str> {
    let needle = format!("qpip{n}: qpip device interface {}", abi_version());
    dmesg.lines().filter(|l| l.contains(&needle)).collect()
}

/// One device: enumeration, binding, sysfs, the probe message, two unload/reload cycles
/// (each re-probes and resets the device), and `qpip-info`.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn one_device_binds_reloads_and_reports() {
    let out = boot(VmSpec::new(
        r#"
state() { pci "$1"; qpip_state "$1" 0; }
state boot
for r in 1 2; do
    rmmod qpip; kv "r$r.rmmod" $?
    pci "r$r.unloaded"
    if [ -e /dev/qpip0 ]; then kv "r$r.unloaded.dev0" yes; else kv "r$r.unloaded.dev0" no; fi
    insmod "$QPIP_KO"; kv "r$r.insmod" $?
    state "r$r"
done
echo '--- qpip-info'
qpip-info; kv info.status $?
"#,
    ));
    let rep = Report::succeeded(&out);
    let ctx = || rep.context();

    // Enumeration: exactly one function with the qpip IDs, with the qpip class, bound.
    let funcs = qpip_functions(&rep, "boot");
    assert_eq!(
        funcs.len(),
        1,
        "qpip functions at boot: {funcs:?}\n{}",
        ctx()
    );
    let f = &funcs[0];
    assert_eq!(
        f.class,
        format!("{PCI_CLASS_CODE:#08x}"),
        "class of {}\n{}",
        f.slot,
        ctx()
    );
    assert_eq!(f.driver, "qpip", "driver bound to {}\n{}", f.slot, ctx());
    let slot = f.slot;

    // What the driver publishes.
    assert_eq!(rep.get("boot.dev0"), "yes", "/dev/qpip0 at boot\n{}", ctx());
    assert_eq!(
        rep.get("boot.qpip0.abi_version"),
        abi_version(),
        "{}",
        ctx()
    );
    assert_eq!(
        rep.get("boot.qpip0.ident"),
        format!("{IDENT_MAGIC:#010x}"),
        "{}",
        ctx()
    );
    assert_eq!(
        rep.get("boot.qpip0.doorbell_pages"),
        pci::DOORBELL_PAGES.to_string(),
        "{}",
        ctx()
    );
    assert_eq!(
        rep.get("boot.qpip0.msix_vectors"),
        pci::MSIX_VECTORS.to_string(),
        "{}",
        ctx()
    );
    let irqs: u64 = rep
        .get("boot.qpip0.irq_count")
        .parse()
        .expect("irq_count is a number");
    assert!(
        irqs >= 1,
        "the probe's test interrupt was not counted (irq_count {irqs})\n{}",
        ctx()
    );

    // Unload and reload, twice: the node and the binding go away and come back, and each
    // probe resets the device again.
    let reset_count = |tag: &str| -> u64 {
        let v = rep.get(&format!("{tag}.qpip0.reset_count"));
        v.parse()
            .unwrap_or_else(|_| panic!("{tag}: reset_count {v:?} is not a number\n{}", ctx()))
    };
    let mut last_resets = reset_count("boot");
    assert!(
        last_resets >= 1,
        "the probe did not reset the device\n{}",
        ctx()
    );
    for r in ["r1", "r2"] {
        assert_eq!(
            rep.get(&format!("{r}.rmmod")),
            "0",
            "{r}: rmmod qpip\n{}",
            ctx()
        );
        assert_eq!(
            rep.get(&format!("{r}.unloaded.dev0")),
            "no",
            "{r}: /dev/qpip0 after rmmod\n{}",
            ctx()
        );
        let unbound = qpip_functions(&rep, &format!("{r}.unloaded"));
        assert!(
            unbound.len() == 1 && unbound[0].driver == "none",
            "{r}: the function after rmmod: {unbound:?}\n{}",
            ctx()
        );
        assert_eq!(
            rep.get(&format!("{r}.insmod")),
            "0",
            "{r}: insmod\n{}",
            ctx()
        );
        let funcs = qpip_functions(&rep, r);
        assert!(
            funcs.len() == 1 && funcs[0].slot == slot && funcs[0].driver == "qpip",
            "{r}: the function after insmod: {funcs:?}\n{}",
            ctx()
        );
        assert_eq!(
            rep.get(&format!("{r}.dev0")),
            "yes",
            "{r}: /dev/qpip0 after insmod\n{}",
            ctx()
        );
        assert_eq!(
            rep.get(&format!("{r}.qpip0.abi_version")),
            abi_version(),
            "{}",
            ctx()
        );
        let resets = reset_count(r);
        assert!(
            resets > last_resets,
            "{r}: reset_count {resets}, was {last_resets}\n{}",
            ctx()
        );
        last_resets = resets;
    }

    // The probe line, once per probe (boot and two reloads), names the interface version.
    let probes = probe_lines(&out.dmesg, 0);
    assert_eq!(
        probes.len(),
        3,
        "probe lines for qpip0 (boot + 2 reloads): {probes:?}\n{}",
        ctx()
    );
    assert!(
        probes.iter().all(|l| l.contains(slot)),
        "probe lines name {slot}: {probes:?}"
    );

    // qpip-info finds the device through sysfs and opens its node.
    assert_eq!(rep.get("info.status"), "0", "qpip-info failed\n{}", ctx());
    let info = out.output.split("--- qpip-info\n").nth(1).unwrap_or("");
    let info_line = info.lines().find(|l| l.starts_with("/dev/qpip0"));
    let info_line = info_line.unwrap_or_else(|| panic!("qpip-info lists no /dev/qpip0\n{}", ctx()));
    assert!(
        info_line.contains(slot) && info_line.contains(&abi_version()),
        "qpip-info line lacks the PCI address {slot} or interface {}: {info_line}",
        abi_version()
    );
}

/// Two devices in one guest: two functions, both bound, two nodes.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn two_devices_in_one_guest() {
    let out = boot(VmSpec {
        devices: 2,
        ..VmSpec::new(
            r#"pci boot; qpip_state boot 0; qpip_state boot 1; qpip-info; kv info.status $?"#,
        )
    });
    let rep = Report::succeeded(&out);
    let funcs = qpip_functions(&rep, "boot");
    assert_eq!(
        funcs.len(),
        2,
        "qpip functions: {funcs:?}\n{}",
        rep.context()
    );
    assert!(
        funcs.iter().all(|f| f.driver == "qpip"),
        "bindings: {funcs:?}\n{}",
        rep.context()
    );
    assert_ne!(funcs[0].slot, funcs[1].slot);
    for n in 0..2 {
        assert_eq!(
            rep.get(&format!("boot.dev{n}")),
            "yes",
            "/dev/qpip{n}\n{}",
            rep.context()
        );
        assert_eq!(
            rep.get(&format!("boot.qpip{n}.abi_version")),
            abi_version(),
            "{}",
            rep.context()
        );
        assert_eq!(
            probe_lines(&out.dmesg, n).len(),
            1,
            "probe line of qpip{n}\n{}",
            rep.context()
        );
    }
    assert_eq!(rep.get("info.status"), "0", "qpip-info\n{}", rep.context());
    for n in 0..2 {
        assert!(
            out.output
                .lines()
                .any(|l| l.starts_with(&format!("/dev/qpip{n} "))),
            "qpip-info does not list /dev/qpip{n}\n{}",
            rep.context()
        );
    }
    // Each device had its own qpipd, and each saw its guest.
    for n in 0..2 {
        assert!(!out.qpipd_log(n).is_empty(), "qpipd {n} logged nothing");
    }
}

/// A device that reports an interface major the driver does not know is refused, with a
/// message that says which version and what the driver needs.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn driver_refuses_an_unknown_major_version() {
    const MAJOR: u16 = 7;
    assert_ne!(MAJOR, ABI_VERSION_MAJOR);
    let out = boot(VmSpec {
        qpipd_args: vec![vec!["--advertise-abi-major".into(), MAJOR.to_string()]],
        ..VmSpec::new(r#"pci boot; qpip_state boot 0; ls /sys/class/qpip/ | sed 's/^/@class=/'"#)
    });
    let rep = Report::succeeded(&out);
    let funcs = qpip_functions(&rep, "boot");
    assert!(
        funcs.len() == 1 && funcs[0].driver == "none",
        "the function must enumerate and stay unbound: {funcs:?}\n{}",
        rep.context()
    );
    assert_eq!(
        rep.get("boot.dev0"),
        "no",
        "/dev/qpip0 exists for a refused device\n{}",
        rep.context()
    );
    assert!(
        rep.all("class").is_empty(),
        "class devices: {:?}",
        rep.all("class")
    );
    let refusal = format!("device interface version {MAJOR}.{ABI_VERSION_MINOR} is not supported");
    let needs = format!("needs {ABI_VERSION_MAJOR}.x");
    assert!(
        out.dmesg
            .lines()
            .any(|l| l.contains(&refusal) && l.contains(&needs) && l.contains(funcs[0].slot)),
        "no refusal line ('{refusal}', '{needs}') in dmesg\n{}",
        rep.context()
    );
    assert!(
        probe_lines(&out.dmesg, 0).is_empty(),
        "a refused device was probed\n{}",
        rep.context()
    );
}

/// Lab self-test: the `qpip-lab vm` command streams the guest command's output and exits
/// with its status (one guest, unprefixed output; without the lab network, as without
/// root — ci/tests/lab.rs covers the networked, several-guest command line).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn lab_propagates_the_guest_exit_status() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qpip-lab"))
        .args([
            "vm",
            "--devices",
            "0",
            "--no-net",
            "--",
            "echo",
            "hello from the guest;",
            "exit",
            "7",
        ])
        .output()
        .expect("run qpip-lab");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(7),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(stdout, "hello from the guest\n", "stderr:\n{stderr}");
}

/// Lab self-test: a kernel stack dump on the guest console fails the run, even though the
/// guest command succeeds. `sysrq l` makes the kernel dump the stack of every CPU: a real
/// "Call Trace:" from the real kernel, without a module written to misbehave.
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn lab_fails_a_run_with_a_kernel_trace() {
    let spec = VmSpec {
        devices: 0,
        ..VmSpec::new("echo l > /proc/sysrq-trigger; sleep 1; exit 0")
    };
    match run_vm(&spec) {
        Ok(out) => panic!(
            "a run with a kernel stack dump passed; console:\n{}\nrun folder: {}",
            out.console,
            out.run_dir.display()
        ),
        Err(e) if e.is_interrupted() => common::interrupted(&e),
        Err(e) => {
            let text = e.to_string();
            assert!(
                e.message.starts_with("kernel problem in the guest console"),
                "{text}"
            );
            assert!(
                text.contains("Call Trace:"),
                "the offending line is not shown: {text}"
            );
            assert!(
                text.contains("console.log"),
                "the console log is not named: {text}"
            );
            assert!(e.console_log().is_some_and(|c| c.exists()), "{text}");
        }
    }
}
