//! Shared pieces of the qpip fuzz targets.
//!
//! * [`Input`] reads a fuzz input as a stream of little-endian numbers (zeros once it runs
//!   out), and [`Seed`] writes the same stream: the targets decode their operations from an
//!   `Input`, and `examples/seeds/` encodes the committed seed corpora with a `Seed`, so
//!   seeds and decoders cannot drift apart silently.
//! * [`SyncDevice`] is the real engine (`qpip_device::engine::Engine`) driven synchronously on
//!   the fuzzer's thread (the test kit's `SyncEngine`), over a small memfd guest RAM: admin
//!   commands go through the admin rings, doorbells through each context's doorbell page (a
//!   page of that RAM, named in `CREATE_CTX`), and every step is deterministic. What it
//!   cannot reach is the threaded run loop (sleeping and kicks), which the device tests cover.
//!   It keeps a shadow of guest RAM to catch every byte the device writes where it may not;
//!   the ABI's pieces (command builders, ring arithmetic, completion rules) are the test
//!   kit's.

pub mod frames;
mod input;
mod sync_device;

pub use input::{Input, Seed};
pub use qpip_testkit::{check_admin_cqe, cmd, cmd0, create_ctx_cmd};
pub use sync_device::*;

use qpip_abi::admin::*;

/// Every admin opcode, in the order the `admin_queue` target's structured commands (and the
/// seeds that encode them) number them.
pub const ADMIN_OPCODES: [u16; 20] = [
    ADMIN_OP_QUERY_DEVICE,
    ADMIN_OP_SET_MAC,
    ADMIN_OP_ADD_ADDR,
    ADMIN_OP_DEL_ADDR,
    ADMIN_OP_QUERY_STATS,
    ADMIN_OP_CREATE_CTX,
    ADMIN_OP_DESTROY_CTX,
    ADMIN_OP_CREATE_CQ,
    ADMIN_OP_DESTROY_CQ,
    ADMIN_OP_CREATE_QP,
    ADMIN_OP_DESTROY_QP,
    ADMIN_OP_REG_MR,
    ADMIN_OP_DEREG_MR,
    ADMIN_OP_BIND,
    ADMIN_OP_LISTEN,
    ADMIN_OP_DESTROY_LISTENER,
    ADMIN_OP_ACCEPT,
    ADMIN_OP_CONNECT,
    ADMIN_OP_CLOSE,
    ADMIN_OP_SET_QP_OPT,
];

/// Whether `QPIP_FUZZ_TRACE` is set: the targets then print what they do and what the device
/// answers, which is what one wants when reproducing a crash from its input.
pub fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("QPIP_FUZZ_TRACE").is_some())
}

/// Prints a trace line when tracing is on.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::trace() {
            eprintln!($($arg)*);
        }
    };
}
