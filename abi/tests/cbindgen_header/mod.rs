//! What every test of a generated C header does: run cbindgen, then compare its output
//! with the checked-in header, so C code never builds against a stale contract; with
//! `QPIP_BLESS=1` the checked-in header is rewritten instead. Included (as a module) by
//! `abi/tests/c_header.rs`, `abi/tests/uapi_header.rs` and `guest-lib/capi/tests/c_header.rs`;
//! paths are relative to the including crate, and each test uses only part of this.
#![allow(dead_code)]

use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The header `builder` (what to parse) writes under the cbindgen config file `config`.
pub fn generate(builder: cbindgen::Builder, config: &str) -> String {
    let config = crate_dir().join(config);
    let config = cbindgen::Config::from_file(&config)
        .unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    let mut out = Vec::new();
    builder
        .with_config(config)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"))
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

/// Fails unless the checked-in `header` is `generated`, naming the command that
/// regenerates it (this test, blessed); with `QPIP_BLESS` set, writes `generated` there.
pub fn check_or_bless(header: &str, generated: &str) {
    let path = crate_dir().join(header);
    if std::env::var_os("QPIP_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is stale; regenerate it with: QPIP_BLESS=1 cargo test -p {} --test {}",
        path.display(),
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
    );
}

/// The crate's own header: cbindgen over the whole crate with its `cbindgen.toml`, checked
/// against `header`.
pub fn check_crate_header(header: &str) {
    let generated = generate(
        cbindgen::Builder::new().with_crate(crate_dir()),
        "cbindgen.toml",
    );
    check_or_bless(header, &generated);
}
