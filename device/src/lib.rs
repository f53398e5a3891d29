//! qpip-device: the qpip adapter as a vfio-user PCI function (`qpipd`).
//!
//! Layout, from QEMU in: [`vfio`] is the vfio-user glue (regions, DMA maps, interrupt
//! setup), [`pci`] the emulated configuration space, [`function`] what the registers mean
//! and the function's state behind them (its engine, its link), [`dma`] guest memory as the
//! device sees it, [`irq`] MSI-X delivery through eventfds, and [`engine`] the QPIP engine
//! itself (on an engine thread, owning every object the driver creates). Beneath the engine, [`net`] is the network (IPv6 and its neighbours, UDP,
//! TCP) and [`backend`] the link (TAP, cable, memory wire; capture and impairment);
//! [`stages`] times the data path's stages for the bench. `docs/architecture.md` in the
//! repository draws the whole and follows a message through it.

pub mod backend;
pub mod dma;
pub mod engine;
pub mod function;
pub mod irq;
pub mod net;
pub mod pci;
pub mod sched;
pub mod stages;
pub mod vfio;

/// Tunes the C allocator for the data path; `qpipd` calls it first thing (and so does the
/// engine bench, which runs the engines in its own process).
///
/// With segmentation offload a TCP super-frame is a buffer of up to 64 KiB, allocated and
/// freed several times per frame on its way through the stack and the link. glibc returns
/// the top of its heap to the kernel whenever more than 128 KiB lie free there, and maps
/// large blocks afresh, so each frame paid for new zeroed pages: measured, page faults
/// took a quarter of a bulk transfer's time and halved its rate. Keeping freed memory for
/// reuse (it stays bounded by what is in flight at once) removes them.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}
