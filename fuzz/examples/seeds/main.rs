//! Writes the seed corpora (fuzz/corpus/<target>/seed-*): a few valid inputs per target, so
//! the fuzzers start from a working bring-up, working commands and working traffic instead of
//! having to discover them. Each seed is encoded with `qpip_fuzz::Seed` in the same order the
//! target's decoder reads it (the comments name the decoder's choices).
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --example seeds -- fuzz/corpus
//!
//! (`./qpip fuzz --seeds` does this.) Seeds are small and deterministic, and are committed.

mod admin_queue;
mod dereg_mid_transfer;
mod doorbells;
mod frames;
mod iwarp;
mod raw;

use std::path::{Path, PathBuf};

use qpip_fuzz::Seed;

fn main() {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    raw::config_space(&out.join("config_space"));
    raw::control_bar(&out.join("control_bar"));
    raw::admin_command(&out.join("admin_command"));
    raw::wqe(&out.join("wqe"));
    admin_queue::admin_queue(&out.join("admin_queue"));
    doorbells::doorbells(&out.join("doorbells"));
    frames::frames(&out.join("frames"));
    frames::vnet_frames(&out.join("vnet_frames"));
    iwarp::iwarp_mpa(&out.join("iwarp_mpa"));
    iwarp::iwarp_ddp_rdmap(&out.join("iwarp_ddp_rdmap"));
    iwarp::iwarp_placement(&out.join("iwarp_placement"));
    dereg_mid_transfer::dereg_mid_transfer(&out.join("dereg_mid_transfer"));
}

/// Writes `seed` as `seed-NAME` into the corpus folder `dir`.
fn save(dir: &Path, name: &str, seed: &Seed) {
    std::fs::create_dir_all(dir).expect("create corpus folder");
    let path = dir.join(format!("seed-{name}"));
    std::fs::write(&path, &seed.0).expect("write seed");
    println!("{} ({} bytes)", path.display(), seed.0.len());
}
