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
/// Revision 2 added the Advanced Features capability ([`PCI_CAP_AF_OFFSET`]); revision 3
/// dropped the doorbell BAR (BAR2/3): the function has one BAR, [`CTRL_BAR`].
pub const PCI_REVISION_ID: u8 = 0x03;

/// BAR holding the control registers and the MSI-X table and PBA. Every access to it traps
/// to the device (it is never mmapped), so writes here are synchronous but slow: use it for
/// bring-up, the admin doorbell and the kick register, never on the fast path.
pub const CTRL_BAR: u32 = 0;
/// Size of [`CTRL_BAR`] in bytes (32-bit, non-prefetchable memory BAR).
pub const CTRL_BAR_SIZE: u32 = 0x4000;

/// Size of one doorbell page. A context's doorbell page is a page of guest RAM that the
/// driver allocates and names when it creates the context (see [`crate::doorbell`]), so a
/// process can be mapped its own page and nothing else.
///
/// Why not a BAR: QEMU's vfio-user client sends BAR writes as posted messages (the vCPU
/// does not wait for the device) only while no region of the device is mmappable; one
/// mmappable BAR makes every trapped write, the kick among them, a synchronous round trip
/// with the vCPU held. With the doorbells in guest RAM the function has no mmappable
/// region at all, and a kick costs the guest one posted write.
pub const DOORBELL_PAGE_SIZE: u32 = 4096;
/// The most contexts (and so doorbell pages) the device serves at once.
pub const DOORBELL_PAGES: u32 = 64;

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
