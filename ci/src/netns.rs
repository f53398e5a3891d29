//! The lab network: a network namespace with a bridge, the lab host's address on it, and a
//! TAP per guest port (each qpip device's link and each guest's virtio-net NIC).
//!
//! ```text
//!  namespace NAME (default qpip-lab)
//!  ┌─────────────────────────────────────────────────────────────┐
//!  │ bridge lab0  fd51:5050::1/80, 198.18.0.1/24  (the lab host)  │
//!  │   ├── TAP qpipd1 ◀── qpipd of guest 1 (fd51:5050::1:1)       │
//!  │   ├── TAP vnet1  ◀── QEMU of guest 1, virtio-net (::2:1)     │
//!  │   ├── TAP qpipd2 ...                                          │
//!  │ bridge far-br0  fd51:5050::1:0:0:fe/80, 198.18.1.254/24      │
//!  │   ├── veth lab-far (to the far host)                         │
//!  │   └── (a guest's virtio-net TAP, moved here by a test)       │
//!  └────┬────────────────────────────────────────────────────────┘
//!       │  the lab host routes (forwarding on, both families)
//!  namespace NAME-far: the far host, on a second subnet
//!  ┌────┴────────────────────────────────────────────────────────┐
//!  │ veth far0  fd51:5050::1:0:0:1/80, 198.18.1.1/24               │
//!  │ default routes via the lab host                              │
//!  └─────────────────────────────────────────────────────────────┘
//! ```
//!
//! **The far subnet.** Guests and devices reach the far host only through a gateway (the
//! lab host, [`HOST_ADDR`] and [`HOST_ADDR4`]): it is off their link, so a route is the
//! only way there. That is why the lab's on-link IPv6 prefix is a /80 ([`PREFIX_LEN`]):
//! both subnets stay inside the lab's `fd51:5050::/64`. The far subnet is a bridge of the
//! lab host's too (`far-br0`), so a test can move a guest's virtio-net TAP onto it
//! ([`LabNet::move_to_far`]) and have a Linux peer of its own (siw, say) off the qpip
//! devices' link: guest n's addresses there are [`far_virtio_addr`] and
//! [`far_virtio_addr4`].
//!
//! Every `qpipd` and QEMU of a networked run is started *inside* the namespace (setns in
//! the child before exec), so each opens its TAP by name there: qpipd attaches to the TAP
//! the lab created (its tap backend attaches to an existing interface), and QEMU's
//! `-netdev tap,ifname=...` likewise. Starting QEMU in the namespace is simpler than
//! opening the TAP in the lab and passing QEMU a descriptor: QEMU's other links (the
//! vfio-user sockets, the 9p folders) are files, which a network namespace does not affect.
//!
//! The TAPs are created by the lab (not by qpipd), so they can be put on the bridge before
//! the devices start, and so they have names the lab knows when it removes them.
//!
//! Interface names live in the namespace, so they are the same in every lab; namespaces
//! with different names never collide, which is how parallel test runs stay apart.
//!
//! **Ownership and stale namespaces.** The lab holds an exclusive `flock` on the
//! namespace's file (`/run/netns/NAME`) for as long as it uses the namespace; the kernel
//! drops it when the lab process ends, however it ends. A namespace that exists while
//! nobody holds its lock was left by a lab that was killed (SIGKILL gives it no chance to
//! clean up; its QEMU and qpipd die with it through PR_SET_PDEATHSIG): it is removed, with a
//! message. A namespace whose lock is held belongs to a running lab, and is left alone.
//! A short global lock (`/run/qpip-lab.lock`) makes "check, remove, create, lock" one step
//! among labs starting at the same time.
//!
//! **Addresses at once.** Duplicate address detection is off in the namespace (and in the
//! guests, see images/guest/init), and the bridge floods multicast (no MLD snooping: qpip
//! devices send no MLD reports), so neighbour discovery reaches every port and a new
//! address answers at once.
//!
//! **Stalled guests.** Under TCG on a loaded host a guest can get no CPU for many seconds.
//! Linux resolves a neighbour with 3 multicast solicitations 1 s apart, then drops the
//! packets that waited: a ping to a guest that stalled just then went unanswered (shown by
//! stopping a guest's QEMU for 8 s while the other pinged it). The namespace and the
//! guests send up to 30 solicitations instead, so resolution outlasts such a stall.

use crate::procs::run_sh;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The lab's prefix (docs/lab.md, "The lab network"): host `::1`, guest n's qpip device
/// `::1:n`, its virtio-net `::2:n`.
/// Multicast neighbour solicitations before an address counts as unreachable, on every
/// side of the lab network: the bridge (Linux), the guests' virtio-net (images/guest/init)
/// and the qpip devices (`qpipd --ndp-solicit`). A TCG guest can get no CPU for many
/// seconds on a loaded host, longer than the default 3 solicitations 1 s apart.
pub const NDP_SOLICITS: u32 = 30;

pub const PREFIX: &str = "fd51:5050::";
/// The on-link prefix length of the lab's IPv6 addresses: a /80, so the far subnet
/// ([`FAR_NET`]) is another /80 inside the same `fd51:5050::/64`.
pub const PREFIX_LEN: u8 = 80;
/// The far subnet, behind the lab host (IPv6).
pub const FAR_NET: &str = "fd51:5050:0:0:1::/80";
/// The far subnet, behind the lab host (IPv4).
pub const FAR_NET4: &str = "198.18.1.0/24";
/// The far host's address (IPv6), in its own namespace ([`LabNet::far_sh`]).
pub const FAR_HOST_ADDR: &str = "fd51:5050::1:0:0:1";
/// The far host's address (IPv4).
pub const FAR_HOST_ADDR4: &str = "198.18.1.1";
/// The lab host's address on the far subnet (IPv6), the far host's gateway.
const FAR_GATEWAY: &str = "fd51:5050::1:0:0:fe";
/// The lab host's address on the far subnet (IPv4).
const FAR_GATEWAY4: &str = "198.18.1.254";
/// `qpipd --route` arguments for a device on the lab network: the far subnet through the
/// lab host, both families.
pub fn far_routes() -> [String; 4] {
    [
        "--route".into(),
        format!("{FAR_NET} via {HOST_ADDR}"),
        "--route".into(),
        format!("{FAR_NET4} via {HOST_ADDR4}"),
    ]
}

/// The veth of the lab host on the far subnet, and its peer in the far namespace.
const FAR_LINK: &str = "lab-far";
const FAR_PEER: &str = "far0";
/// The lab host's bridge on the far subnet (the gateway's addresses are on it).
pub const FAR_BRIDGE: &str = "far-br0";
/// The lab host's (the gateway's) MAC on the far subnet.
const FAR_BRIDGE_MAC: &str = "02:51:50:00:01:fe";

/// Guest `n`'s virtio-net address once its TAP is on the far subnet ([`LabNet::move_to_far`]).
pub fn far_virtio_addr(n: usize) -> String {
    format!("fd51:5050::1:0:2:{n:x}")
}

/// As [`far_virtio_addr`], IPv4.
pub fn far_virtio_addr4(n: usize) -> String {
    assert!(
        (1..=MAX_GUESTS4).contains(&n),
        "guest {n} has no lab IPv4 address"
    );
    format!("198.18.1.{}", 200 + n)
}

/// The gateway of the far subnet's own hosts (the lab host there): IPv6, IPv4.
pub const FAR_GATEWAYS: (&str, &str) = (FAR_GATEWAY, FAR_GATEWAY4);
/// The lab host's address on the bridge.
pub const HOST_ADDR: &str = "fd51:5050::1";
/// The default namespace name (what users type after `ip netns exec`).
pub const DEFAULT_NETNS: &str = "qpip-lab";
/// The bridge inside the namespace.
pub const BRIDGE: &str = "lab0";

/// The lab host's MAC (the bridge's).
pub const BRIDGE_MAC: &str = "02:51:50:00:00:fe";

const NETNS_DIR: &str = "/run/netns";
const GLOBAL_LOCK: &str = "/run/qpip-lab.lock";

/// The lab host's IPv4 address on the bridge, in `198.18.0.0/24` (RFC 2544's benchmarking
/// range; only inside the lab's namespace): host `.1`, guest n's qpip device `.(100+n)`,
/// its virtio-net `.(200+n)`.
pub const HOST_ADDR4: &str = "198.18.0.1";
/// The lab's IPv4 prefix length.
pub const PREFIX4_LEN: u8 = 24;
/// Guests that have lab IPv4 addresses (`.(200+n)` must stay below the broadcast `.255`).
pub const MAX_GUESTS4: usize = 54;

/// Guest `n`'s qpip device IPv4 address (n from 1 to [`MAX_GUESTS4`]).
pub fn device_addr4(n: usize) -> String {
    assert!(
        (1..=MAX_GUESTS4).contains(&n),
        "guest {n} has no lab IPv4 address"
    );
    format!("198.18.0.{}", 100 + n)
}

/// Guest `n`'s virtio-net IPv4 address (n from 1 to [`MAX_GUESTS4`]).
pub fn virtio_addr4(n: usize) -> String {
    assert!(
        (1..=MAX_GUESTS4).contains(&n),
        "guest {n} has no lab IPv4 address"
    );
    format!("198.18.0.{}", 200 + n)
}

/// Guest `n`'s qpip device address (n from 1; IPv6 writes the group in hex).
pub fn device_addr(n: usize) -> String {
    format!("{PREFIX}1:{n:x}")
}

/// Guest `n`'s virtio-net address.
pub fn virtio_addr(n: usize) -> String {
    format!("{PREFIX}2:{n:x}")
}

/// The MAC of guest `n`'s qpip device on the lab bridge.
pub fn device_mac(n: usize) -> String {
    format!("02:51:50:01:{:02x}:{:02x}", n >> 8, n & 0xff)
}

/// The MAC of guest `n`'s virtio-net NIC.
pub fn virtio_mac(n: usize) -> String {
    format!("02:51:50:02:{:02x}:{:02x}", n >> 8, n & 0xff)
}

/// The TAP that carries guest `n`'s qpip device.
pub fn device_tap(n: usize) -> String {
    format!("qpipd{n}")
}

/// The TAP that carries the adapter qpipd's uplink (all guests' lab-network devices are
/// its functions; see [`crate::QpipdLayout::Adapter`]).
pub const ADAPTER_TAP: &str = "qpipd-up";

/// The TAP behind guest `n`'s virtio-net NIC.
pub fn virtio_tap(n: usize) -> String {
    format!("vnet{n}")
}

/// Why a lab network could not be made.
#[derive(Debug)]
pub enum NetError {
    /// This host or user cannot have one (not root, no `ip`): a fact, not a fault.
    Unavailable(String),
    /// Making it failed.
    Failed(String),
}

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetError::Unavailable(m) | NetError::Failed(m) => f.write_str(m),
        }
    }
}

/// Checks a namespace name: it becomes a file name under /run/netns and an argument of ip.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "namespace name '{name}' must be 1 to 64 letters, digits, '-', '_' or '.', not starting with '.' or '-'"
        ))
    }
}

/// A lab network namespace, removed (with all its interfaces) on [`LabNet::remove`] or drop.
pub struct LabNet {
    name: String,
    /// `/run/netns/NAME`, opened: the lock that says "in use", and the handle children
    /// enter the namespace with.
    ns: Option<File>,
    /// Interfaces created in the namespace, removed in reverse order.
    links: Vec<String>,
    /// The far host's namespace ([`far_name`]), once made.
    far: Option<File>,
}

impl LabNet {
    /// Creates namespace `name` with the bridge and the lab host's address. A stale
    /// namespace of that name (left by a killed lab) is removed first, with a message on
    /// the log; one in use by a running lab is an error.
    pub fn create(name: &str) -> Result<LabNet, NetError> {
        check_name(name).map_err(NetError::Failed)?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(NetError::Unavailable(
                "the lab network needs root (it makes a network namespace, a bridge and TAP interfaces)".into(),
            ));
        }
        if !ip_available() {
            return Err(NetError::Unavailable(
                "the lab network needs the 'ip' command (iproute2); ./qpip setup installs it"
                    .into(),
            ));
        }
        let global = lock_global().map_err(|e| {
            NetError::Failed(format!("cannot take the lab lock {GLOBAL_LOCK}: {e}"))
        })?;
        let path = ns_path(name);
        if path.exists() {
            remove_stale(name, &path)?;
        }
        let far = far_name(name);
        if ns_path(&far).exists() {
            // A far namespace without its lab namespace: left by a lab that was killed
            // between making the two.
            eprintln!("qpip-lab: removing network namespace {far}, left behind by a lab run that was killed");
            ip(&["netns", "del", &far]).map_err(NetError::Failed)?;
        }
        ip(&["netns", "add", name]).map_err(NetError::Failed)?;
        let ns = File::open(&path).map_err(|e| {
            let _ = ip(&["netns", "del", name]);
            NetError::Failed(format!("cannot open {}: {e}", path.display()))
        })?;
        // Nobody else can hold it: the global lock is ours and the namespace is new.
        if let Err(e) = flock(&ns, libc::LOCK_EX | libc::LOCK_NB) {
            let _ = ip(&["netns", "del", name]);
            return Err(NetError::Failed(format!(
                "cannot lock {}: {e}",
                path.display()
            )));
        }
        drop(global);
        let mut net = LabNet {
            name: name.to_string(),
            ns: Some(ns),
            links: Vec::new(),
            far: None,
        };
        net.build().map_err(NetError::Failed)?;
        log::info!(
            "lab network: namespace {name}, bridge {BRIDGE}, host {HOST_ADDR}/{PREFIX_LEN}; far host {FAR_HOST_ADDR} in {} (ip netns exec NAME ...)",
            far_name(name)
        );
        Ok(net)
    }

    fn build(&mut self) -> Result<(), String> {
        // DAD off before any interface exists, so the bridge inherits it from "default".
        self.sh("echo 0 >/proc/sys/net/ipv6/conf/all/accept_dad && \
             echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad")?;
        let n = self.name.clone();
        ip(&["-n", &n, "link", "set", "lo", "up"])?;
        self.add_bridge(BRIDGE, BRIDGE_MAC)?;
        ip(&[
            "-n",
            &n,
            "-6",
            "addr",
            "add",
            &format!("{HOST_ADDR}/{PREFIX_LEN}"),
            "dev",
            BRIDGE,
            "nodad",
        ])?;
        ip(&[
            "-n",
            &n,
            "-4",
            "addr",
            "add",
            &format!("{HOST_ADDR4}/{PREFIX4_LEN}"),
            "dev",
            BRIDGE,
        ])?;
        // Neighbour discovery (and ARP) that outlasts a stalled guest (as in the guests'
        // init): a TCG guest can get no CPU for many seconds on a loaded host, longer than
        // Linux's 3 solicitations 1 s apart, after which what waited is dropped. (A
        // namespace other than the first has no neigh/default to set beforehand.)
        self.sh(&format!(
            "echo {NDP_SOLICITS} >/proc/sys/net/ipv6/neigh/{BRIDGE}/mcast_solicit && \
             echo {NDP_SOLICITS} >/proc/sys/net/ipv4/neigh/{BRIDGE}/mcast_solicit"
        ))?;
        ip(&["-n", &n, "link", "set", BRIDGE, "up"])?;
        self.build_far()
    }

    /// Creates bridge `name` in the namespace (down). No STP (ports forward at once) and no
    /// multicast snooping (neighbour solicitations go to every port, whoever sent MLD
    /// reports). A fixed MAC: a bridge without one takes its ports' lowest, which changes
    /// as TAPs come and go.
    fn add_bridge(&mut self, name: &str, mac: &str) -> Result<(), String> {
        let n = self.name.clone();
        ip(&[
            "-n",
            &n,
            "link",
            "add",
            name,
            "address",
            mac,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
            "mcast_snooping",
            "0",
        ])?;
        self.links.push(name.into());
        Ok(())
    }

    /// The far subnet: the far host's namespace, a veth pair to it, and the lab host
    /// routing between the bridge and it.
    fn build_far(&mut self) -> Result<(), String> {
        let n = self.name.clone();
        let far = far_name(&n);
        ip(&["netns", "add", &far])?;
        let f = File::open(ns_path(&far));
        let f = f.map_err(|e| {
            let _ = ip(&["netns", "del", &far]);
            format!("cannot open {}: {e}", ns_path(&far).display())
        })?;
        self.far = Some(f);
        let sh_far = |script: &str| self.far_sh(script);
        sh_far(
            "echo 0 >/proc/sys/net/ipv6/conf/all/accept_dad && \
                echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad",
        )?;
        // A bridge as the lab's, with the veth to the far host as its first port.
        self.add_bridge(FAR_BRIDGE, FAR_BRIDGE_MAC)?;
        ip(&[
            "-n", &n, "link", "add", FAR_LINK, "type", "veth", "peer", "name", FAR_PEER, "netns",
            &far,
        ])?;
        self.links.push(FAR_LINK.into());
        ip(&[
            "-n", &n, "link", "set", FAR_LINK, "master", FAR_BRIDGE, "up",
        ])?;
        let g6 = format!("{FAR_GATEWAY}/{PREFIX_LEN}");
        let g4 = format!("{FAR_GATEWAY4}/24");
        ip(&[
            "-n", &n, "-6", "addr", "add", &g6, "dev", FAR_BRIDGE, "nodad",
        ])?;
        ip(&["-n", &n, "-4", "addr", "add", &g4, "dev", FAR_BRIDGE])?;
        self.sh(&format!(
            "echo {NDP_SOLICITS} >/proc/sys/net/ipv6/neigh/{FAR_BRIDGE}/mcast_solicit && \
             echo {NDP_SOLICITS} >/proc/sys/net/ipv4/neigh/{FAR_BRIDGE}/mcast_solicit"
        ))?;
        ip(&["-n", &n, "link", "set", FAR_BRIDGE, "up"])?;
        let h6 = format!("{FAR_HOST_ADDR}/{PREFIX_LEN}");
        let h4 = format!("{FAR_HOST_ADDR4}/24");
        ip(&["-n", &far, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", &far, "-6", "addr", "add", &h6, "dev", FAR_PEER, "nodad",
        ])?;
        ip(&["-n", &far, "-4", "addr", "add", &h4, "dev", FAR_PEER])?;
        ip(&["-n", &far, "link", "set", FAR_PEER, "up"])?;
        ip(&[
            "-n",
            &far,
            "-6",
            "route",
            "add",
            "default",
            "via",
            FAR_GATEWAY,
        ])?;
        ip(&[
            "-n",
            &far,
            "-4",
            "route",
            "add",
            "default",
            "via",
            FAR_GATEWAY4,
        ])?;
        self.sh("echo 1 >/proc/sys/net/ipv4/ip_forward && \
                 echo 1 >/proc/sys/net/ipv6/conf/all/forwarding")?;
        Ok(())
    }

    /// Runs `script` with `sh -c` in the far host's namespace; an error holds its output.
    pub fn far_sh(&self, script: &str) -> Result<String, String> {
        let far = far_name(&self.name);
        let (status, text) = run_sh(self.far_command("sh"), script)
            .map_err(|e| format!("cannot run sh in namespace {far}: {e}"))?;
        if status.success() {
            Ok(text)
        } else {
            Err(format!(
                "in namespace {far}: `{script}` failed ({status}): {}",
                text.trim()
            ))
        }
    }

    /// A command that runs in the far host's namespace.
    pub fn far_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        let fd = self
            .far
            .as_ref()
            .expect("far namespace is open")
            .as_raw_fd();
        // SAFETY: as in `enter`: setns is async-signal-safe, and the descriptor stays open
        // in the parent until the child has exec'd.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Creates TAP `tap` in the namespace, on the bridge, up. It has no carrier until a
    /// process (qpipd, QEMU) attaches to it.
    pub fn add_tap(&mut self, tap: &str) -> Result<(), String> {
        let n = self.name.clone();
        ip(&["-n", &n, "tuntap", "add", "dev", tap, "mode", "tap"])?;
        self.links.push(tap.into());
        ip(&["-n", &n, "link", "set", tap, "master", BRIDGE, "up"])?;
        Ok(())
    }

    /// Moves TAP `tap` (a guest's virtio-net NIC) from the lab's bridge to the far
    /// subnet's: from then on the guest reaches the lab network only through the lab host,
    /// once it has taken far-subnet addresses ([`far_virtio_addr`]) and routes
    /// ([`FAR_GATEWAYS`]).
    pub fn move_to_far(&self, tap: &str) -> Result<(), String> {
        if !self.links.iter().any(|l| l == tap) {
            return Err(format!("no TAP {tap} in lab namespace {}", self.name));
        }
        ip(&["-n", &self.name, "link", "set", tap, "master", FAR_BRIDGE])
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interfaces the lab made in the namespace (the bridge, then the TAPs).
    pub fn links(&self) -> &[String] {
        &self.links
    }

    /// Makes `cmd` run inside the namespace: the child enters it before exec.
    pub fn enter(&self, cmd: &mut Command) {
        let fd = self.ns.as_ref().expect("namespace is open").as_raw_fd();
        // SAFETY: setns is async-signal-safe; `fd` stays open in the parent (which owns
        // it) until after the child has exec'd, and is inherited across fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// A command that runs inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.enter(&mut cmd);
        cmd
    }

    /// Runs `f` on a thread of its own that has entered the namespace (sockets it opens
    /// are in the namespace), and returns what it returns.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        run_in_ns(self.ns.as_ref().expect("namespace is open"), f)
    }

    /// As [`LabNet::run_in`], in the far host's namespace.
    pub fn run_in_far<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        run_in_ns(self.far.as_ref().expect("far namespace is open"), f)
    }

    /// Runs `script` with `sh -c` in the namespace; an error holds its output.
    pub fn sh(&self, script: &str) -> Result<String, String> {
        let (status, text) = run_sh(self.command("sh"), script)
            .map_err(|e| format!("cannot run sh in namespace {}: {e}", self.name))?;
        if status.success() {
            Ok(text)
        } else {
            Err(format!(
                "in namespace {}: `{script}` failed ({status}): {}",
                self.name,
                text.trim()
            ))
        }
    }

    /// Removes the interfaces and the namespace. Every process started in it must have
    /// been stopped first (a process in the namespace keeps it alive, unnamed).
    pub fn remove(&mut self) -> Result<(), String> {
        let Some(ns) = self.ns.take() else {
            return Ok(());
        };
        let mut errors = Vec::new();
        for link in self.links.drain(..).rev() {
            if let Err(e) = ip(&["-n", &self.name, "link", "del", &link]) {
                errors.push(e);
            }
        }
        if self.far.take().is_some() {
            if let Err(e) = ip(&["netns", "del", &far_name(&self.name)]) {
                errors.push(e);
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            errors.push(e);
        }
        // Closing the file drops the lock; the namespace is already gone.
        drop(ns);
        if errors.is_empty() {
            log::info!("lab network: namespace {} removed", self.name);
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Drop for LabNet {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            log::warn!("removing the lab network {}: {e}", self.name);
        }
    }
}

/// Runs `f` on a thread of its own that has entered namespace `ns` (an open
/// `/run/netns/NAME`), and returns what it returns.
fn run_in_ns<T: Send>(ns: &File, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let fd = ns.as_raw_fd();
    std::thread::scope(|s| {
        let t = s.spawn(move || {
            // SAFETY: setns on a descriptor this LabNet keeps open; a network namespace
            // can be entered by one thread of a multithreaded process.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        });
        t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The far host's namespace of lab namespace `name`.
pub fn far_name(name: &str) -> String {
    format!("{name}-far")
}

/// `/run/netns/NAME`.
pub fn ns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

fn remove_stale(name: &str, path: &Path) -> Result<(), NetError> {
    let f = File::open(path)
        .map_err(|e| NetError::Failed(format!("cannot open {}: {e}", path.display())))?;
    if flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return Err(NetError::Failed(format!(
            "network namespace {name} is in use by another running lab; give this one another name (--netns NAME)"
        )));
    }
    let pids = Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if !pids.is_empty() {
        return Err(NetError::Failed(format!(
            "network namespace {name} exists without a lab using it, but processes {} run in it; \
             stop them or remove it (ip netns del {name}), or give the lab another name (--netns NAME)",
            pids.join(" ")
        )));
    }
    eprintln!(
        "qpip-lab: removing network namespace {name}, left behind by a lab run that was killed"
    );
    // Its interfaces go with it: TAPs and bridges are deleted when their namespace is.
    if ns_path(&far_name(name)).exists() {
        ip(&["netns", "del", &far_name(name)]).map_err(NetError::Failed)?;
    }
    ip(&["netns", "del", name]).map_err(NetError::Failed)?;
    Ok(())
}

fn lock_global() -> io::Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(GLOBAL_LOCK)?;
    flock(&f, libc::LOCK_EX)?;
    Ok(f)
}

fn flock(f: &File, how: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), how) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn ip_available() -> bool {
    Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `ip ARGS`; an error names the command and holds ip's message.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_the_lab_plan() {
        assert_eq!(device_addr(1), "fd51:5050::1:1");
        assert_eq!(virtio_addr(2), "fd51:5050::2:2");
        assert_eq!(device_addr(10), "fd51:5050::1:a");
        assert_eq!(device_addr4(1), "198.18.0.101");
        assert_eq!(virtio_addr4(54), "198.18.0.254");
        assert_eq!(device_mac(1), "02:51:50:01:00:01");
        assert_eq!(virtio_mac(300), "02:51:50:02:01:2c");
        assert!(device_tap(99).len() < 16 && virtio_tap(99).len() < 16);
        assert!(ADAPTER_TAP.len() < 16 && ADAPTER_TAP != device_tap(0));
        assert!(FAR_BRIDGE.len() < 16);
    }

    #[test]
    fn far_virtio_addresses_are_on_the_far_subnet() {
        let net: std::net::Ipv6Addr = FAR_NET.split('/').next().unwrap().parse().unwrap();
        for n in [1, 2, 54] {
            let a: std::net::Ipv6Addr = far_virtio_addr(n).parse().unwrap();
            // The same first 80 bits as the far subnet, and no other lab address.
            assert_eq!(a.segments()[..5], net.segments()[..5], "{a}");
            assert_ne!(a.to_string(), FAR_HOST_ADDR);
            assert_ne!(a.to_string(), FAR_GATEWAY);
        }
        assert_eq!(far_virtio_addr(2), "fd51:5050::1:0:2:2");
        assert_eq!(far_virtio_addr4(2), "198.18.1.202");
    }

    #[test]
    fn namespace_names_are_checked() {
        assert!(check_name("qpip-lab").is_ok());
        assert!(check_name("qpip-lab-1234-0").is_ok());
        for bad in ["", "a/b", "-x", ".x", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
