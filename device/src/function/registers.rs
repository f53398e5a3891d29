//! The control register file's values (what a read returns), apart from the side effects of
//! writes, which [`super::FunctionCore::ctrl_write`] performs.

use qpip_abi::{pci as abi_pci, regs};

#[derive(Default)]
pub struct RegisterFile {
    advertised_abi_major: u16,
    control: u32,
    scratch: u32,
    reset_count: u32,
    admin_sq_base: u64,
    admin_cq_base: u64,
    admin_depth: u32,
    admin_cq_head: u32,
    admin_enabled: bool,
    admin_error: bool,
}

impl RegisterFile {
    pub fn new(advertised_abi_major: u16) -> Self {
        RegisterFile {
            advertised_abi_major,
            ..Default::default()
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
                let mut s = 0;
                if self.enabled() {
                    s |= regs::STATUS_READY;
                }
                if self.admin_enabled {
                    s |= regs::STATUS_ADMIN_ENABLED;
                }
                if self.admin_error {
                    s |= regs::STATUS_ADMIN_ERROR;
                }
                s
            }
            regs::REG_ADMIN_SQ_BASE_LO => self.admin_sq_base as u32,
            regs::REG_ADMIN_SQ_BASE_HI => (self.admin_sq_base >> 32) as u32,
            regs::REG_ADMIN_CQ_BASE_LO => self.admin_cq_base as u32,
            regs::REG_ADMIN_CQ_BASE_HI => (self.admin_cq_base >> 32) as u32,
            regs::REG_ADMIN_DEPTH => self.admin_depth,
            regs::REG_ADMIN_SQ_TAIL => 0, // write-only doorbell
            regs::REG_ADMIN_CQ_HEAD => self.admin_cq_head,
            regs::REG_SCRATCH => self.scratch,
            regs::REG_RESET_COUNT => self.reset_count,
            regs::REG_IRQ_TEST => 0, // write-only
            _ => return None,
        })
    }

    pub fn reset(&mut self) {
        *self = RegisterFile {
            advertised_abi_major: self.advertised_abi_major,
            reset_count: self.reset_count.wrapping_add(1),
            ..Default::default()
        };
    }

    pub fn enabled(&self) -> bool {
        self.control & regs::CONTROL_ENABLE != 0
    }

    pub fn admin_enabled(&self) -> bool {
        self.admin_enabled
    }

    /// Records the admin queue's depth (0: disabled) and whether its last setup was refused.
    pub fn set_admin_state(&mut self, depth: u32, error: bool) {
        self.admin_enabled = depth != 0;
        self.admin_depth = depth;
        self.admin_error = error;
    }

    pub fn set_admin_base(&mut self, reg: u32, value: u32) {
        let (field, high) = match reg {
            regs::REG_ADMIN_SQ_BASE_LO => (&mut self.admin_sq_base, false),
            regs::REG_ADMIN_SQ_BASE_HI => (&mut self.admin_sq_base, true),
            regs::REG_ADMIN_CQ_BASE_LO => (&mut self.admin_cq_base, false),
            _ => (&mut self.admin_cq_base, true),
        };
        *field = if high {
            (*field & 0xffff_ffff) | (value as u64) << 32
        } else {
            (*field & !0xffff_ffff) | value as u64
        };
    }

    pub fn admin_bases(&self) -> (u64, u64) {
        (self.admin_sq_base, self.admin_cq_base)
    }

    pub fn set_admin_cq_head(&mut self, v: u32) {
        self.admin_cq_head = v;
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
