//! Payloads the lab's tests send between the host and the guests and compare on arrival.

use qpip_abi::pattern::Pattern;

/// `len` bytes of the test pattern from `seed` ([`Pattern`]).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    Pattern::new(seed).take(len).collect()
}
