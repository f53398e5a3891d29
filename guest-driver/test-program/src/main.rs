//! `qpip-driver-test`: exercises the guest driver's whole interface from user space, the way
//! the verbs library will use it: ioctls on `/dev/qpipN`, mmap of the doorbell page, the kick
//! page and the rings, WQEs and CQEs written and read directly, doorbells rung with the
//! sleep/kick protocol, eventfds for blocking waits, events read from the file.
//!
//! It reports facts as `@key=value` lines (the VM tests in `ci/tests/driver.rs` assert on
//! them) and exits 1 when any check failed. Subcommands:
//!
//! * `ioctls`     every ioctl with good and bad arguments, mmap rules, events, limits
//! * `isolation`  two processes: handles and offsets of one are nothing to the other, and
//!   both move traffic at once, each in its own context
//! * `churn [P [R]]` P processes creating and destroying objects R times each, at once
//! * `udp [N]`    N datagrams between two UDP QPs through the rings, then a blocking wait
//! * `traffic S`  UDP traffic in a loop for up to S seconds (to be killed in the middle)
//! * `reset [pci]` resets the device under an open context (the driver's sysfs reset, or
//!   with `pci` the PCI core's function reset): its calls fail with ENODEV
//! * `remove`     removes the PCI function under an open context, then rescans
//! * `events`     asynchronous events: a TCP QP pair over the device's own address; the
//!   peer destroyed (QP error, connection reset) and a graceful close (peer closed) reach
//!   the survivor's context and no other process's
//! * `events-lost [N]` N (more than the driver's 128) QP errors queued unread on one file:
//!   it reads 128 of them and one EVENT_LOST with the rest's count; other files hear nothing
//! * `iwarp [N]`  iWARP QPs over the device's loopback: remote rights of REG_MR, private
//!   data, IRD, ORD and flags of ACCEPT and CONNECT, QUERY_CONN, their errors, callers of
//!   the first version; then N connections with private data must not grow the slab
//! * `tripwire`   CREATE_TRIPWIRE and DESTROY_TRIPWIRE: another file's CQ or regions
//!   refused, what the device refuses, the CQ and regions busy while one lives, and a
//!   file's tripwires destroyed when it is closed
//! * `users`      (as root) per-user quotas met by ordinary users (EDQUOT), another user
//!   not starved, a killed process's quota free again; ports below 1024 privileged
//! * `timeout`    a TCP QP whose peer vanishes (the device address it uses is deleted under
//!   it, qpipd started with a small `--tcp-retries`): EVENT_QP_ERROR with -ETIMEDOUT, its
//!   send flushed

// Where things are: `sys` wraps the system calls, `ctx` drives a context (rings, doorbells,
// CQEs), and the other modules are the subcommands. Every module starts with
// `use crate::*`: the imports below and each module's items are shared by all.
mod ctx;
mod events;
mod ioctls;
mod isolation;
mod iwarp;
mod reset;
mod sys;
mod traffic;
mod tripwire;
mod users;

use std::ffi::CString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use qpip_abi::admin::{
    FRAMING_MESSAGE, MR_ACCESS_LOCAL_WRITE, QP_OPT_KEEPALIVE, QP_TYPE_TCP, QP_TYPE_UDP,
    STAT_ADMIN_COMMANDS, STAT_ASYNC_EVENTS, STAT_ASYNC_EVENTS_LOST, STAT_TCP_RTO_TIMEOUTS,
    STAT_TCP_TIMEOUTS,
};
use qpip_abi::cqe::{
    Cqe, CQE_OP_RECV, CQE_OP_SEND, CQE_SIZE, CQE_STATUS_FLUSHED, CQE_STATUS_SUCCESS,
};
use qpip_abi::doorbell::{self, DB_CHANGE_COUNT, DB_ENGINE_SLEEPING, DB_QP_BASE};
use qpip_abi::regs::KICK;
use qpip_abi::uapi::*;
use qpip_abi::wqe::{
    Sge, Wqe, WQE_FLAG_INLINE, WQE_OP_RECV, WQE_OP_SEND, WQE_SGE_OFFSET, WQE_SIZE,
};
use qpip_abi::ABI_VERSION_MAJOR;

use ctx::*;
use events::*;
use ioctls::*;
use isolation::*;
use iwarp::*;
use reset::*;
use sys::*;
use traffic::*;
use tripwire::*;
use users::*;

const DEV: &str = "/dev/qpip0";
const SYSFS: &str = "/sys/class/qpip/qpip0";
const PAGE: usize = 4096;
const LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Longest any single wait may take (a TCG guest on a busy host is slow).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Named checks, each reported as `@check.NAME=ok` or `@check.NAME=FAIL: why`.
#[derive(Default)]
struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, r: Result<(), String>) {
        match r {
            Ok(()) => println!("@check.{name}=ok"),
            Err(why) => {
                self.failed += 1;
                println!("@check.{name}=FAIL: {why}");
            }
        }
    }
}

/// Ok when `r` failed with exactly `want`.
fn fails_with<T: std::fmt::Debug>(r: Result<T, i32>, want: i32) -> Result<(), String> {
    match r {
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!("expected {}, got {}", errname(want), errname(e))),
        Ok(v) => Err(format!(
            "expected {}, but it succeeded ({v:?})",
            errname(want)
        )),
    }
}

fn ok<T>(r: Result<T, i32>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {}", errname(e)))
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

const USAGE: &str = "usage: qpip-driver-test ioctls | isolation | udp [N] | traffic SECONDS | reset [pci] | remove | events | events-lost [N] | iwarp [N] | tripwire | users | timeout | kicks N [--wait] [--gap-us US]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let failed = match args.first().map(String::as_str) {
        Some("ioctls") => cmd_ioctls(),
        Some("isolation") => cmd_isolation(),
        Some("churn") => cmd_churn(num(1, 6), num(2, 30)),
        Some("udp") => cmd_udp(num(1, 20)),
        Some("traffic") => cmd_traffic(num(1, 60)),
        Some("reset") => cmd_reset(args.get(1).is_some_and(|a| a == "pci")),
        Some("remove") => cmd_remove(),
        Some("events") => cmd_events(),
        Some("events-lost") => cmd_events_lost(num(1, 140)),
        Some("iwarp") => cmd_iwarp(num(1, 200)),
        Some("tripwire") => cmd_tripwire(),
        Some("users") => cmd_users(),
        Some("timeout") => cmd_timeout(),
        Some("kicks") => cmd_kicks(
            num(1, 1000),
            args.iter().any(|a| a == "--wait"),
            args.iter()
                .position(|a| a == "--gap-us")
                .map_or(0, |i| num(i + 1, 0)),
        ),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    println!("@failed={failed}");
    flush();
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
