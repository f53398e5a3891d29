//! An adapter served in this process for tests: `n` functions on their own sockets, their
//! engines on shared engine threads, joined by the embedded switch (its uplink a cable if
//! asked), and fake guests attached to them as QEMU would be.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qpip_device::backend::switch::{Identity, PortOptions, Switch};
use qpip_device::backend::{open_link, Backend, NetSpec};
use qpip_device::engine::idle::IdleConfig;
use qpip_device::engine::network::NetworkConfig;
use qpip_device::engine::thread::EngineThread;
use qpip_device::engine::{EngineConfig, FaultInjection};
use qpip_device::function::FunctionConfig;
use qpip_device::vfio::{serve_functions, FunctionSpec};
use qpip_testkit::*;
use vfio_user::Client;

/// An adapter being served: its functions' sockets and its switch.
#[allow(dead_code)] // each binary that includes it uses what it needs
pub struct Adapter {
    pub sockets: Vec<PathBuf>,
    pub switch: Arc<Switch>,
    /// Function i's trigger for a panic in its engine (the in-process API's test hook).
    pub faults: Vec<FaultInjection>,
    _dir: ScratchDir,
}

pub const ADDRS: [&str; 3] = ["fd51:5050::1:1", "fd51:5050::1:2", "fd51:5050::1:3"];

pub fn mac(i: usize) -> [u8; 6] {
    [0x02, 0x51, 0x50, 0, 0x0a, i as u8 + 1]
}

/// Starts an adapter with `n` functions (function i has MAC `mac(i)` and address
/// `ADDRS[i]`) on `threads` engine threads, its uplink on `cable` if given.
pub fn adapter(n: usize, threads: usize, cable: Option<&Path>) -> Adapter {
    let uplink = cable.map(|c| {
        open_link(&NetSpec::Cable(c.to_path_buf()), None, None).expect("the uplink cable")
    });
    adapter_on(n, threads, uplink)
}

/// As [`adapter`], with `uplink` (already open) as the switch's uplink.
pub fn adapter_on(n: usize, threads: usize, uplink: Option<Box<dyn Backend>>) -> Adapter {
    let idle = IdleConfig {
        max_poll: Duration::from_micros(200),
        ..IdleConfig::default()
    };
    adapter_idle(n, threads, uplink, idle)
}

/// As [`adapter_on`], its engine threads idle as `idle` says.
#[allow(dead_code)] // not every test binary that includes the fixture sets it
pub fn adapter_idle(
    n: usize,
    threads: usize,
    uplink: Option<Box<dyn Backend>>,
    idle: IdleConfig,
) -> Adapter {
    let dir = ScratchDir::new("adapter");
    let switch = Switch::new(uplink);
    let faults: Vec<FaultInjection> = (0..n).map(|_| FaultInjection::default()).collect();
    let specs: Vec<FunctionSpec> = (0..n)
        .map(|i| {
            let name = format!("f{i}");
            // As qpipd does: each function's configured identity is reserved for it.
            switch.declare(
                &name,
                PortOptions {
                    trusted: false,
                    reserved: Some(Identity {
                        mac: mac(i),
                        addrs: vec![ADDRS[i].parse().unwrap()],
                    }),
                },
            );
            FunctionSpec {
                socket: dir.path().join(format!("{name}.sock")),
                core: FunctionConfig {
                    engine: EngineConfig {
                        mac: mac(i),
                        addrs: vec![(ADDRS[i].parse().unwrap(), 64)],
                        network: Some(NetworkConfig::new(NetSpec::Switch(name.clone()))),
                        fault: faults[i].clone(),
                        ..EngineConfig::default()
                    },
                    ..FunctionConfig::default()
                },
                name,
            }
        })
        .collect();
    let sockets = specs.iter().map(|f| f.socket.clone()).collect();
    let threads = (0..threads)
        .map(|i| EngineThread::spawn(&format!("test-engine-{i}"), idle))
        .collect::<std::io::Result<Vec<_>>>()
        .unwrap();
    let sw = switch.clone();
    let link = move |i: usize| -> Option<Box<dyn Backend>> {
        Some(Box::new(sw.port(&format!("f{i}")).expect("a switch port")))
    };
    // Serves until the test process ends (a function serves client after client).
    std::thread::spawn(move || serve_functions(specs, threads, Arc::new(link)));
    Adapter {
        sockets,
        switch,
        faults,
        _dir: dir,
    }
}

#[allow(dead_code)] // each binary that includes it uses what it needs
impl Adapter {
    /// A guest attached to function `i`, its device enabled and admin queue set up.
    pub fn guest(&self, i: usize) -> FakeGuest {
        self.guest_with_ram(i, RAM_SIZE)
    }

    /// As [`Adapter::guest`], with `ram` bytes of guest RAM.
    pub fn guest_with_ram(&self, i: usize, ram: u64) -> FakeGuest {
        let socket = &self.sockets[i];
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            if socket.exists() {
                if let Ok(c) = Client::new(socket) {
                    break c;
                }
            }
            assert!(Instant::now() < deadline, "function {i} is not listening");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut g = FakeGuest::attach_sized(client, ram);
        g.enable();
        g.setup_admin(ADMIN_DEPTH);
        g
    }
}
