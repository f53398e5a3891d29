//! Control registers in [`crate::pci::CTRL_BAR`]. All registers are 32 bits wide,
//! little-endian, and must be accessed with naturally aligned 32-bit reads and writes;
//! other accesses read as zero and are ignored on write (and counted by the device).
//!
//! What reset clears: a function-level reset (PCI FLR, the vfio reset, or
//! [`CONTROL_RESET`]) returns every read-write register to 0 and drops all device state
//! built by the driver; read-only identity registers keep their values.

/// Identity (RO): [`IDENT_MAGIC`]. The first thing a driver reads: anything else means this
/// is not a qpip function or the BAR is not mapped.
pub const REG_IDENT: u32 = 0x000;
/// The value of [`REG_IDENT`]: the bytes "QPIP" in memory order.
pub const IDENT_MAGIC: u32 = 0x5049_5051;

/// Interface version (RO): major in bits 31..16, minor in bits 15..0.
/// See [`crate::ABI_VERSION_MAJOR`].
pub const REG_VERSION: u32 = 0x004;
/// Shift of the major number in [`REG_VERSION`].
pub const VERSION_MAJOR_SHIFT: u32 = 16;
/// Mask of the minor number in [`REG_VERSION`].
pub const VERSION_MINOR_MASK: u32 = 0xffff;

/// The most contexts the device serves at once ([`crate::pci::DOORBELL_PAGES`]) (RO).
pub const REG_DOORBELL_PAGES: u32 = 0x008;
/// Number of MSI-X vectors (RO).
pub const REG_MSIX_VECTORS: u32 = 0x00c;

/// Device control (RW).
pub const REG_CONTROL: u32 = 0x010;
/// [`REG_CONTROL`] bit: the driver enables the device. Cleared by reset.
pub const CONTROL_ENABLE: u32 = 1 << 0;
/// [`REG_CONTROL`] bit: write 1 to reset the device (same effect as a function-level reset).
/// Self-clearing: reads back as 0 once the reset is complete, which it is by the time the
/// write returns.
pub const CONTROL_RESET: u32 = 1 << 1;

/// Device status (RO).
pub const REG_STATUS: u32 = 0x014;
/// [`REG_STATUS`] bit: the device is enabled and ready (mirrors [`CONTROL_ENABLE`]).
pub const STATUS_READY: u32 = 1 << 0;

/// Scratch register (RW): no effect on the device. Lets a driver or test prove that
/// trapped writes reach the device and read back.
pub const REG_SCRATCH: u32 = 0x018;

/// Number of resets the device has performed since it started (RO, wraps). Lets a driver
/// and tests observe that a reset really happened.
pub const REG_RESET_COUNT: u32 = 0x01c;

/// Interrupt test (WO): writing a vector number `n` makes the device raise MSI-X vector `n`
/// once (if MSI-X is enabled and the vector is set up). Lets a driver prove at bring-up
/// that interrupts really arrive, like the "interrupt cause set" registers of real NICs.
/// A write of a number >= the vector count is ignored and counted.
pub const REG_IRQ_TEST: u32 = 0x020;

/// Admin submission queue base, guest-physical, low 32 bits (RW). Must be 64-byte aligned.
/// Written while the admin queue is disabled ([`REG_ADMIN_DEPTH`] = 0); see [`REG_ADMIN_DEPTH`].
pub const REG_ADMIN_SQ_BASE_LO: u32 = 0x040;
/// Admin submission queue base, high 32 bits (RW).
pub const REG_ADMIN_SQ_BASE_HI: u32 = 0x044;
/// Admin completion queue base, guest-physical, low 32 bits (RW). Must be 64-byte aligned.
pub const REG_ADMIN_CQ_BASE_LO: u32 = 0x048;
/// Admin completion queue base, high 32 bits (RW).
pub const REG_ADMIN_CQ_BASE_HI: u32 = 0x04c;
/// Admin queue depth in entries (RW), the same for both rings: a power of two from 2 to
/// [`crate::admin::ADMIN_MAX_DEPTH`]. Writing a valid depth enables the admin queue with the
/// bases written before (both rings must lie in guest RAM, or [`STATUS_ADMIN_ERROR`] is set
/// and the queue stays disabled); writing 0 disables it. Enabling resets both indices to 0.
pub const REG_ADMIN_DEPTH: u32 = 0x050;
/// Admin submission doorbell (WO): the driver writes its producer index (free-running,
/// wraps at 2^32) after writing the commands. Reads as 0.
pub const REG_ADMIN_SQ_TAIL: u32 = 0x054;
/// Admin completion consumer index (RW): the driver writes how many completions it has
/// consumed (free-running). The device never overwrites a completion the driver has not
/// consumed: it stops taking commands while the completion ring is full.
pub const REG_ADMIN_CQ_HEAD: u32 = 0x058;
/// [`REG_STATUS`] bit: the admin queue is enabled.
pub const STATUS_ADMIN_ENABLED: u32 = 1 << 1;
/// [`REG_STATUS`] bit: the last write to [`REG_ADMIN_DEPTH`] was refused (bad depth, or a
/// ring outside guest RAM or misaligned). Cleared by the next write of a valid setup.
pub const STATUS_ADMIN_ERROR: u32 = 1 << 2;
/// [`REG_STATUS`] bit: the function has failed. The device met a fault of its own while
/// serving this function (in qpipd, a panic in its engine: a bug, which an arithmetic
/// overflow also becomes) and dropped the function's state: every object is gone, the device
/// no longer reads or writes the guest's memory, and admin commands get no completions.
/// Other functions of the adapter are not affected. A function reset ([`CONTROL_RESET`], an
/// FLR) brings the function back with no objects, as after start, and clears the bit; so
/// does clearing [`CONTROL_ENABLE`]. A driver that sees it should log it and reset.
pub const STATUS_FAILED: u32 = 1 << 3;
/// [`REG_STATUS`] bit: the function's link is up — frames can go out of the adapter and
/// come in, as a NIC's port reports its carrier. What "up" means depends on the device's
/// network: a host TAP that is administratively up and running; a port of the adapter's
/// embedded switch whose uplink is up (or a switch with no uplink: its functions still
/// reach each other), as SR-IOV VFs in "auto" link mode; no network at all is down. The
/// device samples its link a few times a second, so a change shows here within a
/// fraction of a second; each change also raises [`crate::admin::ASYNC_EVENT_LINK`].
/// While the link is down, frames for it are dropped and counted, never queued. Not
/// changed by enable or reset (the link is not the function's state). Since minor
/// version 4: an older device never sets it, and a driver should take its link as up.
pub const STATUS_LINK_UP: u32 = 1 << 4;

/// End of the register file: offsets from here up to [`KICK_PAGE_OFFSET`] are reserved
/// (read as 0, writes ignored).
pub const REGS_END: u32 = 0x060;

/// Offset in [`crate::pci::CTRL_BAR`] of the kick page. Unlike the registers above it holds
/// nothing privileged, so a driver may map this one page into every process that owns a
/// context. Any 32-bit write to [`KICK_PAGE_OFFSET`] + [`KICK`] wakes a sleeping engine
/// (see [`crate::doorbell`] for when a producer must kick). The value written is ignored.
pub const KICK_PAGE_OFFSET: u32 = 0x1000;
/// Offset of the kick register inside the kick page.
pub const KICK: u32 = 0x000;
