//! The driver's C header is generated from this crate. This test regenerates it and fails
//! if the checked-in copy differs, so the driver can never build against a stale contract.
//! `QPIP_BLESS=1` rewrites the checked-in header instead.

use std::path::PathBuf;

#[test]
fn checked_in_c_header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header_path = crate_dir.join("../guest-driver/qpip_abi.h");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not parse qpip-abi")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();

    if std::env::var_os("QPIP_BLESS").is_some() {
        std::fs::write(&header_path, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&header_path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is stale; regenerate it with: QPIP_BLESS=1 cargo test -p qpip-abi --test c_header",
        header_path.display()
    );
}
