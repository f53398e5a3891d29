use super::*;

fn core() -> FunctionCore {
    FunctionCore::new(FunctionConfig::default()).unwrap()
}

fn rd(c: &mut FunctionCore, off: u32) -> u32 {
    let mut b = [0u8; 4];
    c.ctrl_read(off as u64, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn wr(c: &mut FunctionCore, off: u32, v: u32) {
    c.ctrl_write(off as u64, &v.to_le_bytes()).unwrap();
}

#[test]
fn identity_and_version() {
    let mut c = core();
    assert_eq!(rd(&mut c, regs::REG_IDENT), regs::IDENT_MAGIC);
    let v = rd(&mut c, regs::REG_VERSION);
    assert_eq!(
        v >> regs::VERSION_MAJOR_SHIFT,
        qpip_abi::ABI_VERSION_MAJOR as u32
    );
    assert_eq!(
        v & regs::VERSION_MINOR_MASK,
        qpip_abi::ABI_VERSION_MINOR as u32
    );
    assert_eq!(
        rd(&mut c, regs::REG_DOORBELL_PAGES),
        abi_pci::DOORBELL_PAGES
    );
    assert_eq!(
        rd(&mut c, regs::REG_MSIX_VECTORS),
        abi_pci::MSIX_VECTORS as u32
    );
}

#[test]
fn advertised_major_is_configurable_for_driver_tests() {
    let mut c = FunctionCore::new(FunctionConfig {
        advertised_abi_major: 7,
        ..FunctionConfig::default()
    })
    .unwrap();
    assert_eq!(
        rd(&mut c, regs::REG_VERSION) >> regs::VERSION_MAJOR_SHIFT,
        7
    );
}

#[test]
fn enable_sets_ready_and_reset_clears_everything() {
    let mut c = core();
    wr(&mut c, regs::REG_SCRATCH, 0xdead_beef);
    wr(&mut c, regs::REG_CONTROL, regs::CONTROL_ENABLE);
    assert_eq!(rd(&mut c, regs::REG_STATUS), regs::STATUS_READY);
    assert_eq!(rd(&mut c, regs::REG_SCRATCH), 0xdead_beef);

    wr(&mut c, regs::REG_CONTROL, regs::CONTROL_RESET);
    assert_eq!(
        rd(&mut c, regs::REG_CONTROL),
        0,
        "reset bit self-clears, enable cleared"
    );
    assert_eq!(rd(&mut c, regs::REG_STATUS), 0);
    assert_eq!(rd(&mut c, regs::REG_SCRATCH), 0);
    assert_eq!(rd(&mut c, regs::REG_RESET_COUNT), 1);
    // Identity survives reset.
    assert_eq!(rd(&mut c, regs::REG_IDENT), regs::IDENT_MAGIC);
}

#[test]
fn reset_and_enable_in_one_write_leaves_the_device_enabled() {
    let mut c = core();
    wr(
        &mut c,
        regs::REG_CONTROL,
        regs::CONTROL_RESET | regs::CONTROL_ENABLE,
    );
    assert_eq!(rd(&mut c, regs::REG_CONTROL), regs::CONTROL_ENABLE);
    assert_eq!(rd(&mut c, regs::REG_RESET_COUNT), 1);
}

#[test]
fn read_only_registers_ignore_writes() {
    let mut c = core();
    for reg in [
        regs::REG_IDENT,
        regs::REG_VERSION,
        regs::REG_STATUS,
        regs::REG_RESET_COUNT,
    ] {
        let before = rd(&mut c, reg);
        wr(&mut c, reg, 0x1234_5678);
        assert_eq!(rd(&mut c, reg), before, "register {reg:#x}");
    }
    assert!(c.counters.bad_register_accesses >= 4);
}

#[test]
fn odd_accesses_read_zero_and_are_counted() {
    let mut c = core();
    let mut two = [0xffu8; 2];
    c.ctrl_read(0, &mut two).unwrap();
    assert_eq!(two, [0, 0], "16-bit access to a 32-bit register");
    let mut four = [0xffu8; 4];
    c.ctrl_read(1, &mut four).unwrap();
    assert_eq!(four, [0; 4], "unaligned");
    c.ctrl_read(0x800, &mut four).unwrap();
    assert_eq!(four, [0; 4], "reserved");
    c.ctrl_write(regs::REG_SCRATCH as u64 + 1, &[1, 2, 3, 4])
        .unwrap();
    assert_eq!(rd(&mut c, regs::REG_SCRATCH), 0);
    assert_eq!(c.counters.bad_register_accesses, 4);
}

#[test]
fn accesses_beyond_the_bar_are_refused() {
    let mut c = core();
    let mut b = [0u8; 4];
    assert!(c.ctrl_read(abi_pci::CTRL_BAR_SIZE as u64, &mut b).is_err());
    assert!(c
        .ctrl_read(abi_pci::CTRL_BAR_SIZE as u64 - 2, &mut b)
        .is_err());
    assert!(c.ctrl_write(u64::MAX, &b).is_err());
}

#[test]
fn irq_test_raises_the_named_vector() {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut c = core();
    // SAFETY: plain eventfd creation; the fd is owned by the File.
    let fd = unsafe { std::fs::File::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)) };
    c.irqs.set(3, vec![fd.try_clone().unwrap()]).unwrap();
    wr(&mut c, regs::REG_IRQ_TEST, 3);
    let mut v = [0u8; 8];
    (&fd).read_exact(&mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 1);
    wr(&mut c, regs::REG_IRQ_TEST, abi_pci::MSIX_VECTORS as u32);
    assert_eq!(c.counters.bad_irq_test_vectors, 1);
}

#[test]
fn msix_table_is_storage_and_pba_reads_zero() {
    let mut c = core();
    let entry = abi_pci::MSIX_TABLE_OFFSET + 16;
    wr(&mut c, entry + 8, 0x4321);
    assert_eq!(rd(&mut c, entry + 8), 0x4321);
    assert_eq!(rd(&mut c, abi_pci::MSIX_PBA_OFFSET), 0);
}
