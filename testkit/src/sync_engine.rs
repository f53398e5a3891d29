//! A qpip engine built in this process on a guest RAM of the kit and worked only when the
//! caller polls it: no vfio-user and no engine thread, so every step is deterministic and
//! several engines with their guests can share one thread. The fuzz targets and the engine
//! bench's throughput sections drive their engines this way. What it cannot reach is the
//! threaded run loop (sleeping and kicks), which [`crate::FakeGuest`] covers.

use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

use qpip_abi::pci::MSIX_VECTORS;
use qpip_device::dma::GuestRam;
use qpip_device::engine::{Control, Engine, EngineConfig, Shared};
use qpip_device::irq::Interrupts;

use crate::{AdminRing, Ram};

pub struct SyncEngine {
    pub engine: Engine,
    /// The engine's interrupt vectors (eventfds are installed with `Interrupts::set`).
    pub irqs: Arc<Interrupts>,
    /// Guest RAM as the guest sees it; the engine maps the same memfd.
    pub ram: Ram,
    /// The engine's mapping of `ram`.
    mapping: GuestRam,
    /// The engine's control channel, unused: messages are handed to `Engine::handle`
    /// directly. Kept so the engine's receiver stays connected.
    _tx: Sender<Control>,
}

impl SyncEngine {
    /// An engine with `config` on `ram`, its network not attached yet.
    pub fn new(ram: Ram, config: EngineConfig) -> SyncEngine {
        let mut mapping = GuestRam::new();
        mapping
            .map(
                ram.base(),
                ram.size(),
                0,
                Some(ram.file().try_clone().expect("dup the guest RAM memfd")),
            )
            .unwrap_or_else(|e| panic!("map guest RAM into the engine: {e}"));
        Self::on_mapping(ram, mapping, config)
    }

    /// A new engine with `config` on `ram` as an earlier engine mapped it (the parts
    /// [`SyncEngine::into_parts`] gave back): no new mapping, whose pages would each fault
    /// on first touch.
    pub fn on_mapping(ram: Ram, mapping: GuestRam, config: EngineConfig) -> SyncEngine {
        let irqs = Arc::new(Interrupts::new(MSIX_VECTORS as usize));
        let shared = Shared::new(mapping.memory(), irqs.clone());
        let (tx, rx) = mpsc::channel();
        SyncEngine {
            engine: Engine::new(shared, config, rx),
            irqs,
            ram,
            mapping,
            _tx: tx,
        }
    }

    /// The engine's mapping of guest RAM.
    pub fn mapping(&self) -> &GuestRam {
        &self.mapping
    }

    /// The guest RAM and the engine's mapping of it back, the engine gone.
    pub fn into_parts(self) -> (Ram, GuestRam) {
        drop(self.engine);
        (self.ram, self.mapping)
    }

    /// Delivers one control message to the engine, as the control thread would.
    pub fn control(&mut self, msg: Control) {
        self.engine.handle(msg);
    }

    /// Enables the admin queue on `ring`'s rings, as the control thread does once the driver
    /// has programmed valid ones.
    pub fn enable_admin(&mut self, ring: &AdminRing) {
        self.control(Control::AdminEnable {
            sq: ring.sq,
            cq: ring.cq,
            depth: ring.depth,
        });
    }
}
