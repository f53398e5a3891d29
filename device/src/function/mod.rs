//! One PCI function as its driver sees it: what the control BAR's registers mean and the
//! state behind them — the function's engine (started, reset, stopped), its link, its
//! status — independent of how accesses arrive (vfio-user; the glue is in [`crate::vfio`]).
//! Like QEMU's `igb_core.c` beside `igb.c`: register semantics here, PCI plumbing there.

mod registers;

use std::io;
use std::sync::Arc;

use log::{info, warn};
use qpip_abi::{admin as abi_admin, pci as abi_pci, regs};
use vm_memory::GuestAddressSpace;

use crate::backend::Backend;
use crate::dma::GuestRam;
use crate::engine::thread::EngineThread;
use crate::engine::{Control, EngineConfig, EngineHandle, Shared};
use crate::irq::Interrupts;

pub use registers::RegisterFile;

/// Options fixed when the device starts.
#[derive(Clone, Debug)]
pub struct FunctionConfig {
    /// Interface major version reported in [`regs::REG_VERSION`]. Always
    /// [`qpip_abi::ABI_VERSION_MAJOR`] except in tests of a driver's version check.
    pub advertised_abi_major: u16,
    /// The engine's settings (MAC, addresses, polling).
    pub engine: EngineConfig,
}

impl Default for FunctionConfig {
    fn default() -> Self {
        FunctionConfig {
            advertised_abi_major: qpip_abi::ABI_VERSION_MAJOR,
            engine: EngineConfig::default(),
        }
    }
}

/// Counters of things the device refused or dropped; exposed in logs now and through the
/// stats command later.
#[derive(Default, Debug, Clone)]
pub struct Counters {
    /// Register accesses that were not aligned 32-bit accesses or hit reserved offsets.
    pub bad_register_accesses: u64,
    /// Writes to REG_IRQ_TEST naming a vector the device does not have.
    pub bad_irq_test_vectors: u64,
}

pub struct FunctionCore {
    regs: RegisterFile,
    pub irqs: Arc<Interrupts>,
    pub ram: GuestRam,
    msix_table: Vec<u8>,
    pub counters: Counters,
    engine: EngineHandle,
    shared: Shared,
}

impl FunctionCore {
    /// A function whose engine runs on a thread of its own.
    pub fn new(config: FunctionConfig) -> io::Result<Self> {
        let irqs = Arc::new(Interrupts::new(abi_pci::MSIX_VECTORS as usize));
        let ram = GuestRam::new();
        let shared = Shared::new(ram.memory(), irqs.clone());
        let engine = EngineHandle::start(shared.clone(), config.engine.clone())?;
        Ok(Self::with_engine(config, irqs, ram, shared, engine))
    }

    /// A function whose engine runs on `thread` (shared with other functions), on `link`
    /// if given (else the link its configuration names).
    pub fn on_thread(
        thread: &Arc<EngineThread>,
        config: FunctionConfig,
        link: Option<Box<dyn Backend>>,
    ) -> io::Result<Self> {
        let irqs = Arc::new(Interrupts::new(abi_pci::MSIX_VECTORS as usize));
        let ram = GuestRam::new();
        let shared = Shared::new(ram.memory(), irqs.clone());
        let engine = thread.start(shared.clone(), config.engine.clone(), link)?;
        Ok(Self::with_engine(config, irqs, ram, shared, engine))
    }

    fn with_engine(
        config: FunctionConfig,
        irqs: Arc<Interrupts>,
        ram: GuestRam,
        shared: Shared,
        engine: EngineHandle,
    ) -> Self {
        FunctionCore {
            regs: RegisterFile::new(config.advertised_abi_major),
            irqs,
            ram,
            msix_table: vec![0; abi_pci::MSIX_VECTORS as usize * 16],
            counters: Counters::default(),
            engine,
            shared,
        }
    }

    /// The engine's counters (what QUERY_STATS reports).
    pub fn stats(&self) -> &crate::engine::Stats {
        &self.shared.stats
    }

    /// Function-level reset: the engine destroys every object (and this waits until it has),
    /// every read-write register goes back to 0, and the doorbell pages (guest RAM) are
    /// forgotten with their contexts. DMA maps and
    /// interrupt eventfds belong to the VMM, not to the function, and survive.
    pub fn reset(&mut self) {
        self.engine.reset();
        self.regs.reset();
        self.msix_table.iter_mut().for_each(|b| *b = 0);
        info!("device reset (reset #{})", self.regs.reset_count());
    }

    /// Read from the control BAR. Offsets beyond the BAR are an error (the access is
    /// refused); inside it, anything that is not a register reads as zero.
    pub fn ctrl_read(&mut self, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let start = check_bar_range(offset, data.len(), abi_pci::CTRL_BAR_SIZE)?;
        data.fill(0);
        if let Some(table) = msix_table_range(start, data.len()) {
            // QEMU normally serves the table itself; this path is for other clients.
            data.copy_from_slice(&self.msix_table[table]);
        } else if start >= abi_pci::MSIX_PBA_OFFSET as usize {
            // Pending bits: the device never holds an interrupt pending (it signals eventfds).
        } else if let Some(reg) = aligned_register(start, data.len()) {
            match self.regs.read(reg) {
                Some(v) if reg == regs::REG_STATUS => {
                    // The engine's state beside the registers': its failure, its link.
                    let mut v = v;
                    if self.shared.failed() {
                        v |= regs::STATUS_FAILED;
                    }
                    if self.shared.link_up() {
                        v |= regs::STATUS_LINK_UP;
                    }
                    data.copy_from_slice(&v.to_le_bytes())
                }
                Some(v) => data.copy_from_slice(&v.to_le_bytes()),
                None => self.bad_access("read", offset, data.len()),
            }
        } else {
            self.bad_access("read", offset, data.len());
        }
        Ok(())
    }

    /// Write to the control BAR. Same rules as [`Self::ctrl_read`]; writes to read-only or
    /// reserved offsets are ignored and counted.
    pub fn ctrl_write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let start = check_bar_range(offset, data.len(), abi_pci::CTRL_BAR_SIZE)?;
        if let Some(table) = msix_table_range(start, data.len()) {
            self.msix_table[table].copy_from_slice(data);
            return Ok(());
        }
        if start >= abi_pci::MSIX_PBA_OFFSET as usize {
            return Ok(());
        }
        if start == (regs::KICK_PAGE_OFFSET + regs::KICK) as usize && data.len() == 4 {
            self.engine.send(Control::Kick);
            return Ok(());
        }
        let Some(reg) = aligned_register(start, data.len()) else {
            self.bad_access("write", offset, data.len());
            return Ok(());
        };
        let value = u32::from_le_bytes(data.try_into().expect("aligned_register checks the width"));
        match reg {
            regs::REG_CONTROL => {
                if value & regs::CONTROL_RESET != 0 {
                    self.reset();
                } else if self.regs.enabled() && value & regs::CONTROL_ENABLE == 0 {
                    // Disabling quiesces the device: the driver is letting go of it.
                    info!("device disabled: destroying all objects");
                    self.engine.reset();
                    self.regs.set_admin_state(0, false);
                }
                self.regs.set_control(value & regs::CONTROL_ENABLE);
            }
            regs::REG_ADMIN_SQ_BASE_LO
            | regs::REG_ADMIN_SQ_BASE_HI
            | regs::REG_ADMIN_CQ_BASE_LO
            | regs::REG_ADMIN_CQ_BASE_HI => {
                if self.regs.admin_enabled() {
                    self.bad_access("write (admin queue enabled)", offset, data.len());
                } else {
                    self.regs.set_admin_base(reg, value);
                }
            }
            regs::REG_ADMIN_DEPTH => self.set_admin_depth(value),
            regs::REG_ADMIN_SQ_TAIL => {
                if self.regs.admin_enabled() {
                    self.engine.send(Control::AdminSqTail(value));
                }
            }
            regs::REG_ADMIN_CQ_HEAD => {
                self.regs.set_admin_cq_head(value);
                if self.regs.admin_enabled() {
                    self.engine.send(Control::AdminCqHead(value));
                }
            }
            regs::REG_SCRATCH => self.regs.set_scratch(value),
            regs::REG_IRQ_TEST => {
                if (value as usize) < self.irqs.count() {
                    let delivered = self.irqs.raise(value as usize);
                    info!(
                        "interrupt test: vector {value} {}",
                        if delivered {
                            "raised"
                        } else {
                            "has no eventfd yet"
                        }
                    );
                } else {
                    self.counters.bad_irq_test_vectors += 1;
                    warn!("interrupt test: no vector {value}; ignored");
                }
            }
            _ => self.bad_access("write", offset, data.len()),
        }
        Ok(())
    }

    /// A write to REG_ADMIN_DEPTH: 0 disables the admin queue; a valid depth enables it if
    /// both rings lie, aligned, in guest RAM; anything else sets STATUS_ADMIN_ERROR.
    fn set_admin_depth(&mut self, depth: u32) {
        if depth == 0 {
            self.regs.set_admin_state(0, false);
            self.engine.send(Control::AdminDisable);
            return;
        }
        let (sq, cq) = self.regs.admin_bases();
        let mem = self.ram.memory().memory();
        let fits = |base: u64, entry: u64| {
            base.is_multiple_of(64)
                && crate::engine::memory::in_ram(&mem, base, depth as u64 * entry)
        };
        let valid = self.regs.enabled()
            && crate::engine::memory::valid_depth(depth, abi_admin::ADMIN_MAX_DEPTH)
            && fits(sq, 64)
            && fits(cq, 32);
        if valid {
            self.regs.set_admin_state(depth, false);
            self.engine.send(Control::AdminEnable { sq, cq, depth });
            info!("admin queue enabled: depth {depth}, submissions at {sq:#x}, completions at {cq:#x}");
        } else {
            warn!("admin queue setup refused: depth {depth}, submissions at {sq:#x}, completions at {cq:#x} (device enabled: {})", self.regs.enabled());
            self.regs.set_admin_state(0, true);
            self.engine.send(Control::AdminDisable);
        }
    }

    pub fn registers(&self) -> &RegisterFile {
        &self.regs
    }

    fn bad_access(&mut self, what: &str, offset: u64, len: usize) {
        self.counters.bad_register_accesses += 1;
        warn!("control BAR {what} of {len} bytes at {offset:#x}: not a register access; ignored");
    }
}

fn check_bar_range(offset: u64, len: usize, bar_size: u32) -> io::Result<usize> {
    usize::try_from(offset)
        .ok()
        .filter(|&o| o.checked_add(len).is_some_and(|e| e <= bar_size as usize))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("BAR access of {len} bytes at {offset:#x} is outside the {bar_size:#x}-byte BAR"),
            )
        })
}

fn msix_table_range(start: usize, len: usize) -> Option<std::ops::Range<usize>> {
    let table = abi_pci::MSIX_TABLE_OFFSET as usize;
    let table_end = table + abi_pci::MSIX_VECTORS as usize * 16;
    (start >= table && start + len <= table_end).then(|| start - table..start - table + len)
}

/// The register offset of a naturally aligned 32-bit access inside the register file.
fn aligned_register(start: usize, len: usize) -> Option<u32> {
    (len == 4 && start.is_multiple_of(4) && start < regs::REGS_END as usize).then_some(start as u32)
}

#[cfg(test)]
mod tests;
