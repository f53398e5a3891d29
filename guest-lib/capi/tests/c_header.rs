//! `include/qpip.h` is generated from this crate by cbindgen. This test regenerates it and
//! fails if the checked-in copy differs, so C programs never build against a stale API.
//! `QPIP_BLESS=1` rewrites the checked-in header instead.

#[path = "../../../abi/tests/cbindgen_header/mod.rs"]
mod cbindgen_header;

#[test]
fn checked_in_c_header_is_current() {
    cbindgen_header::check_crate_header("include/qpip.h");
}
