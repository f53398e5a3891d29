//! qpip-device: the qpip adapter as a vfio-user PCI function (`qpipd`).
//!
//! Layout, from the wire in: [`vfio`] is the vfio-user glue (regions, DMA maps, interrupt
//! setup), [`pci`] the emulated configuration space, [`core`] what the registers mean and
//! the device state behind them, [`dma`] guest memory as the device sees it, [`doorbell`]
//! the shared doorbell BAR, [`irq`] MSI-X delivery through eventfds, and [`engine`] the QPIP
//! engine itself (its own thread, owning every object the driver creates).

pub mod backend;
pub mod core;
pub mod dma;
pub mod doorbell;
pub mod engine;
pub mod irq;
pub mod net;
pub mod pci;
pub mod stages;
pub mod vfio;
