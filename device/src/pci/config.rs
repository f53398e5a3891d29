//! Emulated PCI configuration space (type 0 header, 256 bytes).
//!
//! The whole space is a byte array plus a per-byte mask of writable bits and a mask of
//! write-1-to-clear bits. A write of any width at any offset is applied byte by byte through
//! those masks, so BAR sizing (write all ones, read back the size mask), the command register
//! and the MSI-X control bits behave like hardware without special cases, and no guest write
//! can change a read-only field (IDs, class, capability list, BAR type bits). The one write
//! with an effect beyond its bytes is the Advanced Features capability's initiate-FLR bit,
//! which [`ConfigSpace::write`] reports so the function resets itself.

use qpip_abi::pci as abi;

/// Size of conventional PCI configuration space. QEMU's vfio client takes a 256-byte config
/// region to mean "not PCI Express", which is what this function is.
pub const CONFIG_SPACE_SIZE: usize = 256;

// Standard header offsets (PCI Local Bus spec 3.0, §6.1).
const VENDOR_ID: usize = 0x00;
const DEVICE_ID: usize = 0x02;
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const REVISION_ID: usize = 0x08;
const CLASS_PROG_IF: usize = 0x09;
const HEADER_TYPE: usize = 0x0e;
const BAR0: usize = 0x10;
const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
const SUBSYSTEM_ID: usize = 0x2e;
const CAPABILITIES_POINTER: usize = 0x34;
const INTERRUPT_LINE: usize = 0x3c;

const COMMAND_IO: u16 = 1 << 0;
const COMMAND_MEMORY: u16 = 1 << 1;
const COMMAND_BUS_MASTER: u16 = 1 << 2;
const COMMAND_SERR: u16 = 1 << 8;
const COMMAND_INTX_DISABLE: u16 = 1 << 10;
const STATUS_CAPABILITIES_LIST: u16 = 1 << 4;
/// Status bits a real device would set on errors; write-1-to-clear. We never set them, but
/// the masks make them behave correctly if a later step does.
const STATUS_ERROR_BITS: u16 = 0xf900;

const CAP_ID_MSIX: u8 = 0x11;
/// PCI Advanced Features (conventional PCI's function-level reset, PCI Code and ID
/// Assignment spec; Linux's `pci_af_flr`).
const CAP_ID_AF: u8 = 0x13;
/// Length of the AF capability in bytes (its own length field says so).
const AF_LENGTH: u8 = 6;
/// AF capabilities: bit 0 transactions pending (TP) reported, bit 1 FLR supported.
const AF_CAP_TP_FLR: u8 = 0b11;
/// AF control (capability + 4): bit 0 initiates an FLR (reads as 0).
const AF_CONTROL_FLR: u8 = 1 << 0;
/// MSI-X message control: bit 15 enable, bit 14 function mask (RW); bits 10:0 table size - 1.
const MSIX_CONTROL_ENABLE: u16 = 1 << 15;
const MSIX_CONTROL_MASK_ALL: u16 = 1 << 14;

/// Configuration space of one qpip function.
#[derive(Clone)]
pub struct ConfigSpace {
    bytes: [u8; CONFIG_SPACE_SIZE],
    writable: [u8; CONFIG_SPACE_SIZE],
    write_one_to_clear: [u8; CONFIG_SPACE_SIZE],
    initial: [u8; CONFIG_SPACE_SIZE],
}

/// What a config write asks of the function besides changing bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteEffect {
    None,
    /// The guest initiated a function-level reset (AF capability): reset the whole
    /// function, this space included, before the write completes.
    FunctionReset,
}

/// Why a config access was refused. The caller logs it and counts it; nothing panics.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfRange {
    pub offset: u64,
    pub len: usize,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "config space access of {} bytes at {:#x} is outside the {CONFIG_SPACE_SIZE}-byte space",
            self.len, self.offset
        )
    }
}

impl ConfigSpace {
    /// The qpip function's configuration space as it is after power-on or reset.
    pub fn new() -> Self {
        let mut c = ConfigSpace {
            bytes: [0; CONFIG_SPACE_SIZE],
            writable: [0; CONFIG_SPACE_SIZE],
            write_one_to_clear: [0; CONFIG_SPACE_SIZE],
            initial: [0; CONFIG_SPACE_SIZE],
        };
        c.put16(VENDOR_ID, abi::PCI_VENDOR_ID);
        c.put16(DEVICE_ID, abi::PCI_DEVICE_ID);
        c.put16(STATUS, STATUS_CAPABILITIES_LIST);
        c.bytes[REVISION_ID] = abi::PCI_REVISION_ID;
        let class = abi::PCI_CLASS_CODE.to_le_bytes();
        c.bytes[CLASS_PROG_IF..CLASS_PROG_IF + 3].copy_from_slice(&class[..3]);
        c.bytes[HEADER_TYPE] = 0x00; // type 0, single function
        c.put16(SUBSYSTEM_VENDOR_ID, abi::PCI_SUBSYSTEM_VENDOR_ID);
        c.put16(SUBSYSTEM_ID, abi::PCI_SUBSYSTEM_ID);
        c.bytes[CAPABILITIES_POINTER] = abi::PCI_CAP_MSIX_OFFSET;

        // The function has no INTx pin (MSI-X only), so the interrupt pin stays 0; the
        // interrupt line is a scratch byte for firmware.
        c.writable[INTERRUPT_LINE] = 0xff;
        c.mask16(
            COMMAND,
            COMMAND_IO | COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_SERR | COMMAND_INTX_DISABLE,
        );
        c.write_one_to_clear[STATUS..STATUS + 2].copy_from_slice(&STATUS_ERROR_BITS.to_le_bytes());

        // BAR0: control registers, 32-bit non-prefetchable memory.
        c.bar32(abi::CTRL_BAR as usize, abi::CTRL_BAR_SIZE, 0);

        // MSI-X capability: table and PBA both in the control BAR (QEMU emulates the table
        // itself, which is why it must be in a BAR that is not mmapped).
        let m = abi::PCI_CAP_MSIX_OFFSET as usize;
        c.bytes[m] = CAP_ID_MSIX;
        c.bytes[m + 1] = abi::PCI_CAP_AF_OFFSET;
        c.put16(m + 2, abi::MSIX_VECTORS - 1);
        c.mask16(m + 2, MSIX_CONTROL_ENABLE | MSIX_CONTROL_MASK_ALL);
        c.put32(m + 4, abi::MSIX_TABLE_OFFSET | abi::CTRL_BAR);
        c.put32(m + 8, abi::MSIX_PBA_OFFSET | abi::CTRL_BAR);

        // Advanced Features: FLR for a conventional PCI function, which is what lets the
        // guest's PCI core reset it (/sys/bus/pci/devices/*/reset). The control byte stays
        // 0 in the space (the FLR bit reads 0); `write` reports the request. Transactions
        // pending (status, +5) is always 0: a reset waits for nothing.
        let a = abi::PCI_CAP_AF_OFFSET as usize;
        c.bytes[a] = CAP_ID_AF;
        c.bytes[a + 1] = 0; // end of the capability list
        c.bytes[a + 2] = AF_LENGTH;
        c.bytes[a + 3] = AF_CAP_TP_FLR;

        c.initial = c.bytes;
        c
    }

    /// Back to the power-on state (function-level reset): BAR addresses, command register,
    /// MSI-X enable are all cleared; read-only fields are unchanged by construction.
    pub fn reset(&mut self) {
        self.bytes = self.initial;
    }

    /// Reads `data.len()` bytes at `offset`. Any width and alignment inside the space is
    /// allowed (QEMU reads the whole space at once when it attaches).
    pub fn read(&self, offset: u64, data: &mut [u8]) -> Result<(), OutOfRange> {
        let range = self.range(offset, data.len())?;
        data.copy_from_slice(&self.bytes[range]);
        Ok(())
    }

    /// Applies a write through the writable and write-1-to-clear masks, and says whether it
    /// initiated a function-level reset (which the caller performs).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<WriteEffect, OutOfRange> {
        let range = self.range(offset, data.len())?;
        let flr_at = abi::PCI_CAP_AF_OFFSET as usize + 4;
        let mut effect = WriteEffect::None;
        for (i, &value) in range.zip(data) {
            let keep = self.bytes[i] & !self.writable[i];
            let cleared = value & self.write_one_to_clear[i];
            self.bytes[i] = (keep | (value & self.writable[i])) & !cleared;
            if i == flr_at && value & AF_CONTROL_FLR != 0 {
                effect = WriteEffect::FunctionReset;
            }
        }
        Ok(effect)
    }

    /// Reads a little-endian 16-bit field (for the device's own use, e.g. MSI-X enable).
    pub fn read16(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.bytes[offset], self.bytes[offset + 1]])
    }

    /// Reads a little-endian 32-bit field.
    pub fn read32(&self, offset: usize) -> u32 {
        u32::from_le_bytes(self.bytes[offset..offset + 4].try_into().unwrap())
    }

    /// Whether the guest has enabled MSI-X and not masked the whole function.
    pub fn msix_enabled(&self) -> bool {
        let control = self.read16(abi::PCI_CAP_MSIX_OFFSET as usize + 2);
        control & MSIX_CONTROL_ENABLE != 0 && control & MSIX_CONTROL_MASK_ALL == 0
    }

    /// Whether bus mastering (DMA) is enabled in the command register.
    pub fn bus_master(&self) -> bool {
        self.read16(COMMAND) & COMMAND_BUS_MASTER != 0
    }

    fn range(&self, offset: u64, len: usize) -> Result<std::ops::Range<usize>, OutOfRange> {
        let err = OutOfRange { offset, len };
        let start = usize::try_from(offset).map_err(|_| OutOfRange { offset, len })?;
        let end = start.checked_add(len).ok_or(OutOfRange { offset, len })?;
        if end > CONFIG_SPACE_SIZE {
            return Err(err);
        }
        Ok(start..end)
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn mask16(&mut self, off: usize, bits: u16) {
        self.writable[off..off + 2].copy_from_slice(&bits.to_le_bytes());
    }

    /// A 32-bit memory BAR: the address bits above the size are writable, the type bits and
    /// the bits below the size are not, so writing all ones reads back the size mask.
    fn bar32(&mut self, index: usize, size: u32, flags: u32) {
        debug_assert!(size.is_power_of_two() && size >= 16);
        let off = BAR0 + 4 * index;
        self.put32(off, flags);
        self.writable[off..off + 4].copy_from_slice(&(!(size - 1)).to_le_bytes());
    }
}

impl Default for ConfigSpace {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r32(c: &ConfigSpace, off: u64) -> u32 {
        let mut b = [0; 4];
        c.read(off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    #[test]
    fn identity_fields_come_from_the_abi() {
        let c = ConfigSpace::new();
        assert_eq!(
            r32(&c, 0),
            (abi::PCI_DEVICE_ID as u32) << 16 | abi::PCI_VENDOR_ID as u32
        );
        assert_eq!(
            r32(&c, 8),
            abi::PCI_CLASS_CODE << 8 | abi::PCI_REVISION_ID as u32
        );
        assert_eq!(
            r32(&c, 0x2c),
            (abi::PCI_SUBSYSTEM_ID as u32) << 16 | abi::PCI_SUBSYSTEM_VENDOR_ID as u32
        );
    }

    #[test]
    fn read_only_fields_ignore_writes() {
        let mut c = ConfigSpace::new();
        let before = c.bytes;
        c.write(0, &[0xff; 4]).unwrap(); // vendor/device
        c.write(8, &[0xff; 4]).unwrap(); // class/revision
        c.write(0x34, &[0xff]).unwrap(); // capability pointer
        c.write(abi::PCI_CAP_MSIX_OFFSET as u64, &[0xff; 12])
            .unwrap();
        assert_eq!(c.bytes[..0x10], before[..0x10]);
        assert_eq!(c.bytes[0x34], before[0x34]);
        // Only the enable and mask bits of the MSI-X control word moved.
        let m = abi::PCI_CAP_MSIX_OFFSET as usize;
        assert_eq!(c.read16(m + 2), (abi::MSIX_VECTORS - 1) | 0xc000);
        assert_eq!(c.read32(m + 4), before_u32(&before, m + 4));
    }

    fn before_u32(b: &[u8; CONFIG_SPACE_SIZE], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn bar_sizing_reports_sizes_and_type_bits() {
        let mut c = ConfigSpace::new();
        for bar in 0..6u64 {
            c.write(0x10 + 4 * bar, &[0xff; 4]).unwrap();
        }
        assert_eq!(r32(&c, 0x10), !(abi::CTRL_BAR_SIZE - 1));
        // Unused BARs stay zero: the function has exactly one.
        for bar in 1..6u64 {
            assert_eq!(r32(&c, 0x10 + 4 * bar), 0);
        }
    }

    #[test]
    fn capability_list_leads_to_msix_then_advanced_features() {
        let c = ConfigSpace::new();
        assert_ne!(c.read16(STATUS) & STATUS_CAPABILITIES_LIST, 0);
        let cap = c.bytes[CAPABILITIES_POINTER] as usize;
        assert_eq!(c.bytes[cap], CAP_ID_MSIX);
        let af = c.bytes[cap + 1] as usize;
        assert_eq!(af, abi::PCI_CAP_AF_OFFSET as usize);
        assert_eq!(af % 4, 0, "capabilities are dword aligned");
        assert!(af >= cap + 12, "AF does not overlap MSI-X");
        assert_eq!(
            c.bytes[af..af + 6],
            [CAP_ID_AF, 0, AF_LENGTH, 0b11, 0, 0],
            "AF: end of list, length 6, TP and FLR capable, control and status 0"
        );
        assert_eq!((c.read16(cap + 2) & 0x7ff) + 1, abi::MSIX_VECTORS);
        assert_eq!(c.read32(cap + 4), abi::MSIX_TABLE_OFFSET | abi::CTRL_BAR);
        assert_eq!(c.read32(cap + 8), abi::MSIX_PBA_OFFSET | abi::CTRL_BAR);
    }

    #[test]
    fn writing_the_af_flr_bit_asks_for_a_function_reset() {
        let mut c = ConfigSpace::new();
        let af = abi::PCI_CAP_AF_OFFSET as u64;
        // Linux's pci_af_flr: a byte write of the FLR bit to the control byte.
        assert_eq!(c.write(af + 4, &[1]).unwrap(), WriteEffect::FunctionReset);
        assert_eq!(c.bytes[af as usize + 4], 0, "the FLR bit reads as 0");
        // Also as part of a wider write; other bits and other bytes ask nothing.
        assert_eq!(
            c.write(af + 4, &[1, 0]).unwrap(),
            WriteEffect::FunctionReset
        );
        assert_eq!(c.write(af, &[0xff; 4]).unwrap(), WriteEffect::None);
        assert_eq!(c.write(af + 4, &[0xfe]).unwrap(), WriteEffect::None);
        assert_eq!(c.write(af + 5, &[0xff]).unwrap(), WriteEffect::None);
        assert_eq!(
            c.read32(af as usize),
            0x0306_0013,
            "the capability is read-only"
        );
    }

    #[test]
    fn msix_enable_and_reset() {
        let mut c = ConfigSpace::new();
        assert!(!c.msix_enabled());
        c.write(abi::PCI_CAP_MSIX_OFFSET as u64 + 3, &[0x80])
            .unwrap();
        assert!(c.msix_enabled());
        c.write(abi::PCI_CAP_MSIX_OFFSET as u64 + 3, &[0xc0])
            .unwrap();
        assert!(!c.msix_enabled(), "function mask wins");
        c.write(4, &[0x06, 0]).unwrap();
        assert!(c.bus_master());
        c.reset();
        assert!(!c.msix_enabled());
        assert!(!c.bus_master());
    }

    #[test]
    fn out_of_range_accesses_are_refused_not_panics() {
        let mut c = ConfigSpace::new();
        let mut b = [0u8; 8];
        assert!(c.read(252, &mut b).is_err());
        assert!(c.read(u64::MAX, &mut b[..1]).is_err());
        assert!(c.write(256, &[1]).is_err());
        assert!(c.write(u64::MAX - 1, &[1, 2, 3]).is_err());
        let mut whole = [0u8; CONFIG_SPACE_SIZE];
        c.read(0, &mut whole).unwrap();
    }

    #[test]
    fn status_error_bits_are_write_one_to_clear() {
        let mut c = ConfigSpace::new();
        c.bytes[STATUS + 1] |= 0x80; // pretend a parity error was detected
        c.write(STATUS as u64, &[0, 0x80]).unwrap();
        assert_eq!(c.bytes[STATUS + 1] & 0x80, 0);
        assert_ne!(
            c.read16(STATUS) & STATUS_CAPABILITIES_LIST,
            0,
            "RO bit kept"
        );
    }
}
