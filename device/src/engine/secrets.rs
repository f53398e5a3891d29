//! The engine's secrets: what makes its memory keys, TCP initial sequence numbers and SYN
//! cookies unpredictable to anyone outside the engine — another guest, an application of
//! the same guest guessing another's key, or an off-path host guessing a sequence number.
//!
//! Three secrets of 128 bits, each drawn from the operating system's random source on its
//! own (`getrandom(2)`), none derived from another or from a clock: seeing what one makes
//! (every memory key a guest was given) tells nothing of the others (the ISNs, the
//! cookies). Each feeds SipHash-2-4 (`net::tcp::isn::siphash24`), a keyed pseudorandom
//! function: its outputs cannot be predicted, nor its key recovered, from other outputs.
//!
//! A device draws new secrets when it starts and at every reset. Tests may fix them
//! ([`Secrets::from_seed`]) to replay a run; qpipd never does.

use std::collections::{HashSet, VecDeque};

use crate::net::tcp::isn::siphash24;

/// Keys issued lately that are not issued again (even after their region is gone) until
/// this many newer ones were: a stale key kept by a guest does not come to name a new
/// region of someone else's soon.
pub const RECENT_KEYS: usize = 4096;

/// The engine's three independent secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Secrets {
    /// Memory keys ([`KeyGen`]).
    pub region_keys: [u8; 16],
    /// F of RFC 6528's ISN = M + F(4-tuple, secret), and the timestamp offsets.
    pub isn: [u8; 16],
    /// SYN cookies.
    pub syn_cookies: [u8; 16],
}

/// Never prints the secrets.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

impl Secrets {
    /// Three secrets from the OS's random source, each drawn by itself. Panics only if
    /// the OS has no random source at all (no `getrandom(2)` and no `/dev/urandom`): a
    /// device that cannot make unguessable keys must not run.
    pub fn from_os() -> Secrets {
        Secrets {
            region_keys: os_random(),
            isn: os_random(),
            syn_cookies: os_random(),
        }
    }

    /// Fixed secrets from `seed`, for tests that replay a run. Never for a device: anyone
    /// who knows the seed knows every key and sequence number.
    pub fn from_seed(seed: u64) -> Secrets {
        let part = |what: u8| -> [u8; 16] {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&seed.to_le_bytes());
            let lo = siphash24(&k, &[what, 0]);
            let hi = siphash24(&k, &[what, 1]);
            let mut s = [0u8; 16];
            s[..8].copy_from_slice(&lo.to_le_bytes());
            s[8..].copy_from_slice(&hi.to_le_bytes());
            s
        };
        Secrets {
            region_keys: part(b'K'),
            isn: part(b'I'),
            syn_cookies: part(b'C'),
        }
    }
}

fn os_random() -> [u8; 16] {
    let mut s = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut s) {
        panic!("the operating system's random source failed ({e}): no unguessable keys");
    }
    s
}

/// Memory keys: SipHash of a counter under the region-key secret, so every key is
/// unpredictable from all the others, and the same memory registered twice gets two
/// unrelated keys. A key is never 0, never a live region's, and never one of the last
/// [`RECENT_KEYS`] issued.
pub struct KeyGen {
    secret: [u8; 16],
    counter: u64,
    recent: VecDeque<u32>,
    recent_set: HashSet<u32>,
}

impl KeyGen {
    pub fn new(secret: [u8; 16]) -> KeyGen {
        KeyGen {
            secret,
            counter: 0,
            recent: VecDeque::new(),
            recent_set: HashSet::new(),
        }
    }

    /// A fresh key for which `live` is false.
    pub fn next(&mut self, live: impl Fn(u32) -> bool) -> u32 {
        loop {
            self.counter += 1;
            let key = siphash24(&self.secret, &self.counter.to_le_bytes()) as u32;
            if key == 0 || live(key) || self.recent_set.contains(&key) {
                continue;
            }
            if self.recent.len() == RECENT_KEYS {
                if let Some(old) = self.recent.pop_front() {
                    self.recent_set.remove(&old);
                }
            }
            self.recent.push_back(key);
            self.recent_set.insert(key);
            return key;
        }
    }
}

impl Default for KeyGen {
    /// A generator under a secret from the OS.
    fn default() -> KeyGen {
        KeyGen::new(os_random())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_os_gives_three_different_secrets_every_time() {
        let a = Secrets::from_os();
        let b = Secrets::from_os();
        assert_ne!(a, b);
        for s in [&a, &b] {
            assert_ne!(s.region_keys, s.isn);
            assert_ne!(s.isn, s.syn_cookies);
            assert_ne!(s.region_keys, s.syn_cookies);
        }
        assert_eq!(Secrets::from_seed(3), Secrets::from_seed(3));
        assert_ne!(Secrets::from_seed(3), Secrets::from_seed(4));
    }

    #[test]
    fn a_recent_key_is_not_issued_again() {
        let mut g = KeyGen::new([1; 16]);
        let first: Vec<u32> = (0..RECENT_KEYS).map(|_| g.next(|_| false)).collect();
        let set: HashSet<u32> = first.iter().copied().collect();
        assert_eq!(set.len(), RECENT_KEYS, "no key twice within the window");
        assert!(!set.contains(&0));
        // The generator skips what the caller says is live.
        let mut h = KeyGen::new([1; 16]);
        let k = h.next(|k| k == first[0]);
        assert_eq!(k, first[1]);
    }
}
