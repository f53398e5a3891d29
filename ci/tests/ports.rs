//! VM test of the port split between the guest kernel's sockets and the device's QPs: the
//! driver reserves every port a QP or listener takes with a kernel socket
//! (`guest-driver/qpip_ports.c`), so a port is never both. `qpip-driver-test ports` does
//! both sides in the guest (std sockets for the kernel's) and reports each check.
//!
//! Boots a guest, so it is ignored by a plain `cargo test` and run with `-- --ignored`.

mod common;

use common::Report;
use qpip_lab::VmSpec;

/// A kernel socket's port refused to BIND and LISTEN; a QP's (named, ephemeral, from a
/// CONNECT) and a listener's refused to kernel sockets on IPv6 and IPv4, and the kernel's
/// again once the QP, the listener, the file or the process is gone, or the device is
/// reset or removed under the open file (then rescanned).
#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn a_port_is_a_kernel_sockets_or_a_qps_never_both() {
    let out = common::boot(&VmSpec::new(common::script(
        "",
        r#"
kv before.contexts "$(cat /sys/class/qpip/qpip0/contexts)"
qpip-driver-test ports; kv ports.status $?
kv after.contexts "$(cat /sys/class/qpip/qpip0/contexts)"
"#,
    )));
    let rep = Report::succeeded(&out);
    rep.statuses_zero("qpip-driver-test", &["ports"]);
    let mut checks: Vec<String> = ["udp", "tcp"]
        .iter()
        .flat_map(|p| {
            [
                "kernel_holds_bind_refused",
                "qp_bind_refuses_kernel",
                "ephemeral_refused_to_kernel",
            ]
            .map(|c| format!("ports.{p}.{c}"))
        })
        .collect();
    checks.extend(
        [
            "ports.listen.kernel_holds_refused",
            "ports.listen.refuses_kernel_until_destroyed",
            "ports.connect.ephemeral_refused_to_kernel",
            "ports.context_close_releases",
            "ports.process_exit_releases",
            "ports.reset_releases",
            "ports.remove_releases",
        ]
        .map(String::from),
    );
    let refs: Vec<&str> = checks.iter().map(String::as_str).collect();
    rep.checks_pass(&refs);
    assert_eq!(
        rep.get("after.contexts"),
        rep.get("before.contexts"),
        "every context of the test closed{}",
        rep.context()
    );
}
