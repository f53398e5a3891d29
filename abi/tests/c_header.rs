//! The driver's C header `guest-driver/qpip_abi.h` is generated from this crate. This test
//! regenerates it and fails if the checked-in copy differs, so the driver can never build
//! against a stale contract. `QPIP_BLESS=1` rewrites the checked-in header instead.

mod cbindgen_header;

#[test]
fn checked_in_c_header_is_current() {
    cbindgen_header::check_crate_header("../guest-driver/qpip_abi.h");
}
