//! Timeouts as the C API takes them: milliseconds, negative for ever.

use std::ffi::c_int;
use std::time::Duration;

/// A negative timeout waits for ever.
pub(crate) fn timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// [`timeout`] for the library calls that take a `Duration`: for ever is 2^32 seconds.
pub(crate) fn timeout_or_forever(ms: c_int) -> Duration {
    timeout(ms).unwrap_or(Duration::from_secs(u32::MAX as u64))
}
