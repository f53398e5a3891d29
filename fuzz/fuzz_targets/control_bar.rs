//! The whole PCI function as the vfio-user server sees it (`vfio::Function`, the
//! `ServerBackend` QEMU's messages are dispatched to), under any sequence of region reads
//! and writes (config space, control BAR, regions it does not have — BAR2 among them, where
//! a doorbell BAR used to be), DMA maps and unmaps (without files, and of one small real
//! guest RAM the admin queue and doorbell pages can be set up in), guest RAM contents,
//! interrupt teardown and resets: the register side of the admin queue and the engine thread
//! behind it run for real.
//!
//! Nothing may panic, an access outside a region (or to a region the function lacks) must be
//! refused rather than served, no region may be offered for mmap (the kick must stay a
//! posted write), and after every step the identity a driver checks first (REG_IDENT,
//! REG_VERSION, the config-space IDs) must read back right and the BARs other than BAR0 must
//! read 0, sizing or not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_abi::{pci as abi, regs};
use qpip_device::function::FunctionConfig;
use qpip_device::vfio::Function;
use qpip_fuzz::{Input, RAM_BASE};
use qpip_testkit::Ram;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

#[derive(Debug, Clone, Copy)]
enum Region {
    Config,
    Control,
    Other(u32),
}

/// BAR2: where the doorbell BAR was before the doorbell pages moved into guest RAM; a guest
/// or client that still reaches for it must be refused like any region the function lacks.
const FORMER_DOORBELL_BAR: u32 = 2;

impl Region {
    fn decode(input: &mut Input) -> Region {
        match input.choose(6) {
            0 => Region::Config,
            1 | 4 => Region::Control,
            2 => Region::Other(FORMER_DOORBELL_BAR),
            3 => Region::Other(input.u8() as u32 % 10),
            _ => Region::Other(input.u32()),
        }
    }

    fn index(self) -> u32 {
        match self {
            Region::Config => VFIO_PCI_CONFIG_REGION_INDEX,
            Region::Control => abi::CTRL_BAR,
            Region::Other(i) => i,
        }
    }

    fn size(self) -> Option<u64> {
        match self.index() {
            i if i == VFIO_PCI_CONFIG_REGION_INDEX => Some(256),
            i if i == abi::CTRL_BAR => Some(abi::CTRL_BAR_SIZE as u64),
            _ => None,
        }
    }
}

/// Offsets: the register file, the kick page, the MSI-X table and PBA, the end of the
/// region; or anything.
fn offset(input: &mut Input, region: Region) -> u64 {
    let size = region.size().unwrap_or(0x4000);
    match input.choose(5) {
        0 => input.u8() as u64 % (regs::REGS_END as u64 + 8),
        1 => regs::KICK_PAGE_OFFSET as u64 + input.u8() as u64 % 16,
        2 => abi::MSIX_TABLE_OFFSET as u64 - 8 + input.u16() as u64 % 0x1010,
        3 => size.saturating_sub(input.u8() as u64 % 16),
        _ => input.u64(),
    }
}

#[derive(Debug)]
enum Op {
    Read {
        region: Region,
        offset: u64,
        len: usize,
    },
    Write {
        region: Region,
        offset: u64,
        data: Vec<u8>,
    },
    /// A driver's 32-bit register write, the common case.
    WriteReg {
        region: Region,
        offset: u64,
        value: u32,
    },
    Map {
        address: u64,
        size: u64,
        offset: u64,
        flags: u32,
    },
    Unmap {
        address: u64,
        size: u64,
        flags: u32,
    },
    IrqTeardown {
        start: u32,
        count: u32,
    },
    Reset,
    /// Maps a small real guest RAM (a memfd) at [`RAM_BASE`], so admin-queue registers can
    /// point into it and the engine thread runs whatever commands it finds there.
    MapRam,
    /// Writes guest RAM (admin commands, rings), as guest stores would.
    WriteRam {
        offset: u64,
        data: Vec<u8>,
    },
}

const RAM_SIZE: u64 = 64 << 10;

/// Input format (see `examples/seeds/raw.rs`): per operation a kind byte, then its fields.
fn next_op(input: &mut Input) -> Op {
    match input.choose(10) {
        0 => {
            let region = Region::decode(input);
            Op::Read {
                region,
                offset: offset(input, region),
                len: input.u8() as usize,
            }
        }
        1 => {
            let region = Region::decode(input);
            let offset = offset(input, region);
            let len = input.u8() as usize % 32;
            Op::Write {
                region,
                offset,
                data: input.bytes(len),
            }
        }
        2 | 3 => {
            let region = Region::decode(input);
            Op::WriteReg {
                region,
                offset: offset(input, region) & !3,
                value: input.u32(),
            }
        }
        4 => Op::Map {
            address: input.u64(),
            size: input.u64(),
            offset: input.u64(),
            flags: input.u32(),
        },
        5 => Op::Unmap {
            address: input.u64(),
            size: input.u64(),
            flags: input.u32(),
        },
        6 => Op::IrqTeardown {
            start: input.u32(),
            count: input.u32(),
        },
        7 => Op::Reset,
        8 => Op::MapRam,
        _ => {
            let offset = input.u16() as u64 % RAM_SIZE;
            let len = (input.u8() as u64).min(RAM_SIZE - offset) as usize;
            Op::WriteRam {
                offset,
                data: input.bytes(len),
            }
        }
    }
}

fn reg(f: &mut Function, r: u32) -> u32 {
    let mut b = [0u8; 4];
    f.region_read(abi::CTRL_BAR, r as u64, &mut b)
        .expect("register read");
    u32::from_le_bytes(b)
}

fn inside(region: Region, offset: u64, len: usize) -> Option<bool> {
    let size = region.size()?;
    Some(offset.checked_add(len as u64).is_some_and(|e| e <= size))
}

/// The regions the client is offered: config space and BAR0 only, none mmappable.
fn check_regions(f: &Function) {
    let regions = f.regions();
    assert_eq!(regions.len(), VFIO_PCI_NUM_REGIONS as usize);
    for r in &regions {
        let info = &r.region_info;
        assert_eq!(
            info.flags & VFIO_REGION_INFO_FLAG_MMAP,
            0,
            "region {} offered for mmap",
            info.index
        );
        assert!(r.mmap_fd.is_none() && r.sparse_areas.is_empty());
        let size = Region::Other(info.index).size().unwrap_or(0);
        assert_eq!(info.size, size, "size of region {}", info.index);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut f = Function::new(FunctionConfig::default()).expect("device");
    check_regions(&f);
    let ram = Ram::new(c"fuzz-ram", RAM_BASE, RAM_SIZE);
    let version = (qpip_abi::ABI_VERSION_MAJOR as u32) << regs::VERSION_MAJOR_SHIFT
        | qpip_abi::ABI_VERSION_MINOR as u32;
    for _ in 0..128 {
        if input.is_empty() {
            break;
        }
        let op = next_op(&mut input);
        match op {
            Op::Read {
                region,
                offset: off,
                len,
            } => {
                let mut buf = vec![0u8; len];
                let r = f.region_read(region.index(), off, &mut buf);
                if let Some(ok) = inside(region, off, buf.len()) {
                    assert_eq!(r.is_ok(), ok, "{op:?}");
                } else {
                    assert!(r.is_err(), "read from a region the function lacks: {op:?}");
                }
            }
            Op::Write {
                region,
                offset: off,
                ref data,
            } => {
                let r = f.region_write(region.index(), off, data);
                if let Some(ok) = inside(region, off, data.len()) {
                    assert_eq!(r.is_ok(), ok, "{op:?}");
                } else {
                    assert!(r.is_err(), "write to a region the function lacks: {op:?}");
                }
            }
            Op::WriteReg {
                region,
                offset,
                value,
            } => {
                let _ = f.region_write(region.index(), offset, &value.to_le_bytes());
            }
            Op::Map {
                address,
                size,
                offset,
                flags,
            } => {
                // No file: what QEMU sends for its own BARs and ROMs. Must be accepted or
                // refused, never crash, and never become memory the device uses.
                let _ = f.dma_map(
                    DmaMapFlags::from_bits_retain(flags),
                    offset,
                    address,
                    size,
                    None,
                );
            }
            Op::Unmap {
                address,
                size,
                flags,
            } => {
                let _ = f.dma_unmap(DmaUnmapFlags::from_bits_retain(flags), address, size);
            }
            Op::IrqTeardown { start, count } => {
                let _ = f.set_irqs(
                    VFIO_PCI_MSIX_IRQ_INDEX,
                    VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                    start,
                    count,
                    Vec::new(),
                );
            }
            Op::MapRam => {
                let _ = f.dma_map(
                    DmaMapFlags::READ_WRITE,
                    0,
                    RAM_BASE,
                    RAM_SIZE,
                    Some(ram.file().try_clone().unwrap()),
                );
            }
            Op::WriteRam { offset, ref data } => {
                ram.write(RAM_BASE + offset, data);
            }
            Op::Reset => {
                f.reset().expect("reset");
                assert_eq!(
                    reg(&mut f, regs::REG_CONTROL),
                    0,
                    "reset clears REG_CONTROL"
                );
                assert_eq!(
                    reg(&mut f, regs::REG_SCRATCH),
                    0,
                    "reset clears REG_SCRATCH"
                );
            }
        }
        assert_eq!(
            reg(&mut f, regs::REG_IDENT),
            regs::IDENT_MAGIC,
            "after {op:?}"
        );
        assert_eq!(reg(&mut f, regs::REG_VERSION), version, "after {op:?}");
        assert_eq!(reg(&mut f, regs::REG_DOORBELL_PAGES), abi::DOORBELL_PAGES);
        assert_eq!(
            reg(&mut f, regs::REG_MSIX_VECTORS),
            abi::MSIX_VECTORS as u32
        );
        let mut id = [0u8; 4];
        f.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
            .unwrap();
        assert_eq!(
            u32::from_le_bytes(id),
            (abi::PCI_DEVICE_ID as u32) << 16 | abi::PCI_VENDOR_ID as u32
        );
        let mut bars = [0u8; 24];
        f.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0x10, &mut bars)
            .unwrap();
        for (i, b) in bars.chunks(4).enumerate().skip(1) {
            assert_eq!(b, [0; 4], "BAR{i} must stay absent, after {op:?}");
        }
    }
    check_regions(&f);
});
