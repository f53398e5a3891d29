#ifndef QPIP_ABI_H
#define QPIP_ABI_H

/* Generated from the qpip-abi crate by cbindgen. Do not edit: change abi/ and run
   QPIP_BLESS=1 cargo test -p qpip-abi --test c_header */

#include <linux/types.h>

/*
 Major version of this interface. See the crate docs for the rule.
 */
#define QPIP_ABI_VERSION_MAJOR 1

/*
 Minor version of this interface.
 */
#define QPIP_ABI_VERSION_MINOR 0

/*
 PCI vendor ID (config offset 0x00).
 */
#define QPIP_PCI_VENDOR_ID 4660

/*
 PCI device ID (config offset 0x02).
 */
#define QPIP_PCI_DEVICE_ID 20816

/*
 Subsystem vendor ID (config offset 0x2c).
 */
#define QPIP_PCI_SUBSYSTEM_VENDOR_ID 4660

/*
 Subsystem ID (config offset 0x2e).
 */
#define QPIP_PCI_SUBSYSTEM_ID 1

/*
 Class code, 24 bits: base class 0x02 (network), subclass 0x80 (other), prog-if 0.
 */
#define QPIP_PCI_CLASS_CODE 163840

/*
 Revision ID (config offset 0x08). Bumped with hardware-visible changes of the function
 itself; the interface version is in the [`crate::regs::REG_VERSION`] register.
 */
#define QPIP_PCI_REVISION_ID 1

/*
 BAR holding the control registers and the MSI-X table and PBA. Every access to it traps
 to the device (it is never mmapped), so writes here are synchronous but slow: use it for
 bring-up, the admin doorbell and the kick register, never on the fast path.
 */
#define QPIP_CTRL_BAR 0

/*
 Size of [`CTRL_BAR`] in bytes (32-bit, non-prefetchable memory BAR).
 */
#define QPIP_CTRL_BAR_SIZE 16384

/*
 BAR holding the doorbell pages: one 4 KiB page per user context, shared memory that the
 guest writes and the engine polls (no trap, no exit). 64-bit prefetchable memory BAR,
 so it occupies BAR slots 2 and 3.
 */
#define QPIP_DOORBELL_BAR 2

/*
 Size of one doorbell page. A context is given exactly one page, so a process can be
 mapped its own page and nothing else.
 */
#define QPIP_DOORBELL_PAGE_SIZE 4096

/*
 Number of doorbell pages, and so the maximum number of contexts.
 */
#define QPIP_DOORBELL_PAGES 64

/*
 Size of [`DOORBELL_BAR`] in bytes.
 */
#define QPIP_DOORBELL_BAR_SIZE (QPIP_DOORBELL_PAGE_SIZE * QPIP_DOORBELL_PAGES)

/*
 Number of MSI-X vectors. Vector 0 is for the admin queue and asynchronous events; the
 others are for completion queues.
 */
#define QPIP_MSIX_VECTORS 16

/*
 Offset of the MSI-X table inside [`CTRL_BAR`] (16 bytes per vector).
 */
#define QPIP_MSIX_TABLE_OFFSET 8192

/*
 Offset of the MSI-X pending bit array inside [`CTRL_BAR`].
 */
#define QPIP_MSIX_PBA_OFFSET 12288

/*
 Offset of the MSI-X capability in PCI config space.
 */
#define QPIP_PCI_CAP_MSIX_OFFSET 64

/*
 Identity (RO): [`IDENT_MAGIC`]. The first thing a driver reads: anything else means this
 is not a qpip function or the BAR is not mapped.
 */
#define QPIP_REG_IDENT 0

/*
 The value of [`REG_IDENT`]: the bytes "QPIP" in memory order.
 */
#define QPIP_IDENT_MAGIC 1346981969

/*
 Interface version (RO): major in bits 31..16, minor in bits 15..0.
 See [`crate::ABI_VERSION_MAJOR`].
 */
#define QPIP_REG_VERSION 4

/*
 Shift of the major number in [`REG_VERSION`].
 */
#define QPIP_VERSION_MAJOR_SHIFT 16

/*
 Mask of the minor number in [`REG_VERSION`].
 */
#define QPIP_VERSION_MINOR_MASK 65535

/*
 Number of doorbell pages in [`crate::pci::DOORBELL_BAR`] (RO).
 */
#define QPIP_REG_DOORBELL_PAGES 8

/*
 Number of MSI-X vectors (RO).
 */
#define QPIP_REG_MSIX_VECTORS 12

/*
 Device control (RW).
 */
#define QPIP_REG_CONTROL 16

/*
 [`REG_CONTROL`] bit: the driver enables the device. Cleared by reset.
 */
#define QPIP_CONTROL_ENABLE (1 << 0)

/*
 [`REG_CONTROL`] bit: write 1 to reset the device (same effect as a function-level reset).
 Self-clearing: reads back as 0 once the reset is complete, which it is by the time the
 write returns.
 */
#define QPIP_CONTROL_RESET (1 << 1)

/*
 Device status (RO).
 */
#define QPIP_REG_STATUS 20

/*
 [`REG_STATUS`] bit: the device is enabled and ready (mirrors [`CONTROL_ENABLE`]).
 */
#define QPIP_STATUS_READY (1 << 0)

/*
 Scratch register (RW): no effect on the device. Lets a driver or test prove that
 trapped writes reach the device and read back.
 */
#define QPIP_REG_SCRATCH 24

/*
 Number of resets the device has performed since it started (RO, wraps). Lets a driver
 and tests observe that a reset really happened.
 */
#define QPIP_REG_RESET_COUNT 28

/*
 Interrupt test (WO): writing a vector number `n` makes the device raise MSI-X vector `n`
 once (if MSI-X is enabled and the vector is set up). Lets a driver prove at bring-up
 that interrupts really arrive, like the "interrupt cause set" registers of real NICs.
 A write of a number >= the vector count is ignored and counted.
 */
#define QPIP_REG_IRQ_TEST 32

/*
 End of the register file: offsets from here up to [`crate::pci::MSIX_TABLE_OFFSET`] are
 reserved (read as 0, writes ignored).
 */
#define QPIP_REGS_END 36

#endif  /* QPIP_ABI_H */
