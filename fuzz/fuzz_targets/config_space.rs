//! PCI configuration space under any sequence of guest reads, writes and resets.
//!
//! Whatever the guest writes, at any offset and width, the identity (IDs, class, revision,
//! header type), the capability list and the BAR type bits must read back unchanged, the
//! BARs the function lacks (all but BAR0: doorbell pages live in guest RAM) must read 0 even
//! after sizing, an access is refused exactly when it leaves the 256-byte space, and nothing
//! panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qpip_abi::pci as abi;
use qpip_device::pci::config::{ConfigSpace, CONFIG_SPACE_SIZE};
use qpip_fuzz::Input;

/// Offsets biased towards the space itself, with the occasional wild one.
fn offset(input: &mut Input) -> u64 {
    match input.choose(3) {
        0 => input.u8() as u64,
        1 => input.u16() as u64 % 0x120,
        _ => input.u64(),
    }
}

#[derive(Debug)]
enum Op {
    Read {
        offset: u64,
        len: usize,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    /// The natural accesses a driver makes: 1, 2 or 4 bytes, naturally aligned.
    WriteAligned {
        offset: u64,
        width: usize,
        value: u32,
    },
    Reset,
}

/// Input format (see `examples/seeds/raw.rs`): per operation a kind byte, then its fields.
fn next_op(input: &mut Input) -> Op {
    match input.choose(4) {
        0 => Op::Read {
            offset: offset(input),
            len: input.u8() as usize,
        },
        1 => {
            let offset = offset(input);
            let len = input.u8() as usize;
            Op::Write {
                offset,
                data: input.bytes(len),
            }
        }
        2 => {
            let offset = input.u8() as u64;
            let width = [1usize, 2, 4][input.choose(3)];
            Op::WriteAligned {
                offset: offset / width as u64 * width as u64,
                width,
                value: input.u32(),
            }
        }
        _ => Op::Reset,
    }
}

/// Byte ranges that no write may change: vendor/device, revision/class, header type,
/// subsystem IDs, capability pointer, the MSI-X capability's ID, next pointer, table size
/// and table/PBA locations.
fn read_only_ranges() -> Vec<std::ops::Range<usize>> {
    let m = abi::PCI_CAP_MSIX_OFFSET as usize;
    vec![
        0x00..0x04,
        0x08..0x0c,
        0x0e..0x0f,
        0x2c..0x30,
        0x34..0x35,
        m..m + 2,
        m + 4..m + 12,
    ]
}

fn check_identity(c: &ConfigSpace, pristine: &[u8; CONFIG_SPACE_SIZE]) {
    let mut now = [0u8; CONFIG_SPACE_SIZE];
    c.read(0, &mut now).expect("the whole space is readable");
    for r in read_only_ranges() {
        assert_eq!(
            now[r.clone()],
            pristine[r.clone()],
            "read-only bytes {r:x?} changed"
        );
    }
    // MSI-X table size (bits 10:0 of message control) is read-only too.
    let m = abi::PCI_CAP_MSIX_OFFSET as usize;
    let control = u16::from_le_bytes([now[m + 2], now[m + 3]]);
    assert_eq!(control & 0x7ff, abi::MSIX_VECTORS - 1);
    // BAR type bits: BAR0 32-bit non-prefetchable memory; the function has no other BAR, so
    // BAR1..5 are absent: they read 0 whatever was written (sizing included).
    let bar = |i: usize| u32::from_le_bytes(now[0x10 + 4 * i..0x14 + 4 * i].try_into().unwrap());
    assert_eq!(abi::CTRL_BAR, 0);
    assert_eq!(bar(abi::CTRL_BAR as usize) & 0xf, 0);
    for unused in 1..6 {
        assert_eq!(bar(unused), 0, "BAR{unused} must stay absent");
    }
    // BAR address bits below the BAR size stay zero (sizing reads back the size).
    assert_eq!(bar(abi::CTRL_BAR as usize) & (abi::CTRL_BAR_SIZE - 1), 0);
    assert_eq!(c.read16(0), abi::PCI_VENDOR_ID);
    assert_eq!(c.read16(2), abi::PCI_DEVICE_ID);
    assert_eq!(now[0x08], abi::PCI_REVISION_ID);
}

fn in_space(offset: u64, len: usize) -> bool {
    offset
        .checked_add(len as u64)
        .is_some_and(|end| end <= CONFIG_SPACE_SIZE as u64)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut c = ConfigSpace::new();
    let mut pristine = [0u8; CONFIG_SPACE_SIZE];
    c.read(0, &mut pristine).unwrap();
    for _ in 0..256 {
        if input.is_empty() {
            break;
        }
        let op = next_op(&mut input);
        match &op {
            Op::Read { offset, len } => {
                let mut buf = vec![0u8; *len];
                let r = c.read(*offset, &mut buf);
                assert_eq!(r.is_ok(), in_space(*offset, buf.len()), "{op:?}");
            }
            Op::Write { offset, data } => {
                let r = c.write(*offset, data);
                assert_eq!(r.is_ok(), in_space(*offset, data.len()), "{op:?}");
            }
            Op::WriteAligned {
                offset,
                width,
                value,
            } => {
                c.write(*offset, &value.to_le_bytes()[..*width]).unwrap();
            }
            Op::Reset => {
                c.reset();
                let mut now = [0u8; CONFIG_SPACE_SIZE];
                c.read(0, &mut now).unwrap();
                assert_eq!(now, pristine, "reset returns to the power-on state");
            }
        }
        check_identity(&c, &pristine);
    }
});
