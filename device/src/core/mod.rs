//! The device core: what the registers mean and the state behind them, independent of how
//! accesses arrive (vfio-user today; the glue is in [`crate::vfio`]). Like QEMU's `igb_core.c`
//! beside `igb.c`: the engine grows here, the PCI plumbing stays there.

mod registers;

use std::io;

use log::{info, warn};
use qpip_abi::{pci as abi_pci, regs};

use crate::dma::GuestRam;
use crate::doorbell::DoorbellBar;
use crate::irq::Interrupts;

pub use registers::RegisterFile;

/// Options fixed when the device starts.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Interface major version reported in [`regs::REG_VERSION`]. Always
    /// [`qpip_abi::ABI_VERSION_MAJOR`] except in tests of a driver's version check.
    pub advertised_abi_major: u16,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            advertised_abi_major: qpip_abi::ABI_VERSION_MAJOR,
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

pub struct DeviceCore {
    regs: RegisterFile,
    pub doorbells: DoorbellBar,
    pub irqs: Interrupts,
    pub ram: GuestRam,
    msix_table: Vec<u8>,
    pub counters: Counters,
}

impl DeviceCore {
    pub fn new(config: CoreConfig) -> io::Result<Self> {
        Ok(DeviceCore {
            regs: RegisterFile::new(config.advertised_abi_major),
            doorbells: DoorbellBar::new(abi_pci::DOORBELL_BAR_SIZE as usize)?,
            irqs: Interrupts::new(abi_pci::MSIX_VECTORS as usize),
            ram: GuestRam::new(),
            msix_table: vec![0; abi_pci::MSIX_VECTORS as usize * 16],
            counters: Counters::default(),
        })
    }

    /// Function-level reset: every read-write register back to 0, doorbells cleared, all
    /// device state built by the driver dropped. DMA maps and interrupt eventfds belong to
    /// the VMM, not to the function, and survive.
    pub fn reset(&mut self) {
        self.regs.reset();
        self.doorbells.clear();
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
        let Some(reg) = aligned_register(start, data.len()) else {
            self.bad_access("write", offset, data.len());
            return Ok(());
        };
        let value = u32::from_le_bytes(data.try_into().expect("aligned_register checks the width"));
        match reg {
            regs::REG_CONTROL => {
                if value & regs::CONTROL_RESET != 0 {
                    self.reset();
                }
                self.regs.set_control(value & regs::CONTROL_ENABLE);
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
    (len == 4 && start % 4 == 0 && start < regs::REGS_END as usize).then_some(start as u32)
}

#[cfg(test)]
mod tests;
