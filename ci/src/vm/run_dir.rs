//! The run folders: one fresh folder per run under the cache, the oldest pruned.

use crate::paths;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many run folders are kept; older ones are deleted when a new run starts, so the
/// cache does not grow without bound (each holds logs and the guest's share).
const KEEP_RUNS: usize = 40;

/// The file in a run folder that its run holds locked while it lives.
const IN_USE: &str = ".in-use";

/// Marks `dir` as in use for as long as this process lives: an exclusive `flock` on its
/// [`IN_USE`] file, whose descriptor is kept open until the process exits (which lets the
/// lock go, however it ends). A run can outlive many newer ones: when two VM tests run at
/// a time, a long one sees dozens of short ones start and end.
fn hold(dir: &Path) {
    let Ok(f) = fs::File::create(dir.join(IN_USE)) else {
        return;
    };
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        std::mem::forget(f);
    }
}

/// Whether a live run (of any process, this one too) holds `dir` ([`hold`]).
fn in_use(dir: &Path) -> bool {
    let Ok(f) = fs::File::open(dir.join(IN_USE)) else {
        return false;
    };
    // SAFETY: flock on a descriptor this function owns; closing it lets the lock go.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

/// Deletes all but the newest `keep - 1` run folders, making room for one more, except
/// those a live run still uses (deleting its console log and share under it would hang
/// its guest). Run folder names start with a timestamp, so name order is age order.
fn prune_old_runs(runs: &Path, keep: usize) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let excess = dirs.len().saturating_sub(keep.saturating_sub(1));
    for old in dirs[..excess].iter().filter(|d| !in_use(d)) {
        if let Err(e) = fs::remove_dir_all(old) {
            log::warn!("cannot remove old run folder {}: {e}", old.display());
        }
    }
}

/// A fresh, uniquely named, empty run folder.
pub(crate) fn make_run_dir() -> io::Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let runs = paths::runs();
    fs::create_dir_all(&runs)?;
    prune_old_runs(&runs, KEEP_RUNS);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = runs.join(format!("{}-{}-{n}", timestamp(), std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {
                hold(&dir);
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The local time now as `[year, month, day, hour, minute, second]` (month and day from
/// 1); Err holds the Unix time when the C library cannot break it down.
pub fn local_time() -> Result<[i32; 6], i64> {
    // SAFETY: localtime_r writes only into `tm`; time(NULL) has no preconditions.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return Err(t);
        }
        Ok([
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
        ])
    }
}

/// Local time as YYYYmmdd-HHMMSS (`t<Unix time>` if it cannot be had): the names of run
/// folders and of the bench's results.
pub fn timestamp_of(time: Result<[i32; 6], i64>) -> String {
    match time {
        Ok([y, mo, d, h, mi, s]) => format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}"),
        Err(t) => format!("t{t}"),
    }
}

/// Local time now as YYYYmmdd-HHMMSS.
fn timestamp() -> String {
    timestamp_of(local_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_run_folders() {
        let root = std::env::temp_dir().join(format!("qpip-prune-{}", std::process::id()));
        for name in [
            "20260101-000003-1-0",
            "20260101-000001-1-0",
            "20260101-000002-1-0",
        ] {
            fs::create_dir_all(root.join(name).join("share")).unwrap();
        }
        prune_old_runs(&root, 2);
        let mut left: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            left,
            ["20260101-000003-1-0"],
            "room for one new run next to the newest"
        );
    }

    #[test]
    fn pruning_spares_a_run_folder_still_in_use() {
        let root = std::env::temp_dir().join(format!("qpip-prune-live-{}", std::process::id()));
        for name in [
            "20260101-000001-1-0",
            "20260101-000002-1-0",
            "20260101-000003-1-0",
        ] {
            fs::create_dir_all(root.join(name)).unwrap();
        }
        // The oldest is a long run that is still going.
        hold(&root.join("20260101-000001-1-0"));
        prune_old_runs(&root, 2);
        let mut left: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(left, ["20260101-000001-1-0", "20260101-000003-1-0"]);
    }

    #[test]
    fn timestamps_have_the_run_folder_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 15, "{t}");
        assert_eq!(&t[8..9], "-");
        assert!(
            t.chars().filter(|c| *c != '-').all(|c| c.is_ascii_digit()),
            "{t}"
        );
        assert_eq!(timestamp_of(Ok([2026, 1, 2, 3, 4, 5])), "20260102-030405");
        assert_eq!(timestamp_of(Err(1234)), "t1234");
    }
}
