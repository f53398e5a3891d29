//! The PCI function before any driver: enumeration, BARs, identity registers, resets,
//! MSI-X, guest memory maps and the socket file. The `vfio_user` crate's client plays QEMU
//! over a real socket (like QEMU's qtest), so every message goes through the same path
//! QEMU's does.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qpip_abi::{pci as abi, regs};
use qpip_device::function::FunctionConfig;
use qpip_device::vfio::{serve, ServeOptions};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_user::Client;

struct Device {
    socket: PathBuf,
    server: Option<JoinHandle<Result<(), String>>>,
    _dir: TempDir,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start(core: FunctionConfig) -> (Device, Client) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("qpip-fake-guest-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("qpip.sock");
    let path = socket.clone();
    let server = std::thread::spawn(move || serve(&path, ServeOptions { core }));
    let client = connect(&socket);
    (
        Device {
            socket,
            server: Some(server),
            _dir: TempDir(dir),
        },
        client,
    )
}

fn connect(socket: &Path) -> Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if socket.exists() {
            if let Ok(c) = Client::new(socket) {
                return c;
            }
        }
        assert!(Instant::now() < deadline, "qpipd did not start listening");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Device {
    /// Disconnects like QEMU quitting and checks the server returns cleanly.
    fn stop(mut self, client: Client) {
        client.shutdown().unwrap();
        drop(client);
        let result = self
            .server
            .take()
            .unwrap()
            .join()
            .expect("server thread panicked");
        assert_eq!(result, Ok(()));
        assert!(!self.socket.exists(), "socket file removed on exit");
    }
}

fn cfg_read32(c: &mut Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, off, &mut b)
        .unwrap();
    u32::from_le_bytes(b)
}

fn reg_read(c: &mut Client, reg: u32) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(abi::CTRL_BAR, reg as u64, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn reg_write(c: &mut Client, reg: u32, v: u32) {
    c.region_write(abi::CTRL_BAR, reg as u64, &v.to_le_bytes())
        .unwrap();
}

#[test]
fn enumerates_as_a_qpip_function() {
    let (dev, mut c) = start(FunctionConfig::default());
    let id = cfg_read32(&mut c, 0);
    assert_eq!(id & 0xffff, abi::PCI_VENDOR_ID as u32);
    assert_eq!(id >> 16, abi::PCI_DEVICE_ID as u32);
    assert_eq!(cfg_read32(&mut c, 8) >> 8, abi::PCI_CLASS_CODE);

    // QEMU reads the whole config space in one message when it attaches.
    let mut whole = [0u8; 256];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut whole)
        .unwrap();
    let cap = whole[0x34] as usize;
    assert_eq!(whole[cap], 0x11, "MSI-X capability");
    let table = u32::from_le_bytes(whole[cap + 4..cap + 8].try_into().unwrap());
    assert_eq!(table, abi::MSIX_TABLE_OFFSET | abi::CTRL_BAR);

    let msix = c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).unwrap();
    assert_eq!(msix.count, abi::MSIX_VECTORS as u32);
    assert_eq!(
        c.get_irq_info(VFIO_PCI_INTX_IRQ_INDEX).unwrap().count,
        0,
        "no INTx"
    );
    dev.stop(c);
}

#[test]
fn bars_have_the_documented_layout() {
    let (dev, c) = start(FunctionConfig::default());
    let ctrl = c.region(abi::CTRL_BAR).unwrap();
    assert_eq!(ctrl.size, abi::CTRL_BAR_SIZE as u64);
    assert_eq!(
        ctrl.flags & VFIO_REGION_INFO_FLAG_MMAP,
        0,
        "control BAR traps"
    );
    for unused in 1u32..6 {
        assert_eq!(c.region(unused).unwrap().size, 0, "BAR{unused} is absent");
    }
    // No region may be mmappable: QEMU's client posts BAR writes (the kick) only for a
    // device with none, and otherwise makes every trapped write a synchronous round trip.
    for index in 0..VFIO_PCI_NUM_REGIONS {
        let r = c.region(index).unwrap();
        assert_eq!(
            r.flags & VFIO_REGION_INFO_FLAG_MMAP,
            0,
            "region {index} is mmappable"
        );
        assert!(
            r.sparse_areas.is_empty() && r.file_offset.is_none(),
            "region {index}"
        );
    }
    dev.stop(c);
}

#[test]
fn identity_registers_and_reset() {
    let (dev, mut c) = start(FunctionConfig::default());
    assert_eq!(reg_read(&mut c, regs::REG_IDENT), regs::IDENT_MAGIC);
    let v = reg_read(&mut c, regs::REG_VERSION);
    assert_eq!(
        v >> regs::VERSION_MAJOR_SHIFT,
        qpip_abi::ABI_VERSION_MAJOR as u32
    );
    reg_write(&mut c, regs::REG_SCRATCH, 0xfeed);
    reg_write(&mut c, regs::REG_CONTROL, regs::CONTROL_ENABLE);
    assert_eq!(reg_read(&mut c, regs::REG_SCRATCH), 0xfeed);
    assert_eq!(reg_read(&mut c, regs::REG_STATUS), regs::STATUS_READY);

    // Function reset as QEMU issues it.
    c.reset().unwrap();
    assert_eq!(reg_read(&mut c, regs::REG_SCRATCH), 0);
    assert_eq!(reg_read(&mut c, regs::REG_STATUS), 0);
    assert_eq!(reg_read(&mut c, regs::REG_RESET_COUNT), 1);
    // Reset through the control register.
    reg_write(&mut c, regs::REG_CONTROL, regs::CONTROL_RESET);
    assert_eq!(reg_read(&mut c, regs::REG_RESET_COUNT), 2);
    dev.stop(c);
}

#[test]
fn a_function_level_reset_through_the_advanced_features_capability() {
    let (dev, mut c) = start(FunctionConfig::default());
    // The capability list: MSI-X, then AF with FLR and TP capable (what Linux checks).
    let msix = cfg_read32(&mut c, 0x34) as usize & 0xff;
    let af = (cfg_read32(&mut c, msix as u64) >> 8) & 0xff;
    assert_eq!(af, abi::PCI_CAP_AF_OFFSET as u32);
    assert_eq!(cfg_read32(&mut c, af as u64) & 0xffff_00ff, 0x0306_0013);
    reg_write(&mut c, regs::REG_SCRATCH, 0xfeed);
    reg_write(&mut c, regs::REG_CONTROL, regs::CONTROL_ENABLE);
    // Bus master and a BAR address, as a driver leaves them.
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &[0x06, 0])
        .unwrap();
    c.region_write(
        VFIO_PCI_CONFIG_REGION_INDEX,
        0x10,
        &0xfe00_0000u32.to_le_bytes(),
    )
    .unwrap();
    // Linux's pci_af_flr: one byte, the FLR bit of the control byte. The reset is done
    // when the write returns.
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, af as u64 + 4, &[1])
        .unwrap();
    assert_eq!(reg_read(&mut c, regs::REG_RESET_COUNT), 1);
    assert_eq!(reg_read(&mut c, regs::REG_SCRATCH), 0);
    assert_eq!(reg_read(&mut c, regs::REG_STATUS), 0);
    assert_eq!(
        cfg_read32(&mut c, 4) & 0x7,
        0,
        "command register back to power-on"
    );
    assert_eq!(cfg_read32(&mut c, 0x10), 0, "BAR address forgotten");
    assert_eq!(cfg_read32(&mut c, af as u64 + 4) & 0xff, 0, "FLR reads 0");
    // Other writes to the capability reset nothing.
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, af as u64, &[0xff; 4])
        .unwrap();
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, af as u64 + 4, &[0xfe])
        .unwrap();
    assert_eq!(reg_read(&mut c, regs::REG_RESET_COUNT), 1);
    dev.stop(c);
}

#[test]
fn advertised_major_reaches_the_version_register() {
    let (dev, mut c) = start(FunctionConfig {
        advertised_abi_major: 9,
        ..FunctionConfig::default()
    });
    assert_eq!(
        reg_read(&mut c, regs::REG_VERSION) >> regs::VERSION_MAJOR_SHIFT,
        9
    );
    dev.stop(c);
}

#[test]
fn msix_vector_fires_its_eventfd() {
    let (dev, mut c) = start(FunctionConfig::default());
    // SAFETY: eventfd creation; the fd is owned by the File.
    let efd = unsafe { File::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
    c.set_irqs(
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        5,
        1,
        &[efd.as_raw_fd()],
    )
    .unwrap();
    reg_write(&mut c, regs::REG_IRQ_TEST, 5);
    let mut v = [0u8; 8];
    (&efd).read_exact(&mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 1);
    dev.stop(c);
}

#[test]
fn guest_memory_maps_are_accepted() {
    let (dev, mut c) = start(FunctionConfig::default());
    // SAFETY: memfd creation; the fd is owned by the File.
    let mem = unsafe { File::from_raw_fd(libc::memfd_create(c"ram".as_ptr(), libc::MFD_CLOEXEC)) };
    mem.set_len(0x20_0000).unwrap();
    c.dma_map(0, 0x1_0000_0000, 0x20_0000, mem.as_raw_fd())
        .unwrap();
    c.dma_unmap(0x1_0000_0000, 0x20_0000).unwrap();
    // The session survives and still answers.
    assert_eq!(reg_read(&mut c, regs::REG_IDENT), regs::IDENT_MAGIC);
    dev.stop(c);
}

#[test]
fn stale_socket_is_replaced_and_live_one_refused() {
    let dir = std::env::temp_dir().join(format!("qpip-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let path = dir.join("qpip.sock");
    // A socket file nobody listens on, as a killed qpipd leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let p = path.clone();
    let server = std::thread::spawn(move || serve(&p, ServeOptions::default()));
    let client = connect(&path);
    // While it is served, a second qpipd on the same path must refuse.
    let err = serve(&path, ServeOptions::default()).unwrap_err();
    assert!(err.contains("in use"), "{err}");
    client.shutdown().unwrap();
    drop(client);
    assert_eq!(server.join().unwrap(), Ok(()));
}

/// A single-function qpipd whose engine panics (the in-process API's test hook): the
/// function reads STATUS_FAILED, its registers keep answering, and the driver's reset
/// through REG_CONTROL (as qpip.ko does on seeing it) clears it; a second failure is
/// recovered from the same way, and the client disconnects cleanly afterwards.
#[test]
fn a_failed_engine_reads_failed_and_a_reset_brings_the_function_back() {
    let core = FunctionConfig::default();
    let fault = core.engine.fault.clone();
    let (dev, mut c) = start(core);
    reg_write(&mut c, regs::REG_CONTROL, regs::CONTROL_ENABLE);
    for round in 1..=2u32 {
        fault.panic_next_turn();
        // A kick wakes the engine thread if it sleeps; its next turn panics.
        reg_write(&mut c, regs::KICK_PAGE_OFFSET + regs::KICK, 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let s = reg_read(&mut c, regs::REG_STATUS);
            if s & regs::STATUS_FAILED != 0 || Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            status,
            regs::STATUS_READY | regs::STATUS_FAILED,
            "round {round}: failed, still enabled"
        );
        assert_eq!(reg_read(&mut c, regs::REG_IDENT), regs::IDENT_MAGIC);
        reg_write(
            &mut c,
            regs::REG_CONTROL,
            regs::CONTROL_RESET | regs::CONTROL_ENABLE,
        );
        assert_eq!(
            reg_read(&mut c, regs::REG_STATUS),
            regs::STATUS_READY,
            "round {round}: reset and enabled, no longer failed"
        );
        assert_eq!(reg_read(&mut c, regs::REG_RESET_COUNT), round);
    }
    dev.stop(c);
}
