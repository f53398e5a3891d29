//! PCI identity and BAR layout of the qpip function.
//!
//! IDs: qpip is an emulated device that never ships in silicon, so it has no vendor ID of
//! its own. It uses vendor 0x1234, the unassigned ID that QEMU's own emulated test devices
//! (`edu`, the standard VGA) use, with a device ID no QEMU device uses ("QP" = 0x5150).
//! Class 0x0280 is "network controller, other": the function is a network adapter, but not
//! one an Ethernet driver could drive, so no other driver binds to it by class.

/// PCI vendor ID (config offset 0x00).
pub const PCI_VENDOR_ID: u16 = 0x1234;
/// PCI device ID (config offset 0x02).
pub const PCI_DEVICE_ID: u16 = 0x5150;
/// Subsystem vendor ID (config offset 0x2c).
pub const PCI_SUBSYSTEM_VENDOR_ID: u16 = 0x1234;
/// Subsystem ID (config offset 0x2e).
pub const PCI_SUBSYSTEM_ID: u16 = 0x0001;
/// Class code, 24 bits: base class 0x02 (network), subclass 0x80 (other), prog-if 0.
pub const PCI_CLASS_CODE: u32 = 0x02_80_00;
/// Revision ID (config offset 0x08). Bumped with hardware-visible changes of the function
/// itself; the interface version is in the [`crate::regs::REG_VERSION`] register.
/// Revision 2 added the Advanced Features capability ([`PCI_CAP_AF_OFFSET`]).
pub const PCI_REVISION_ID: u8 = 0x02;

/// BAR holding the control registers and the MSI-X table and PBA. Every access to it traps
/// to the device (it is never mmapped), so writes here are synchronous but slow: use it for
/// bring-up, the admin doorbell and the kick register, never on the fast path.
pub const CTRL_BAR: u32 = 0;
/// Size of [`CTRL_BAR`] in bytes (32-bit, non-prefetchable memory BAR).
pub const CTRL_BAR_SIZE: u32 = 0x4000;

/// BAR holding the doorbell pages: one 4 KiB page per user context, shared memory that the
/// guest writes and the engine polls (no trap, no exit). 64-bit prefetchable memory BAR,
/// so it occupies BAR slots 2 and 3.
pub const DOORBELL_BAR: u32 = 2;
/// Size of one doorbell page. A context is given exactly one page, so a process can be
/// mapped its own page and nothing else.
pub const DOORBELL_PAGE_SIZE: u32 = 4096;
/// Number of doorbell pages, and so the maximum number of contexts.
pub const DOORBELL_PAGES: u32 = 64;
/// Size of [`DOORBELL_BAR`] in bytes.
pub const DOORBELL_BAR_SIZE: u32 = DOORBELL_PAGE_SIZE * DOORBELL_PAGES;

/// Number of MSI-X vectors. Vector 0 is for the admin queue and asynchronous events; the
/// others are for completion queues.
pub const MSIX_VECTORS: u16 = 16;
/// Offset of the MSI-X table inside [`CTRL_BAR`] (16 bytes per vector).
pub const MSIX_TABLE_OFFSET: u32 = 0x2000;
/// Offset of the MSI-X pending bit array inside [`CTRL_BAR`].
pub const MSIX_PBA_OFFSET: u32 = 0x3000;
/// Offset of the MSI-X capability in PCI config space.
pub const PCI_CAP_MSIX_OFFSET: u8 = 0x40;
/// Offset of the PCI Advanced Features capability (ID 0x13) in config space: the
/// function-level reset of conventional PCI. Its capabilities byte advertises FLR and
/// "transactions pending"; writing 1 to the initiate-FLR bit of its control byte resets the
/// function (as `regs::CONTROL_RESET` does, and config space too) before the write
/// completes. The MSI-X capability's next pointer leads here; this is the last one.
pub const PCI_CAP_AF_OFFSET: u8 = 0x50;
