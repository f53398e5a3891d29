//! Where the lab finds the repository, the built artefacts and the runtime.
//!
//! The repository root is known at compile time (this crate lives in `<root>/ci`), which
//! lets tests and the binary run from any working directory; `QPIP_ROOT` overrides it for a
//! binary copied elsewhere. Built artefacts live in `QPIP_CACHE` (default `<root>/.cache`),
//! the same variable the image scripts use.

use std::path::PathBuf;

/// The repository root: `$QPIP_ROOT`, or the folder above this crate.
pub fn root() -> PathBuf {
    match std::env::var_os("QPIP_ROOT") {
        Some(r) if !r.is_empty() => PathBuf::from(r),
        _ => {
            let r = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
            // Resolve the "..", so paths in messages read plainly.
            r.canonicalize().unwrap_or(r)
        }
    }
}

/// The artefact cache: `$QPIP_CACHE`, or `<root>/.cache`.
pub fn cache() -> PathBuf {
    match std::env::var_os("QPIP_CACHE") {
        Some(c) if !c.is_empty() => PathBuf::from(c),
        _ => root().join(".cache"),
    }
}

/// The host runtime (QEMU with vfio-user, guest kernel, compiler) built by images/runtime.sh.
pub fn runtime() -> PathBuf {
    cache().join("runtime")
}

/// The guest kernel: `$QPIP_GUEST_KERNEL`, else the uncompressed `vmlinux` when the image
/// build could extract one (QEMU boots it through its PVH entry, skipping the real-mode setup
/// and the in-guest decompression: about 2 s less per boot under TCG), else `vmlinuz`.
pub fn guest_kernel() -> PathBuf {
    if let Some(k) = std::env::var_os("QPIP_GUEST_KERNEL").filter(|k| !k.is_empty()) {
        return PathBuf::from(k);
    }
    let vmlinux = cache().join("guest/vmlinux");
    if vmlinux.exists() {
        vmlinux
    } else {
        cache().join("guest/vmlinuz")
    }
}

/// The guest initramfs (busybox, init, qpip.ko, guest tools).
pub fn guest_initramfs() -> PathBuf {
    cache().join("guest/initramfs.cpio.gz")
}

/// The guest extras (images/extras.sh): programs and modules a few tests load on demand,
/// given to every guest as a read-only share it mounts only when it needs them.
pub fn guest_extras() -> PathBuf {
    cache().join("guest/extras")
}

/// The qpipd binary: `$QPIPD`, or `<root>/target/release/qpipd`.
pub fn qpipd() -> PathBuf {
    match std::env::var_os("QPIPD") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => root().join("target/release/qpipd"),
    }
}

/// The wrapper that runs the runtime's QEMU through the runtime's own loader.
pub fn qemu_env() -> PathBuf {
    root().join("images/qemu-env.sh")
}

/// Where VM runs keep their folders.
pub fn runs() -> PathBuf {
    cache().join("runs")
}
