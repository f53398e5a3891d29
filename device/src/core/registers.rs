//! The control register file's values (what a read returns), apart from the side effects of
//! writes, which [`super::DeviceCore::ctrl_write`] performs.

use qpip_abi::{pci as abi_pci, regs};

pub struct RegisterFile {
    advertised_abi_major: u16,
    control: u32,
    scratch: u32,
    reset_count: u32,
}

impl RegisterFile {
    pub fn new(advertised_abi_major: u16) -> Self {
        RegisterFile {
            advertised_abi_major,
            control: 0,
            scratch: 0,
            reset_count: 0,
        }
    }

    /// The value of register `reg`, or `None` for a reserved offset.
    pub fn read(&self, reg: u32) -> Option<u32> {
        Some(match reg {
            regs::REG_IDENT => regs::IDENT_MAGIC,
            regs::REG_VERSION => {
                (self.advertised_abi_major as u32) << regs::VERSION_MAJOR_SHIFT
                    | qpip_abi::ABI_VERSION_MINOR as u32
            }
            regs::REG_DOORBELL_PAGES => abi_pci::DOORBELL_PAGES,
            regs::REG_MSIX_VECTORS => abi_pci::MSIX_VECTORS as u32,
            regs::REG_CONTROL => self.control,
            regs::REG_STATUS => {
                if self.control & regs::CONTROL_ENABLE != 0 {
                    regs::STATUS_READY
                } else {
                    0
                }
            }
            regs::REG_SCRATCH => self.scratch,
            regs::REG_RESET_COUNT => self.reset_count,
            regs::REG_IRQ_TEST => 0, // write-only
            _ => return None,
        })
    }

    pub fn reset(&mut self) {
        self.control = 0;
        self.scratch = 0;
        self.reset_count = self.reset_count.wrapping_add(1);
    }

    pub fn set_control(&mut self, value: u32) {
        self.control = value;
    }

    pub fn set_scratch(&mut self, value: u32) {
        self.scratch = value;
    }

    pub fn reset_count(&self) -> u32 {
        self.reset_count
    }
}
