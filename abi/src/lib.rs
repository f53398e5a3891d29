//! The qpip "datasheet" as code: everything the device, the guest driver and the library
//! must agree on, and the behaviour of its formats written once for all of them: the
//! message header's encoding and a reader for it ([`wqe::MsgHeader`],
//! [`wqe::HeaderReader`]), a CQE's phase ([`cqe::phase`]), the producer side of the
//! doorbell protocol ([`doorbell::Producer`]). `no_std`, no allocation — except the module
//! `mmap` (feature `mmap`: the one shared-mapping call of the library and the test kit).
//!
//! The C header the guest driver includes (`guest-driver/qpip_abi.h`) is generated from this
//! crate by cbindgen; `tests/c_header.rs` fails when the checked-in header is stale
//! (regenerate with `QPIP_BLESS=1 cargo test -p qpip-abi --test c_header`).
//!
//! Versioning: [`ABI_VERSION_MAJOR`] changes when an existing register, BAR offset or
//! structure changes meaning; a driver must refuse a device whose major it does not know.
//! [`ABI_VERSION_MINOR`] grows when something is only added.
#![no_std]

#[cfg(feature = "mmap")]
extern crate std;

pub mod admin;
pub mod cqe;
pub mod doorbell;
// Test payloads, not part of the interface: keep them out of qpip_abi.h.
/// cbindgen:ignore
pub mod pattern;
// Not part of the contract's formats: keep it out of the C headers.
/// cbindgen:ignore
#[cfg(feature = "mmap")]
pub mod mmap;
pub mod pci;
pub mod regs;
// The uapi has a header of its own (include/uapi/qpip.h): keep it out of qpip_abi.h.
/// cbindgen:ignore
pub mod uapi;
pub mod wqe;

/// Major version of this interface. See the crate docs for the rule.
pub const ABI_VERSION_MAJOR: u16 = 2;
/// Minor version of this interface.
pub const ABI_VERSION_MINOR: u16 = 7;
