//! The C API of the qpip verbs library: `libqpip.so` and `include/qpip.h` (generated from
//! this crate by cbindgen; `tests/c_header.rs` fails when the checked-in header is stale).
//!
//! Each C handle is a boxed `Handle` (module `handle`) whose first field is a magic number
//! per type, so a null pointer or a handle of the wrong type gives `QPIP_E_NULL` /
//! `QPIP_E_BAD_HANDLE` instead of undefined behaviour. (A pointer that was freed or never
//! came from this library cannot be checked.) Failures also leave a message for
//! [`qpip_last_error`].

#![allow(non_camel_case_types)]

// One module per family of the header. cbindgen writes the header's constants and
// functions in the order it reads them, module after module as declared here, so this
// order is the header's: each module on a line of its own keeps rustfmt from sorting them.
#[macro_use]
mod handle;

mod timeout;

pub mod types;

pub mod error;

pub mod addr;

pub mod context;

pub mod mr;

pub mod cq;

pub mod qp;

pub mod listener;

pub mod iwarp;

pub mod tripwire;

pub use addr::*;
pub use context::*;
pub use cq::*;
pub use error::*;
pub use iwarp::*;
pub use listener::*;
pub use mr::*;
pub use qp::*;
pub use tripwire::*;
pub use types::*;
