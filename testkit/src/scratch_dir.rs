//! Scratch folders for what a test puts on the file system: cables, sockets, captures.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A folder of its own under the system's temporary directory, named
/// `qpip-<what>-<pid>-<n>`, and removed with everything in it when dropped (also when the
/// test fails). The process id keeps test binaries apart, the counter the tests that run
/// as threads of one binary, even when they pass the same `what`.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(what: &str) -> ScratchDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("qpip-{what}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        ScratchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the folder.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
