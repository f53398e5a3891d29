//! iWARP: RDMAP (RFC 5040) over DDP (RFC 5041) over MPA (RFC 5044, with RFC 6581's enhanced
//! connection setup) on a TCP connection, wire-compatible with Linux's soft-iWARP (`siw`).
//!
//! As in the rest of `net`, packet formats are kept apart from protocol state: [`wire`]
//! parses and builds every iWARP format (MPA request and reply, FPDUs and the deframer of the
//! received stream, DDP segments, RDMAP messages, Terminate) and holds no connection state.
//! The engine drives it: it negotiates MPA on a TCP connection, cuts its messages into
//! FPDUs that fit the connection's segments, deframes what arrives, places tagged and
//! untagged payloads, answers read requests, and sends and acts on Terminates.

pub mod wire;
