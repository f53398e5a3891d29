//! `qpip-e2e`: the traffic of the VM integration suite (`ci/tests/e2e.rs`) — senders and
//! receivers whose every byte is checked, on the device or the software provider.
//!
//! ```text
//! qpip-e2e sink [COMMON] --port P [--conns N] [--clean K] [--max-msg B] [-w SECS]
//!     accepts N TCP connections on one listener at once and receives on each until the
//!     peer closes; ends once every connection ended, or once K (default N) ended cleanly
//! qpip-e2e send [COMMON] ADDR --port P [--conns N] (--sizes B,B,... | --bytes N [--chunk B])
//!     [--mark BYTES:FILE]
//!     N TCP connections at once, each sends the messages (sizes, or N bytes in chunks),
//!     then closes gracefully; --mark creates FILE once BYTES were acknowledged on one
//! qpip-e2e echo [COMMON] --port P [-u] [--max-msg B] [--count N] [-w SECS]
//!     TCP: accepts one connection and sends every message back until the peer closes;
//!     UDP: sends every datagram back to its sender, N of them (or until SECS of quiet)
//! qpip-e2e ping [COMMON] ADDR --port P [-u] [--iters N] [--size B]
//!     N round trips of B-byte messages, each echo compared byte for byte with what went
//!     out; UDP: a datagram without an answer in 2 s is counted lost and sent again
//! qpip-e2e rdma-serve [COMMON] --port P --bytes N [-w SECS]
//! qpip-e2e rdma [COMMON] ADDR --port P --bytes N [--chunk B] [--violate KIND] [-w SECS]
//!     iWARP: the server lends regions, the client RDMA-Writes them, reads them back and
//!     compares, or tries one forbidden access (see `rdma.rs`)
//! COMMON: --provider soft|device, --stream | --message (TCP framing, default message)
//! ```
//!
//! Results are `@key=value` lines on stdout. The bytes of connection i come from a
//! generator seeded with i, so connections carry different data. Each side reports a
//! SHA-256 of what it sent or received: of the bytes with stream framing, of each
//! message's length (u32, little endian) and bytes with message framing — so equal digests
//! on both ends mean the same bytes with the same message boundaries. Exit status 0 when
//! everything ended cleanly (sink: as asked), 1 otherwise, 2 for bad usage.

mod args;
mod data;
mod echo;
mod ping;
mod qp;
mod rdma;
mod send;
mod sink;

use std::process::ExitCode;

use qpip::Context;

use args::parse_args;

/// Receives (and sends) in flight per QP.
pub const DEPTH: usize = 4;

pub struct Fail(u8, String);

pub fn fail(what: &str, e: impl std::fmt::Display) -> Fail {
    Fail(1, format!("{what}: {e}"))
}

fn main() -> ExitCode {
    let r = parse_args(std::env::args().skip(1)).and_then(|a| {
        if let Some(p) = &a.provider {
            // Read by Context::open; set before any other thread exists.
            std::env::set_var(qpip::PROVIDER_ENV, p);
        }
        let ctx = Context::open().map_err(|e| fail("open", e))?;
        println!("@provider={:?}", ctx.provider());
        match a.mode.as_str() {
            "sink" => sink::sink(&ctx, &a),
            "send" => send::send(&ctx, &a),
            "echo" => echo::echo(&ctx, &a),
            "rdma-serve" => rdma::serve(&ctx, &a),
            "rdma" => rdma::client(&ctx, &a),
            _ => ping::ping(&ctx, &a),
        }
    });
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Fail(code, msg)) => {
            println!("@error={}", msg.lines().next().unwrap_or(""));
            eprintln!("qpip-e2e: {msg}");
            ExitCode::from(code)
        }
    }
}
