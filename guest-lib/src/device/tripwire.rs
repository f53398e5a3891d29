//! The device file's tripwire calls (`IOCTL_CREATE_TRIPWIRE`, `IOCTL_DESTROY_TRIPWIRE`).

use qpip_abi::uapi::{CreateTripwire, IOCTL_CREATE_TRIPWIRE, IOCTL_DESTROY_TRIPWIRE};
use zerocopy::FromZeros;

use super::sys::ioctl;
use super::Ctx;
use crate::error::Result;

/// Where a tripwire watches and where its arm word is, by region and virtual address.
pub(crate) struct TripwireArgs {
    pub lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub arm_lkey: u32,
    pub arm_addr: u64,
    pub cq: u32,
    pub tag: u64,
}

impl Ctx {
    /// CREATE_TRIPWIRE: the tripwire's id (the `qp` of its events).
    pub(crate) fn create_tripwire(&self, t: &TripwireArgs) -> Result<u32> {
        let mut a = arg!(CreateTripwire);
        a.lkey = t.lkey;
        a.addr = t.addr;
        a.len = t.len;
        a.arm_lkey = t.arm_lkey;
        a.arm_addr = t.arm_addr;
        a.cq = t.cq;
        a.tag = t.tag;
        ioctl(
            &self.fd,
            IOCTL_CREATE_TRIPWIRE,
            &mut a,
            "create tripwire (CREATE_TRIPWIRE)",
        )?;
        Ok(a.handle)
    }

    pub(crate) fn destroy_tripwire(&self, id: u32) {
        self.destroy(IOCTL_DESTROY_TRIPWIRE, id);
    }
}
