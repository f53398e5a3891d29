//! A lab: several guests at once, on the lab network, with host-side work done in the
//! lab's namespace while they are up.
//!
//! ```no_run
//! use qpip_lab::{run_lab, GuestSpec, LabSpec, Network, QpipdLayout, VmSpec};
//! let spec = LabSpec {
//!     guests: vec![
//!         GuestSpec::new("a", VmSpec::new("ping -c 1 $QPIP_HOST_ADDR")),
//!         GuestSpec::new("b", VmSpec::new("lab-wait host-done 60")),
//!     ],
//!     network: Network::Lab("qpip-lab-example".into()),
//!     layout: QpipdLayout::Adapter,
//! };
//! let out = run_lab(&spec, &mut |_, _, _| {}, |host| {
//!     // Runs once every guest is up; guest b waits for it to return.
//!     host.sh("ping -6 -c 1 fd51:5050::1:2")
//! })
//! .unwrap();
//! assert_eq!(out.guest("a").status, 0);
//! ```
//!
//! A lab run is: a run folder `runs/<time>-<pid>-<n>/` with `shared/` (seen by every guest
//! at `/lab`) and one folder per guest named after it (as a single run's folder); the lab
//! network when asked for (see [`crate::netns`]); with it, in the default layout, the
//! adapter qpipd that serves every guest's device 0 (see [`crate::adapter`]; its log is
//! `qpipd-adapter.log` in the run folder); every guest started (its own devices, then
//! QEMU); the host closure started on its own thread once every guest has reported ready
//! (its init is about to run the command); when the closure returns, the lab writes
//! `shared/host-done`, so guest commands can wait for it (`lab-wait host-done`). The run
//! ends when every guest has powered off and the closure has returned; then the lab stops
//! the adapter (SIGTERM) and checks it ended from that signal and left no socket.
//!
//! A guest that fails (a lab failure, not a non-zero exit status of its command) stops the
//! others at once, as does a panic in the closure (re-raised once everything is stopped)
//! and Ctrl-C. Whatever the way out, every process is stopped and the namespace removed
//! before `run_lab` returns.

use crate::adapter::{adapter_args, Adapter, QpipdLayout};
use crate::netns::{self, LabNet, NetError};
use crate::procs::run_sh;
use crate::vm::{
    check_prerequisites, make_run_dir, LabError, Run, VmOutcome, VmSpec, Wiring, POLL,
};
use crate::Stream;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One guest of a lab: its name (hostname, run folder, output prefix) and what to run.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    pub name: String,
    pub vm: VmSpec,
    /// Device 0 on the lab network routes the far subnet through the lab host from the
    /// start (`qpipd --route`, see [`netns::far_routes`]); true unless a test routes it
    /// itself ([`GuestSpec::without_far_routes`]). In the adapter layout the routes are the
    /// adapter's, for every function: the guests with a device must all agree.
    pub far_routes: bool,
}

impl GuestSpec {
    pub fn new(name: impl Into<String>, vm: VmSpec) -> GuestSpec {
        GuestSpec {
            name: name.into(),
            vm,
            far_routes: true,
        }
    }

    /// Device 0 starts without the far subnet's routes: the guest gives it routes itself.
    pub fn without_far_routes(mut self) -> GuestSpec {
        self.far_routes = false;
        self
    }
}

/// The link between the guests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// None: each device reaches only itself (unless its qpipd arguments give it a link).
    Off,
    /// The lab network in the namespace of this name; a run fails if it cannot be made.
    Lab(String),
    /// The lab network if this host allows it (root); else, with a note on stderr, none.
    LabIfAvailable(String),
}

/// What a lab runs.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// The guests, numbered from 1 in this order (guest n has the lab addresses
    /// `fd51:5050::1:n` and `::2:n`).
    pub guests: Vec<GuestSpec>,
    pub network: Network,
    /// Where the guests' qpip devices live: one adapter qpipd for all lab-network devices
    /// (the default), or one qpipd per device. Without the lab network, always per device.
    pub layout: QpipdLayout,
}

/// The name of guest `n` (from 1): `a`, `b`, ... `z`, then `g27`, ...
pub fn guest_name(n: usize) -> String {
    if (1..=26).contains(&n) {
        char::from(b'a' + (n - 1) as u8).to_string()
    } else {
        format!("g{n}")
    }
}

/// A namespace name no other lab of this machine uses at the same time (for tests, which
/// run in parallel): `PREFIX-<pid>-<counter>`.
pub fn unique_netns(prefix: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// What the host closure of [`run_lab`] gets: the namespace and the shared folder.
pub struct LabHost<'a> {
    net: Option<&'a LabNet>,
    shared: &'a Path,
    guests: Vec<String>,
    /// By guest: the pids of its QEMU, then of its own devices' qpipd.
    pids: Vec<Vec<u32>>,
    /// The adapter qpipd's pid, in the adapter layout.
    adapter: Option<u32>,
    /// Set when the lab is ending early (a guest failed, Ctrl-C): waits give up.
    ending: &'a AtomicBool,
    /// Commands and sockets go to the far host's namespace ([`LabHost::far`]).
    far: bool,
}

impl LabHost<'_> {
    /// The lab's namespace, if it has the lab network.
    pub fn netns(&self) -> Option<&str> {
        self.net.map(LabNet::name)
    }

    /// The guests' names, in order (guest n is `guests()[n - 1]`).
    pub fn guests(&self) -> &[String] {
        &self.guests
    }

    /// The pids of guest `i`'s processes (`i` indexes [`LabHost::guests`]): its QEMU, then
    /// each of its own devices' qpipd (not the adapter's, see [`LabHost::adapter_pid`]).
    pub fn pids(&self, i: usize) -> &[u32] {
        self.pids.get(i).map_or(&[], Vec::as_slice)
    }

    /// The pid of the adapter qpipd that serves every guest's device 0, in the adapter
    /// layout.
    pub fn adapter_pid(&self) -> Option<u32> {
        self.adapter
    }

    /// True once the lab is ending early (a guest failed, Ctrl-C): a host side that waits
    /// for the guests should give up.
    pub fn ending(&self) -> bool {
        self.ending.load(Ordering::SeqCst)
    }

    /// The far host: the same lab seen from the far subnet's namespace, behind the lab
    /// host (see [`crate::netns`]): its commands and sockets run there. Without a lab
    /// network, the same as this one.
    pub fn far(&self) -> LabHost<'_> {
        LabHost {
            net: self.net,
            shared: self.shared,
            guests: self.guests.clone(),
            pids: self.pids.clone(),
            adapter: self.adapter,
            ending: self.ending,
            far: true,
        }
    }

    /// Moves guest `n`'s virtio-net NIC (its TAP) onto the far subnet's bridge: the guest
    /// then reaches the lab network through the lab host only, once it has given the NIC
    /// its far-subnet addresses and routes (see [`crate::netns::LabNet::move_to_far`]).
    pub fn move_virtio_to_far(&self, n: usize) -> Result<(), String> {
        let net = self.net.ok_or("no lab network: no far subnet")?;
        net.move_to_far(&netns::virtio_tap(n))
    }

    /// A command that runs in the lab's namespace (or plainly, without a lab network).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self.net {
            Some(net) if self.far => net.far_command(program),
            Some(net) => net.command(program),
            None => Command::new(program),
        }
    }

    /// Runs `script` with `sh -c` in the lab's namespace; Ok holds stdout and stderr,
    /// Err also says how it failed.
    pub fn sh(&self, script: &str) -> Result<String, String> {
        let (status, text) =
            run_sh(self.command("sh"), script).map_err(|e| format!("cannot run sh: {e}"))?;
        if status.success() {
            Ok(text)
        } else {
            Err(format!("`{script}` failed ({status}):\n{text}"))
        }
    }

    /// Runs `f` on a thread inside the lab's namespace (or plainly, without a lab
    /// network): Rust sockets opened there talk to the guests.
    pub fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        match self.net {
            Some(net) if self.far => net.run_in_far(f),
            Some(net) => net.run_in(f),
            None => Ok(f()),
        }
    }

    /// The folder every guest sees at `/lab`.
    pub fn shared_dir(&self) -> &Path {
        self.shared
    }

    /// Creates `/lab/NAME` for the guests (`lab-wait NAME` in a guest waits for it).
    pub fn signal(&self, name: &str) -> std::io::Result<()> {
        fs::write(self.shared.join(name), b"")
    }

    /// Waits until a guest has created `/lab/NAME` (`touch /lab/NAME`), up to `limit`;
    /// gives up early when the lab is ending.
    pub fn wait_for(&self, name: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if self.shared.join(name).exists() {
                return Ok(());
            }
            if self.ending.load(Ordering::SeqCst) {
                return Err(format!("the lab ended before a guest created /lab/{name}"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no guest created /lab/{name} within {} s",
                    limit.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A lab run in which every guest reported an exit status and no check failed.
#[derive(Debug)]
pub struct LabOutcome<R> {
    /// By guest, in the order of the spec.
    pub guests: Vec<VmOutcome>,
    /// What the host closure returned.
    pub host: R,
    /// The lab network's namespace, if there was one (removed by now).
    pub netns: Option<String>,
    /// The interfaces the lab made in it (removed by now).
    pub links: Vec<String>,
    /// Every process the lab started (QEMU and qpipd of each guest, the adapter qpipd; all
    /// stopped by now).
    pub pids: Vec<u32>,
    /// The lab's run folder.
    pub dir: PathBuf,
}

impl<R> LabOutcome<R> {
    /// The outcome of the guest called `name`.
    pub fn guest(&self, name: &str) -> &VmOutcome {
        self.guests
            .iter()
            .find(|g| g.run_dir.file_name().is_some_and(|f| f == name))
            .unwrap_or_else(|| panic!("no guest {name} in this lab"))
    }
}

/// Boots the guests of `spec` at once and runs `host` while they are up. See the module
/// documentation. `observe` gets each guest's output and console as they grow, with the
/// guest's index in `spec.guests`.
pub fn run_lab<R: Send>(
    spec: &LabSpec,
    observe: &mut dyn FnMut(usize, Stream, &[u8]),
    host: impl FnOnce(&LabHost) -> R + Send,
) -> Result<LabOutcome<R>, LabError> {
    crate::install_signal_handlers();
    if crate::interrupted() {
        return Err(LabError::interrupted_before_start());
    }
    if spec.guests.is_empty() {
        return Err(LabError::setup("a lab needs at least one guest".into()));
    }
    let mut names: Vec<&str> = Vec::new();
    for g in &spec.guests {
        check_guest_name(&g.name).map_err(LabError::setup)?;
        if names.contains(&g.name.as_str()) {
            return Err(LabError::setup(format!("two guests are called {}", g.name)));
        }
        names.push(&g.name);
        check_prerequisites(&g.vm)?;
    }
    let dir = make_run_dir().map_err(|e| {
        LabError::setup(format!(
            "cannot create a run folder in {}: {e}",
            crate::paths::runs().display()
        ))
    })?;
    let shared = dir.join("shared");
    fs::create_dir(&shared)
        .map_err(|e| LabError::setup(format!("cannot create {}: {e}", shared.display())))?;
    log::info!("lab folder: {}", dir.display());

    let mut net =
        match &spec.network {
            Network::Off => None,
            Network::Lab(name) => Some(make_net(name, spec).map_err(|e| {
                LabError::failed(format!("no lab network: {e}"), String::new(), &dir)
            })?),
            Network::LabIfAvailable(name) => match make_net(name, spec) {
                Ok(net) => Some(net),
                Err(NetError::Unavailable(why)) => {
                    eprintln!("qpip-lab: no lab network: {why}; the guests run without it");
                    None
                }
                Err(e) => {
                    return Err(LabError::failed(
                        format!("no lab network: {e}"),
                        String::new(),
                        &dir,
                    ))
                }
            },
        };
    let netns = net.as_ref().map(|n| n.name().to_string());
    let links = net.as_ref().map(|n| n.links().to_vec()).unwrap_or_default();

    let result = run_guests(spec, &dir, &shared, net.as_ref(), observe, host);
    // Every process is stopped by now (run_guests stops them on every way out).
    if let Some(mut n) = net.take() {
        if let Err(e) = n.remove() {
            log::warn!("removing the lab network: {e}");
        }
    }
    let (guests, host, pids) = result?;
    Ok(LabOutcome {
        guests,
        host,
        netns,
        links,
        pids,
        dir,
    })
}

fn check_guest_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "guest name '{name}' must be 1 to 32 letters, digits or '-' (it is a hostname and a folder)"
        ))
    }
}

/// The lab network: per guest the TAP of its virtio-net NIC, and that of its device 0 or,
/// in the adapter layout, one TAP for the adapter.
fn make_net(name: &str, spec: &LabSpec) -> Result<LabNet, NetError> {
    let mut net = LabNet::create(name)?;
    let adapter = spec.layout == QpipdLayout::Adapter;
    if adapter {
        net.add_tap(netns::ADAPTER_TAP).map_err(NetError::Failed)?;
    }
    for n in 1..=spec.guests.len() {
        let mut taps = vec![netns::virtio_tap(n)];
        if !adapter {
            taps.insert(0, netns::device_tap(n));
        }
        for tap in taps {
            net.add_tap(&tap).map_err(NetError::Failed)?;
        }
    }
    Ok(net)
}

/// Starts the adapter qpipd for the guests that have a device, in the adapter layout on the
/// lab network; None otherwise.
fn start_adapter(
    spec: &LabSpec,
    dir: &Path,
    net: Option<&LabNet>,
) -> Result<Option<Adapter>, LabError> {
    let Some(net) = net.filter(|_| spec.layout == QpipdLayout::Adapter) else {
        return Ok(None);
    };
    let with_device: Vec<(usize, &GuestSpec)> = (1..)
        .zip(&spec.guests)
        .filter(|(_, g)| g.vm.devices > 0)
        .collect();
    if with_device.is_empty() {
        return Ok(None);
    }
    let extra = adapter_args(
        with_device
            .iter()
            .map(|(_, g)| g.vm.qpipd_args.first().map_or(&[][..], Vec::as_slice)),
    )
    .map_err(LabError::setup)?;
    let far_routes = with_device[0].1.far_routes;
    if with_device.iter().any(|(_, g)| g.far_routes != far_routes) {
        return Err(LabError::setup(
            "some guests' device 0 route the far subnet from the start and some do not,              which one adapter qpipd cannot do: use the per-guest layout (--qpipd-per-guest)"
                .to_string(),
        ));
    }
    let functions: Vec<(usize, PathBuf)> = with_device
        .iter()
        .map(|(n, g)| (*n, dir.join(&g.name)))
        .collect();
    Adapter::start(dir, &functions, &extra, far_routes, net).map(Some)
}

type GuestsResult<R> = Result<(Vec<VmOutcome>, R, Vec<u32>), LabError>;

fn run_guests<R: Send>(
    spec: &LabSpec,
    dir: &Path,
    shared: &Path,
    net: Option<&LabNet>,
    observe: &mut dyn FnMut(usize, Stream, &[u8]),
    host: impl FnOnce(&LabHost) -> R + Send,
) -> GuestsResult<R> {
    let count = spec.guests.len();
    let mut adapter = start_adapter(spec, dir, net)?;
    let mut runs: Vec<Run> = spec
        .guests
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let wiring = Wiring {
                n: i + 1,
                name: g.name.clone(),
                guests: count,
                net,
                shared: Some(shared.to_path_buf()),
                adapter: adapter.is_some() && g.vm.devices > 0,
                far_routes: g.far_routes,
            };
            Run::new(&g.vm, dir.join(&g.name), wiring)
        })
        .collect();
    let mut pids: Vec<u32> = adapter.iter().map(Adapter::pid).collect();
    // QEMU first (so the devices see a disconnect), then the guests' own qpipd, then the
    // adapter.
    let stop_all = |runs: &mut Vec<Run>, adapter: &mut Option<Adapter>| {
        runs.iter_mut().for_each(Run::stop_all);
        adapter.iter_mut().for_each(Adapter::kill);
    };

    for run in runs.iter_mut() {
        let started = run.start();
        pids.extend(run.pids());
        if let Err(e) = started {
            stop_all(&mut runs, &mut adapter);
            return Err(name_error(&runs_name(spec, &e), e));
        }
    }

    let ending = AtomicBool::new(false);
    let lab_host = LabHost {
        net,
        shared,
        guests: spec.guests.iter().map(|g| g.name.clone()).collect(),
        pids: runs.iter().map(Run::pids).collect(),
        adapter: adapter.as_ref().map(Adapter::pid),
        ending: &ending,
        far: false,
    };
    // Per guest: None while running, then its outcome or error.
    let mut results: Vec<Option<Result<VmOutcome, LabError>>> = (0..count).map(|_| None).collect();
    let mut failed: Option<usize> = None;
    let mut host = Some(host);
    let mut host_result: Option<std::thread::Result<R>> = None;
    let mut adapter_error: Option<LabError> = None;

    std::thread::scope(|scope| {
        let mut host_thread = None;
        loop {
            for (i, run) in runs.iter_mut().enumerate() {
                if results[i].is_some() {
                    continue;
                }
                let mut obs = |s: Stream, b: &[u8]| observe(i, s, b);
                let r = match run.poll(&mut obs) {
                    Ok(None) => continue,
                    Ok(Some(st)) => run.finish(st, &mut obs),
                    Err(e) => Err(e),
                };
                if r.is_err() && failed.is_none() {
                    failed = Some(i);
                }
                results[i] = Some(r);
            }
            if let Some(a) = adapter.as_mut() {
                adapter_error = a.check_running(dir).err();
            }
            if failed.is_some() || adapter_error.is_some() || crate::interrupted() {
                break;
            }
            if host.is_some() && runs.iter().all(Run::is_ready) {
                let f = host.take().expect("checked");
                let h = &lab_host;
                log::info!("every guest is up; running the host side");
                host_thread = Some(scope.spawn(move || {
                    let r = f(h);
                    if let Err(e) = h.signal("host-done") {
                        log::warn!("cannot write {}/host-done: {e}", h.shared.display());
                    }
                    r
                }));
            }
            if host_thread.as_ref().is_some_and(|t| t.is_finished()) {
                let r = host_thread.take().expect("checked").join();
                let panicked = r.is_err();
                host_result = Some(r);
                if panicked {
                    break;
                }
            }
            if results.iter().all(Option::is_some) && host_thread.is_none() {
                break;
            }
            std::thread::sleep(POLL);
        }
        // Whatever ended the loop, nothing of the guests outlives it; a host closure still
        // running is told to give up its waits (its commands fail once the namespace goes).
        runs.iter_mut().for_each(Run::stop_all);
        ending.store(true, Ordering::SeqCst);
        if let Some(t) = host_thread.take() {
            host_result = Some(t.join());
        }
    });

    // Every QEMU has exited or been stopped: the adapter's turn. After a clean run it must
    // stop as asked; on any other way out it is killed.
    let clean = failed.is_none() && adapter_error.is_none() && !crate::interrupted();
    let adapter_stopped = match adapter.as_mut() {
        Some(a) if clean && matches!(host_result, Some(Ok(_))) => {
            let attached: Vec<_> = runs.iter().filter_map(Run::adapter_attachment).collect();
            a.stop(dir, &attached)
        }
        Some(a) => {
            a.kill();
            Ok(())
        }
        None => Ok(()),
    };
    if let Some(Err(panic)) = host_result {
        std::panic::resume_unwind(panic);
    }
    if crate::interrupted() {
        let first = runs.iter_mut().next().expect("a lab has a guest");
        let mut e = first.interrupted();
        e.message = format!("interrupted: stopped {count} guest(s) and their devices");
        e.run_dir = Some(dir.to_path_buf());
        return Err(e);
    }
    if let Some(i) = failed {
        let mut e = results[i]
            .take()
            .expect("failed guest has a result")
            .unwrap_err();
        let others: Vec<String> = results
            .iter()
            .enumerate()
            .filter(|(j, r)| *j != i && matches!(r, Some(Err(_))))
            .map(|(j, r)| match r {
                Some(Err(e)) => {
                    format!("  guest {} also failed: {}", spec.guests[j].name, e.message)
                }
                _ => unreachable!(),
            })
            .collect();
        if !others.is_empty() {
            e.details = format!("{}\n{}", e.details.trim_end(), others.join("\n"));
        }
        return Err(name_error(&spec.guests[i].name, e));
    }
    if let Some(e) = adapter_error {
        return Err(e);
    }
    adapter_stopped?;
    let outcomes = results
        .into_iter()
        .map(|r| r.expect("every guest finished").expect("no guest failed"))
        .collect();
    let host = match host_result {
        Some(Ok(r)) => r,
        _ => unreachable!("every guest ran and was ready, so the host closure ran"),
    };
    Ok((outcomes, host, pids))
}

/// The name of the guest a start error is about (its run folder's name).
fn runs_name(spec: &LabSpec, e: &LabError) -> String {
    e.run_dir
        .as_ref()
        .and_then(|d| d.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec.guests[0].name.clone())
}

fn name_error(guest: &str, mut e: LabError) -> LabError {
    e.message = format!("guest {guest}: {}", e.message);
    e
}

/// The status a lab exits with on the command line: the first guest's non-zero status, or 0.
pub fn exit_status(outcomes: &[VmOutcome]) -> i32 {
    outcomes
        .iter()
        .map(|o| o.status)
        .find(|s| *s != 0)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_are_named_by_letter() {
        assert_eq!(guest_name(1), "a");
        assert_eq!(guest_name(26), "z");
        assert_eq!(guest_name(27), "g27");
    }

    #[test]
    fn guest_names_are_checked() {
        assert!(check_guest_name("a").is_ok());
        assert!(check_guest_name("server-1").is_ok());
        for bad in ["", "-a", "a b", "a/b", "a,b", &"x".repeat(33)] {
            assert!(check_guest_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unique_namespace_names_differ_and_are_valid() {
        let (a, b) = (unique_netns("qpip-test"), unique_netns("qpip-test"));
        assert_ne!(a, b);
        assert!(netns::check_name(&a).is_ok());
    }
}
