//! `qpipd`: serves qpip PCI functions to QEMU over vfio-user sockets: one (`--socket`), or
//! many on one adapter (`--function`, repeated), joined by its embedded switch.

use std::path::PathBuf;
use std::process::ExitCode;

use std::net::Ipv6Addr;
use std::time::Duration;

use clap::Parser;
use log::error;
use qpip_device::backend::link::Link;
use qpip_device::backend::pcap::PcapSink;
use qpip_device::backend::switch::{Identity, PortOptions, Switch, SwitchConfig};
use qpip_device::backend::{open_link, Backend};
use qpip_device::backend::{ImpairSpec, NetSpec};
use qpip_device::engine::idle::{IdleConfig, IdlePollSched};
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::tcp::TcpLimits;
use qpip_device::engine::thread::EngineThread;
use qpip_device::engine::{EngineConfig, DEFAULT_MAC};
use qpip_device::function::FunctionConfig;
use qpip_device::net::config::{Mtu, StaticNeighbor};
use qpip_device::net::route::{Route, RouteTable, MAX_ROUTES};
use qpip_device::net::tcp::MemoryPool;
use qpip_device::sched::ControlSched;
use qpip_device::vfio::{serve, serve_functions, FunctionSpec, ServeOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The qpip adapter: a PCI network function for QEMU, attached over vfio-user.
///
/// Start qpipd first, then QEMU with
/// -device '{"driver":"vfio-user-pci","socket":{"path":"PATH","type":"unix"}}'
/// and guest RAM from a shared memfd backend. With --socket, qpipd serves one function and
/// exits when QEMU disconnects. With --function (repeated) it serves one function per
/// socket, each to its own QEMU, on shared engine threads; an embedded switch carries
/// frames between the functions in memory and everything else through --net; a function
/// whose QEMU goes away starts afresh for the next one on its socket.
///
/// Memory keys, TCP initial sequence numbers and SYN cookies are keyed hashes under three
/// secrets drawn apart from the OS's random source when a function starts and at every
/// reset: unpredictable to guests and to the network (a fresh key for every registration).
#[derive(Parser, Debug)]
#[command(name = "qpipd", version, about, long_about)]
struct Args {
    /// Path of the vfio-user socket to listen on (a stale socket file is replaced).
    #[arg(long, value_name = "PATH", required_unless_present = "functions")]
    socket: Option<PathBuf>,

    /// The device's MAC address (a unicast address; default 02:51:50:00:00:01).
    #[arg(long, value_name = "MAC", value_parser = parse_mac, conflicts_with = "functions")]
    mac: Option<[u8; 6]>,

    /// An address of the device with its prefix length, IPv6 (fd51:5050::1:1/64) or IPv4
    /// (198.18.0.2/24) (repeatable). The IPv6 link-local address from the MAC is always
    /// present.
    #[arg(long = "ip", value_name = "ADDR/PLEN", value_parser = parse_addr,
          conflicts_with = "functions")]
    ips: Vec<(Ipv6Addr, u8)>,

    /// One function of the adapter (repeatable, instead of --socket/--mac/--ip):
    /// socket=PATH[,mac=MAC][,ip=ADDR/PLEN]...[,pcap=FILE][,trusted] (pcap: a capture of
    /// the function's frames, every guest it serves in one file). Function n's MAC
    /// defaults to 02:51:50:00:00:n+1. The embedded switch lets a function send only as
    /// itself: with its MAC and, for IPv6, from its addresses (its link-local one, those
    /// given here or added by its guest); other frames are dropped and counted (spoofed,
    /// in the switch's counters logged when qpipd stops). A guest cannot take another
    /// function's MAC or address (SET_MAC, ADD_ADDR fail with ADDR_IN_USE). trusted: the
    /// function may send as anyone (a guest that bridges hosts behind it); its other
    /// source MACs are learned, up to --port-macs; it still cannot take another
    /// function's MAC or address.
    #[arg(
        long = "function",
        value_name = "socket=PATH,mac=MAC,ip=ADDR/PLEN",
        conflicts_with = "socket"
    )]
    functions: Vec<FunctionArg>,

    /// MAC addresses the embedded switch learns at most per port (the uplink, a trusted
    /// function; the functions' own come on top), at most 4096 in all. A new address
    /// beyond is not learned (frames to it are flooded) and counted (not_learned), unless
    /// addresses of that port unseen for 300 s can be forgotten to make room.
    #[arg(long, value_name = "N", default_value_t = qpip_device::backend::switch::PORT_MACS,
          value_parser = port_macs, requires = "functions")]
    port_macs: usize,

    /// Engine threads shared by the functions (function n runs on thread n mod N; default
    /// 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    engine_threads: Option<u32>,

    /// The link beneath the device: tap:IFNAME (a TAP interface, created if missing and
    /// permitted) or cable:PATH (a unix datagram link to one other qpipd given the same PATH).
    /// Without it the device only reaches its own addresses.
    #[arg(long, value_name = "tap:IFNAME|cable:PATH")]
    net: Option<NetSpec>,

    /// Link MTU, 1280..=9000.
    #[arg(long, value_name = "N", default_value = "1500")]
    mtu: Mtu,

    /// Write every frame in and out to FILE (pcap, for Wireshark/tshark).
    #[arg(long, value_name = "FILE", requires = "net")]
    pcap: Option<PathBuf>,

    /// Impair the link in both directions:
    /// loss=P,reorder=P,dup=P,corrupt=P,delay=MS[,jitter=MS][,seed=N] (P in percent).
    #[arg(long, value_name = "SPEC", requires = "net")]
    impair: Option<ImpairSpec>,

    /// A static neighbour entry ADDR=MAC (repeatable; every function gets them). The guest
    /// adds and deletes more (ADD_NEIGH, DEL_NEIGH); a reset brings these back.
    #[arg(long = "neighbor", value_name = "ADDR=MAC", requires = "net")]
    neighbors: Vec<StaticNeighbor>,

    /// A route to destinations off the link, "PREFIX via GATEWAY" (repeatable, at most 32;
    /// every function gets them): PREFIX is ADDR/PLEN or default (the gateway's family),
    /// e.g. --route "default via fd51:5050::1" --route "198.18.1.0/24 via 198.18.0.254".
    /// The gateway must be on-link (inside the prefix of one of the function's addresses,
    /// or IPv6 link-local) when the route is used; on-link destinations never take a route.
    /// The guest adds and deletes more (ADD_ROUTE, DEL_ROUTE); a reset brings these back.
    #[arg(long = "route", value_name = "PREFIX via GATEWAY", requires = "net")]
    routes: Vec<Route>,

    /// Multicast neighbour solicitations (one a second) before the device gives up
    /// resolving an on-link address and drops what waits for it (RFC 4861's
    /// MAX_MULTICAST_SOLICIT, 3; like Linux's mcast_solicit). More ride out a peer that is
    /// slow to answer, such as a virtual machine starved of CPU.
    #[arg(long, value_name = "N", default_value_t = qpip_device::net::neighbor::MAX_MULTICAST_SOLICIT,
          value_parser = clap::value_parser!(u8).range(1..=100), requires = "net")]
    ndp_solicit: u8,

    /// Retransmissions of unacknowledged data before a TCP connection to a silent peer
    /// times out and its QP fails with a timeout (RFC 9293 §3.8.3's R2; like Linux's
    /// net.ipv4.tcp_retries2). The default, 15, gives up after about 9 minutes; RFC 9293
    /// asks for at least 100 seconds. Fewer give up sooner: N retries on a fast link take
    /// about 0.2 x (2^(N+1) - 1) seconds (3: 3 s, 8: 100 s).
    #[arg(long, value_name = "N", default_value_t = EngineConfig::default().tcp_limits.max_retries,
          value_parser = clap::value_parser!(u32).range(1..=30))]
    tcp_retries: u32,

    /// Guest pages all memory regions of a function may hold at once (per function: each
    /// --function has its own). A region costs qpipd 8 bytes per page of its page list,
    /// so the default, 1048576 (4 GiB of guest memory), bounds that at 8 MiB a function;
    /// a REG_MR beyond it fails with NO_RESOURCES.
    #[arg(long, value_name = "PAGES", default_value_t = qpip_device::engine::DEFAULT_REGION_PAGES,
          value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    max_region_pages: u64,

    /// MiB a function's TCP may hold of data its QPs have not taken yet (bytes staged ahead
    /// of posted receives, bytes that arrived out of order), over all its connections, as
    /// Linux's tcp_mem bounds the host's sockets. Beyond it, such segments are dropped and
    /// counted (the peer sends them again); bytes placed straight into posted receives
    /// never count. Each connection holds at most 64 KiB staged (up to the window it offered,
    /// at most 8 MiB, when a peer's pushes complete its stream receives early) and 256 KiB
    /// out of order.
    #[arg(long, value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    tcp_mem: u64,

    /// MiB the TCP of all functions of the adapter may hold together (as --tcp-mem, for
    /// the whole qpipd).
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    adapter_tcp_mem: u64,

    /// The longest the engine keeps polling doorbells and the link after its last work
    /// before it sleeps, in microseconds: the budget adapts below this to the gaps in the
    /// traffic (0: never poll). Longer: lower latency for steady traffic, more CPU.
    #[arg(long, value_name = "US",
          default_value_t = IdleConfig::default().max_poll.as_micros() as u64)]
    idle_poll_us: u64,

    /// How the engine thread is scheduled while it polls with nothing to do (after its first
    /// 500 µs of it). idle: SCHED_IDLE, so the polling takes only a CPU nothing else wants
    /// and any vCPU that becomes runnable preempts it; back to its own policy when it finds
    /// work or goes to sleep. It lowers itself when a CPU would stay free of other runnable
    /// threads even if one more woke (looked for every 25 µs for up to 200 µs more while
    /// only one thread is too many), and it may raise its priority again (as root may);
    /// else it polls at its own priority for at most 500 µs (700 µs while it looks
    /// again). normal: the process's own policy, yielding now and then, for the whole
    /// budget — for an engine given a CPU of its own.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = IdlePollSchedArg::Idle)]
    idle_poll_sched: IdlePollSchedArg,

    /// While the engine polls with nothing to do and every CPU is taken by other threads
    /// (three looks in a row, 25 µs apart, across idle spells), it naps 25 µs at a time
    /// instead, without telling the guests it sleeps (no kicks). For guests that spin on
    /// memory (an RDMA Write ping-pong, each end spinning on the byte the other writes):
    /// polling beside them, the engine waits for a CPU in the scheduler's time slices
    /// (1.6-2.4 ms per round trip on a 2-CPU host against 70-86 µs napping). Off by
    /// default: it added 25-45 µs to the round trips of guests that sleep on their CQs
    /// there.
    #[arg(long)]
    idle_nap: bool,

    /// How the control threads (one per function, reading QEMU's messages, the guest's
    /// kicks among them) are scheduled. normal: the process's own policy; a woken control
    /// thread may preempt the vCPU that kicked, when the host puts it on that vCPU's CPU,
    /// and the vCPU waits for the kick to be handled (a kicked UDP message measured 44-54
    /// µs of guest time). batch: SCHED_BATCH, it does not preempt (19-27 µs), but a guest
    /// busy-polling right after its kick waits longer for its answer (p50 0.3-0.6 ms
    /// against 0.07-0.09). See the device's sched module.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = ControlSchedArg::Normal)]
    control_sched: ControlSchedArg,

    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,

    /// Report this interface major version instead of the real one (tests of a driver's
    /// version check only).
    #[arg(long, hide = true, value_name = "N")]
    advertise_abi_major: Option<u16>,
}

/// `--control-sched`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ControlSchedArg {
    /// The process's own policy.
    Normal,
    /// SCHED_BATCH.
    Batch,
}

/// The engine threads' idle settings from the command line.
fn idle_config(args: &Args) -> IdleConfig {
    IdleConfig {
        max_poll: Duration::from_micros(args.idle_poll_us),
        poll_sched: match args.idle_poll_sched {
            IdlePollSchedArg::Idle => IdlePollSched::Idle,
            IdlePollSchedArg::Normal => IdlePollSched::Normal,
        },
        nap: args.idle_nap,
    }
}

/// `--idle-poll-sched`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum IdlePollSchedArg {
    /// SCHED_IDLE while polling idle.
    Idle,
    /// The process's own policy.
    Normal,
}

fn main() -> ExitCode {
    qpip_device::tune_allocator();
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            // One clear line, not clap's multi-line usage dump: the message may span a few
            // lines (e.g. the list of missing arguments), so fold everything before the
            // usage block into one.
            let msg = e.to_string();
            let first: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error: ");
            eprintln!("qpipd: {first} (see qpipd --help)");
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    qpip_device::sched::set_control_sched(match args.control_sched {
        ControlSchedArg::Normal => ControlSched::Inherit,
        ControlSchedArg::Batch => ControlSched::Batch,
    });
    // The device holds (and LIST_ADDRS reports) at most MAX_ADDRS configured addresses.
    if args.ips.len() > qpip_abi::admin::MAX_ADDRS as usize {
        eprintln!(
            "qpipd: at most {} --ip addresses (the device's limit); {} given",
            qpip_abi::admin::MAX_ADDRS,
            args.ips.len()
        );
        return ExitCode::from(2);
    }
    if let Err(e) = check_routes(&args.routes) {
        eprintln!("qpipd: {e}");
        return ExitCode::from(2);
    }
    if args.engine_threads.is_some() && args.functions.is_empty() {
        eprintln!("qpipd: --engine-threads is for an adapter of --function's (see qpipd --help)");
        return ExitCode::from(2);
    }
    if let Err(e) = check_functions(&args.functions) {
        eprintln!("qpipd: {e}");
        return ExitCode::from(2);
    }
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    init_log(level);

    let result = if args.functions.is_empty() {
        serve_one(&args)
    } else {
        serve_adapter(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// A function's configuration: its identity, and the options every function shares.
fn core_config(
    args: &Args,
    mac: [u8; 6],
    ips: &[(Ipv6Addr, u8)],
    net: Option<NetSpec>,
    adapter_tcp: &Arc<MemoryPool>,
) -> FunctionConfig {
    FunctionConfig {
        advertised_abi_major: args
            .advertise_abi_major
            .unwrap_or(qpip_abi::ABI_VERSION_MAJOR),
        engine: EngineConfig {
            mac,
            addrs: ips.to_vec(),
            idle: idle_config(args),
            network: net.map(|spec| NetworkConfig {
                spec,
                mtu: args.mtu.0,
                pcap: args.pcap.clone(),
                impair: args.impair,
                neighbors: args.neighbors.clone(),
                routes: args.routes.clone(),
                ndp_solicits: args.ndp_solicit,
            }),
            tcp_limits: TcpLimits {
                max_retries: args.tcp_retries,
                ..TcpLimits::default()
            },
            region_pages: args.max_region_pages,
            tcp_memory: Some(MemoryPool::new(
                (args.tcp_mem << 20) as usize,
                Some(adapter_tcp.clone()),
            )),
            ..EngineConfig::default()
        },
    }
}

/// The pool every function's TCP memory is taken from (`--adapter-tcp-mem`).
fn adapter_tcp_memory(args: &Args) -> Arc<MemoryPool> {
    MemoryPool::new((args.adapter_tcp_mem << 20) as usize, None)
}

/// `--socket`: one function, until its client disconnects.
fn serve_one(args: &Args) -> Result<(), String> {
    let socket = args
        .socket
        .clone()
        .expect("clap requires --socket without --function");
    install_signal_cleanup(vec![socket.clone()], || {});
    let core = core_config(
        args,
        args.mac.unwrap_or(DEFAULT_MAC),
        &args.ips,
        args.net.clone(),
        &adapter_tcp_memory(args),
    );
    serve(&socket, ServeOptions { core })
}

/// `--function`, repeated: one adapter, its functions on shared engine threads, joined by
/// the embedded switch (with --net as its uplink).
fn serve_adapter(args: &Args) -> Result<(), String> {
    let uplink = match &args.net {
        Some(spec) => Some(
            open_link(spec, args.pcap.as_deref(), args.impair.as_ref())
                .map_err(|e| format!("cannot open the uplink: {e}"))?,
        ),
        None => None,
    };
    let switch = Switch::with_config(
        uplink,
        SwitchConfig {
            port_macs: args.port_macs,
            ..SwitchConfig::default()
        },
    );
    let tcp_memory = adapter_tcp_memory(args);
    let specs: Vec<FunctionSpec> = args
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = format!("f{i}");
            let mac = f.mac.unwrap_or(function_mac(i));
            // Who the function is, reserved for it from the start.
            switch.declare(
                &name,
                PortOptions {
                    trusted: f.trusted,
                    reserved: Some(Identity {
                        mac,
                        addrs: f.ips.iter().map(|&(a, _)| a).collect(),
                    }),
                },
            );
            // The stack's settings for a switch port: the link is made by the switch.
            let mut core = core_config(
                args,
                mac,
                &f.ips,
                Some(NetSpec::Switch(name.clone())),
                &tcp_memory,
            );
            if let Some(n) = core.engine.network.as_mut() {
                // Captures and faults are the uplink's (above); a port is a clean wire.
                n.pcap = None;
                n.impair = None;
            }
            FunctionSpec {
                name,
                socket: f.socket.clone(),
                core,
            }
        })
        .collect();
    // The switch's counters, per function's port and for the uplink, go to the log when
    // the adapter stops.
    let sw = switch.clone();
    install_signal_cleanup(
        specs.iter().map(|f| f.socket.clone()).collect(),
        move || {
            for (name, p) in sw.ports() {
                log::info!("switch port {name}: {p:?}");
            }
            if let Some(u) = sw.uplink_stats() {
                log::info!("switch uplink: {u:?}");
            }
            log::info!("switch table: {:?}", sw.table_stats());
        },
    );
    let n = (args.engine_threads.unwrap_or(1) as usize).min(specs.len());
    let threads = (0..n)
        .map(|i| EngineThread::spawn(&format!("qpip-engine-{i}"), idle_config(args)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("cannot start an engine thread: {e}"))?;
    log::info!(
        "adapter: {} functions on {n} engine thread(s), switch {}",
        specs.len(),
        switch.describe()
    );
    let names: Vec<String> = specs.iter().map(|f| f.name.clone()).collect();
    // A function's capture (pcap=): started by its first guest, gone on with by the next.
    let captures: Vec<(Option<PathBuf>, AtomicBool)> = args
        .functions
        .iter()
        .map(|f| (f.pcap.clone(), AtomicBool::new(false)))
        .collect();
    // A port that cannot be made (no file descriptors left) leaves the function without a
    // link: it then fails to start, naming the switch port, and qpipd says so.
    let link = move |i: usize| -> Option<Box<dyn Backend>> {
        let port = match switch.port(&names[i]) {
            Ok(p) => p,
            Err(e) => {
                error!("function {}: no switch port: {e}", names[i]);
                return None;
            }
        };
        let (Some(path), started) = &captures[i] else {
            return Some(Box::new(port));
        };
        let sink = if started.swap(true, Ordering::Relaxed) {
            PcapSink::append(path)
        } else {
            PcapSink::create(path)
        };
        match sink.and_then(|s| Link::with_capture(port, Some(s), None)) {
            Ok(l) => Some(Box::new(l)),
            Err(e) => {
                error!("function {}: {e}", names[i]);
                None
            }
        }
    };
    serve_functions(specs, threads, Arc::new(link))
}

/// Function `i`'s MAC when none is given: 02:51:50:00:00:(i+1), as `--socket`'s default is
/// function 0's.
fn function_mac(i: usize) -> [u8; 6] {
    let mut mac = DEFAULT_MAC;
    mac[4] = ((i + 1) >> 8) as u8;
    mac[5] = (i + 1) as u8;
    mac
}

/// `--function socket=PATH[,mac=MAC][,ip=ADDR/PLEN]...[,pcap=FILE][,trusted]`
#[derive(Debug, Clone)]
struct FunctionArg {
    socket: PathBuf,
    mac: Option<[u8; 6]>,
    ips: Vec<(Ipv6Addr, u8)>,
    pcap: Option<PathBuf>,
    trusted: bool,
}

impl std::str::FromStr for FunctionArg {
    type Err = String;
    fn from_str(s: &str) -> Result<FunctionArg, String> {
        let (mut socket, mut mac, mut ips, mut pcap) = (None, None, Vec::new(), None);
        let mut trusted = false;
        for part in s.split(',') {
            if part == "trusted" {
                trusted = true;
                continue;
            }
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("'{part}' is not KEY=VALUE (socket=, mac=, ip=, pcap=) nor trusted")
            })?;
            match key {
                "socket" if socket.is_none() && !value.is_empty() => socket = Some(value.into()),
                "socket" => return Err("one non-empty socket= per function".into()),
                "mac" if mac.is_none() => mac = Some(parse_mac(value)?),
                "mac" => return Err("one mac= per function".into()),
                "ip" => ips.push(parse_addr(value)?),
                "pcap" if pcap.is_none() && !value.is_empty() => pcap = Some(value.into()),
                "pcap" => return Err("one non-empty pcap= per function".into()),
                _ => {
                    return Err(format!(
                        "unknown key '{key}' (socket=, mac=, ip=, pcap=, trusted)"
                    ))
                }
            }
        }
        Ok(FunctionArg {
            socket: socket.ok_or("a function needs socket=PATH")?,
            mac,
            ips,
            pcap,
            trusted,
        })
    }
}

/// `--route`s fit one function's table: at most [`MAX_ROUTES`], no prefix twice.
fn check_routes(routes: &[Route]) -> Result<(), String> {
    if routes.len() > MAX_ROUTES {
        return Err(format!(
            "at most {MAX_ROUTES} --route's (the device's limit); {} given",
            routes.len()
        ));
    }
    let mut table = RouteTable::default();
    for r in routes {
        if table.add(*r).is_err() {
            let prefix = r.to_string();
            let prefix = prefix.split(" via ").next().unwrap_or_default();
            return Err(format!("two --route's for {prefix}"));
        }
    }
    Ok(())
}

/// Functions must differ in socket, MAC (the switch forwards by MAC) and addresses (each
/// is one function's; the switch holds a function to its own).
fn check_functions(functions: &[FunctionArg]) -> Result<(), String> {
    let mut sockets = std::collections::HashSet::new();
    let mut macs = std::collections::HashSet::new();
    let mut addrs = std::collections::HashSet::new();
    for (i, f) in functions.iter().enumerate() {
        if f.ips.len() > qpip_abi::admin::MAX_ADDRS as usize {
            return Err(format!(
                "function {i}: at most {} ip= addresses (the device's limit); {} given",
                qpip_abi::admin::MAX_ADDRS,
                f.ips.len()
            ));
        }
        if let Some((a, _)) = f.ips.iter().find(|(a, _)| !addrs.insert(*a)) {
            return Err(format!("two functions with address {a}"));
        }
        if !sockets.insert(&f.socket) {
            return Err(format!("two functions on socket {}", f.socket.display()));
        }
        let mac = f.mac.unwrap_or(function_mac(i));
        if !macs.insert(mac) {
            return Err(format!(
                "two functions with MAC {}",
                mac.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":")
            ));
        }
    }
    Ok(())
}

/// On SIGINT/SIGTERM remove the socket files and exit, so a stopped qpipd leaves nothing
/// behind.
fn install_signal_cleanup(sockets: Vec<PathBuf>, last_words: impl Fn() + Send + 'static) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install signal handlers: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            qpip_device::vfio::stop_listening(&sockets);
            last_words();
            // Captures end with their last frames.
            qpip_device::backend::pcap::flush_all();
            log::info!("signal {sig}: stopping");
            std::process::exit(128 + sig);
        }
    });
}

/// `--port-macs`: 1..=the table's size.
fn port_macs(s: &str) -> Result<usize, String> {
    let max = qpip_device::backend::switch::MAC_TABLE;
    s.parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("'{s}' is not 1..={max}"))
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let bad = || format!("'{s}' is not a MAC address like 02:51:50:00:00:01");
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!("'{s}' is not a unicast MAC address"));
    }
    Ok(mac)
}

fn parse_addr(s: &str) -> Result<(Ipv6Addr, u8), String> {
    qpip_device::net::config::parse_address(s)
}

/// Logs as `[  seconds LEVEL target] message`, the seconds counted from qpipd's start: the
/// lab keeps one log per device next to the guest's console log, and an offset from start
/// lines them up with the boot better than a calendar date would.
fn init_log(default_level: &str) {
    use std::io::Write;
    let start = std::time::Instant::now();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .format(move |buf, record| {
            let t = start.elapsed();
            let level = record.level();
            let style = buf.default_level_style(level);
            writeln!(
                buf,
                "[{:>5}.{:06} {style}{level:<5}{style:#} {}] {}",
                t.as_secs(),
                t.subsec_micros(),
                record.target(),
                record.args()
            )
        })
        .init();
}
