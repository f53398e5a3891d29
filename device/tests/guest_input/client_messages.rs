//! Everything a guest (through QEMU) can send the function, at random: config space,
//! control-BAR and doorbell-BAR accesses of any offset, width and content, DMA maps and
//! unmaps, interrupt setup and resets. The device must never panic, never touch memory out
//! of bounds, and keep its read-only identity intact whatever came before.

use std::fs::File;
use std::os::fd::FromRawFd;

use proptest::prelude::*;
use qpip_abi::{pci as abi, regs};
use qpip_device::function::FunctionConfig;
use qpip_device::vfio::Function;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

#[derive(Debug, Clone)]
enum Op {
    Read {
        region: u32,
        offset: u64,
        len: usize,
    },
    Write {
        region: u32,
        offset: u64,
        data: Vec<u8>,
    },
    Map {
        address: u64,
        size: u64,
        with_fd: bool,
    },
    Unmap {
        address: u64,
        size: u64,
    },
    Irqs {
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: usize,
    },
    Reset,
}

/// Offsets near the interesting places (BAR starts and ends, registers, the MSI-X table)
/// as well as anywhere at all.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..0x100,
        0u64..0x40,
        (abi::MSIX_TABLE_OFFSET as u64 - 8)..(abi::MSIX_TABLE_OFFSET as u64 + 0x110),
        (abi::CTRL_BAR_SIZE as u64 - 8)..(abi::CTRL_BAR_SIZE as u64 + 8),
        any::<u64>(),
    ]
}

fn region() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(VFIO_PCI_CONFIG_REGION_INDEX),
        Just(abi::CTRL_BAR),
        Just(2u32),
        0u32..16,
        any::<u32>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (region(), offset(), prop_oneof![1usize..=8, 0usize..300]).prop_map(|(region, offset, len)| Op::Read { region, offset, len }),
        4 => (region(), offset(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(|(region, offset, data)| Op::Write { region, offset, data }),
        1 => (prop_oneof![Just(0x1000_0000u64), any::<u64>()], prop_oneof![Just(0x1000u64), 0u64..0x4000, any::<u64>()], any::<bool>())
            .prop_map(|(address, size, with_fd)| Op::Map { address, size, with_fd }),
        1 => (prop_oneof![Just(0x1000_0000u64), any::<u64>()], prop_oneof![Just(0x1000u64), any::<u64>()]).prop_map(|(address, size)| Op::Unmap { address, size }),
        1 => (prop_oneof![Just(VFIO_PCI_MSIX_IRQ_INDEX), 0u32..8], prop_oneof![
                Just(VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER),
                Just(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER),
                any::<u32>()],
              prop_oneof![0u32..20, any::<u32>()], prop_oneof![0u32..20, any::<u32>()], 0usize..4)
            .prop_map(|(index, flags, start, count, fds)| Op::Irqs { index, flags, start, count, fds }),
        1 => Just(Op::Reset),
    ]
}

fn memfd(len: u64) -> File {
    // SAFETY: memfd creation; the fd is owned by the File.
    let f = unsafe { File::from_raw_fd(libc::memfd_create(c"fuzz".as_ptr(), libc::MFD_CLOEXEC)) };
    f.set_len(len).unwrap();
    f
}

fn eventfd() -> File {
    // SAFETY: eventfd creation; the fd is owned by the File.
    unsafe { File::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)) }
}

fn read32(f: &mut Function, region: u32, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    f.region_read(region, offset, &mut b).unwrap();
    u32::from_le_bytes(b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_of_client_messages_is_survived(ops in prop::collection::vec(op(), 1..64)) {
        let mut f = Function::new(FunctionConfig::default()).unwrap();
        for op in ops {
            // Errors are fine (the client gets an error reply); panics are not.
            match op {
                Op::Read { region, offset, len } => {
                    let mut buf = vec![0u8; len];
                    let _ = f.region_read(region, offset, &mut buf);
                }
                Op::Write { region, offset, data } => {
                    let _ = f.region_write(region, offset, &data);
                }
                Op::Map { address, size, with_fd } => {
                    // Real backing only for sizes a test can afford; the device must refuse
                    // or cope with the rest.
                    let fd = (with_fd && size <= 0x4000).then(|| memfd(size.max(1)));
                    let _ = f.dma_map(DmaMapFlags::READ_WRITE, 0, address, size, fd);
                }
                Op::Unmap { address, size } => {
                    let _ = f.dma_unmap(DmaUnmapFlags::empty(), address, size);
                }
                Op::Irqs { index, flags, start, count, fds } => {
                    let fds = (0..fds).map(|_| eventfd()).collect();
                    let _ = f.set_irqs(index, flags, start, count, fds);
                }
                Op::Reset => {
                    let _ = f.reset();
                }
            }
        }
        // Identity is read-only whatever happened.
        let id = read32(&mut f, VFIO_PCI_CONFIG_REGION_INDEX, 0);
        prop_assert_eq!(id, (abi::PCI_DEVICE_ID as u32) << 16 | abi::PCI_VENDOR_ID as u32);
        prop_assert_eq!(read32(&mut f, VFIO_PCI_CONFIG_REGION_INDEX, 8) >> 8, abi::PCI_CLASS_CODE);
        prop_assert_eq!(read32(&mut f, abi::CTRL_BAR, regs::REG_IDENT as u64), regs::IDENT_MAGIC);
        prop_assert_eq!(
            read32(&mut f, abi::CTRL_BAR, regs::REG_VERSION as u64) >> regs::VERSION_MAJOR_SHIFT,
            qpip_abi::ABI_VERSION_MAJOR as u32
        );
    }
}
