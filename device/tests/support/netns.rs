//! Network namespaces for the tests against the Linux kernel: each test makes its own,
//! does its work inside, and the namespace (with every interface in it) is removed when the
//! guard drops, also when the test fails. Needs root; `root_and_tools` says what is missing.
#![allow(dead_code)] // each test file uses its own part

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this machine can run `what` (root, `ip`, /dev/net/tun); prints why not.
pub fn root_and_tools(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("{what} SKIPPED: needs root (network namespaces, TAP); CI runs it as root");
        return false;
    }
    if !have("ip") {
        println!("{what} SKIPPED: no `ip` (install iproute2)");
        return false;
    }
    if !Path::new("/dev/net/tun").exists() {
        println!("{what} SKIPPED: no /dev/net/tun");
        return false;
    }
    true
}

/// Runs `cmd`, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace, removed (with everything in it) when dropped.
pub struct Netns {
    pub name: String,
    /// Links deleted before the namespace (a TAP the test process holds open would
    /// otherwise keep the namespace alive).
    links: std::sync::Mutex<Vec<String>>,
}

impl Netns {
    /// A fresh namespace named `<prefix>-<pid>-<n>`, with its loopback up.
    pub fn new(prefix: &str) -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns {
            name,
            links: Default::default(),
        };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Deletes link `dev` of the namespace before the namespace itself, on drop.
    pub fn owns_link(&self, dev: &str) {
        self.links.lock().unwrap().push(dev.to_string());
    }

    /// Adds a TAP `dev` in the namespace, up, with `addr/64` (no DAD) on the host side.
    pub fn add_tap(&self, dev: &str, addr: &str) {
        self.owns_link(dev);
        self.ip(&["tuntap", "add", "dev", dev, "mode", "tap"]);
        self.ip(&["link", "set", dev, "up"]);
        self.ip(&["addr", "add", &format!("{addr}/64"), "dev", dev, "nodad"]);
    }

    /// `ip -n NS ARGS...`, which must succeed.
    pub fn ip(&self, args: &[&str]) -> Output {
        run(Command::new("ip").args(["-n", &self.name]).args(args))
    }

    /// `ip netns exec NS ARGS...`, whatever its status.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// Runs `f` on a new thread that has entered the namespace (sockets and TAPs opened
    /// there belong to it, and can then be used from any thread).
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.join_this_thread();
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }

    /// Runs `f` on this thread inside the namespace, then returns to the thread's own.
    /// Threads started meanwhile stay in the namespace.
    pub fn within<T>(&self, f: impl FnOnce() -> T) -> T {
        let own = std::fs::File::open("/proc/thread-self/ns/net").expect("own namespace");
        self.join_this_thread();
        let r = f();
        // SAFETY: setns on a namespace fd, for this thread only.
        assert_eq!(
            unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        r
    }

    fn join_this_thread(&self) {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("namespace file");
        // SAFETY: setns on a namespace fd, for this thread only.
        let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for dev in self.links.lock().unwrap().iter() {
            let _ = Command::new("ip")
                .args(["-n", &self.name, "link", "del", dev])
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// tshark arguments that decode every TCP and UDP payload as plain data: the tests'
/// payloads are random bytes, which tshark's heuristic dissectors may take for an
/// application protocol (seen: Thrift) and then call malformed — a finding about tshark's
/// guess, not about the frame. The checks that matter (IPv6, TCP, UDP, checksums) stay on.
pub fn tshark_plain_payloads() -> [&'static str; 4] {
    [
        "-d",
        "tcp.port==1-65535,data",
        "-d",
        "udp.port==1-65535,data",
    ]
}
