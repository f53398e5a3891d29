//! Initial sequence numbers (RFC 6528): `ISN = M + F(4-tuple, secret)`, M a clock ticking
//! every 4 µs, F a keyed hash (SipHash-2-4 with a 128-bit secret), so sequence numbers of
//! one connection's incarnations advance with time while an off-path attacker cannot
//! predict another's. SYN cookies are the same keyed hash under a secret of their own, so a
//! cookie tells nothing of the ISN secret and the other way round.

use std::time::Instant;

use super::connection::FourTuple;

/// SipHash-2-4 (Aumasson and Bernstein) of `data` under `key`.
pub fn siphash24(key: &[u8; 16], data: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = data.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The 4-tuple as hash input (36 bytes).
pub fn tuple_bytes(t: &FourTuple) -> [u8; 36] {
    let mut b = [0u8; 36];
    b[..16].copy_from_slice(&t.local.octets());
    b[16..18].copy_from_slice(&t.local_port.to_be_bytes());
    b[18..34].copy_from_slice(&t.remote.octets());
    b[34..36].copy_from_slice(&t.remote_port.to_be_bytes());
    b
}

/// Makes ISNs (and timestamp offsets, and SYN cookies) for the connections of one device.
#[derive(Clone)]
pub struct IsnGenerator {
    secret: [u8; 16],
    cookie_secret: [u8; 16],
    base: Instant,
}

/// Never prints the secrets.
impl std::fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsnGenerator")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl IsnGenerator {
    /// ISNs under `secret`, SYN cookies under `cookie_secret`; both must be unpredictable
    /// in the device and drawn apart (`engine::secrets::Secrets`).
    pub fn with_secrets(secret: [u8; 16], cookie_secret: [u8; 16], base: Instant) -> IsnGenerator {
        IsnGenerator {
            secret,
            cookie_secret,
            base,
        }
    }

    /// For tests and tools that fix one secret: the cookie secret is a keyed hash of it.
    pub fn new(secret: [u8; 16], base: Instant) -> IsnGenerator {
        let mut cookie_secret = [0u8; 16];
        cookie_secret[..8].copy_from_slice(&siphash24(&secret, b"cookie 0").to_le_bytes());
        cookie_secret[8..].copy_from_slice(&siphash24(&secret, b"cookie 1").to_le_bytes());
        IsnGenerator::with_secrets(secret, cookie_secret, base)
    }

    /// The key of SYN cookies' hash (apart from the ISNs').
    pub fn cookie_secret(&self) -> &[u8; 16] {
        &self.cookie_secret
    }

    /// The timestamp clock of a 4-tuple's connections (RFC 7323 §7.1): an offset that is
    /// a keyed hash of the 4-tuple, and milliseconds from this generator's base. Every
    /// incarnation of one 4-tuple counts on from where the last left off, so a new SYN
    /// meeting the old incarnation in TIME-WAIT carries a newer TSval and opens the new
    /// one (RFC 6191); a clock that restarted with each incarnation made that a coin toss.
    pub fn ts_clock(&self, t: &FourTuple) -> (u32, Instant) {
        let mut b = [0u8; 37];
        b[..36].copy_from_slice(&tuple_bytes(t));
        b[36] = b'T'; // apart from the ISN's hash of the same tuple
        ((siphash24(&self.secret, &b) >> 32) as u32, self.base)
    }

    /// M: the 4 µs clock.
    pub fn clock(&self, now: Instant) -> u32 {
        (now.saturating_duration_since(self.base).as_micros() / 4) as u32
    }

    pub fn isn(&self, t: &FourTuple, now: Instant) -> u32 {
        self.clock(now)
            .wrapping_add(siphash24(&self.secret, &tuple_bytes(t)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_reference_vectors() {
        // From the SipHash paper, appendix A: key 00..0f, messages 00..(n-1).
        let key: [u8; 16] = core::array::from_fn(|i| i as u8);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(&key, &msg), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(&key, &msg[..8]), 0x93f5_f579_9a93_2462);
    }

    #[test]
    fn isns_advance_with_the_clock_and_differ_by_tuple() {
        let t0 = Instant::now();
        let g = IsnGenerator::new([7; 16], t0);
        let a = FourTuple {
            local: "fd00::1".parse().unwrap(),
            local_port: 80,
            remote: "fd00::2".parse().unwrap(),
            remote_port: 40000,
        };
        let mut b = a;
        b.remote_port = 40001;
        assert_ne!(g.isn(&a, t0), g.isn(&b, t0));
        let later = t0 + std::time::Duration::from_millis(4);
        assert_eq!(g.isn(&a, later).wrapping_sub(g.isn(&a, t0)), 1000);
    }

    /// RFC 6528: the ISN of one 4-tuple says nothing of another's. Structurally: the
    /// offset between two tuples' ISNs at the same moment is no constant across secrets
    /// nor across tuples (as it would be with a clock alone, or a clock plus a hash of
    /// the ports).
    #[test]
    fn isns_of_two_tuples_are_no_constant_offset_apart() {
        let t0 = Instant::now();
        let tuple = |port: u16| FourTuple {
            local: "fd00::1".parse().unwrap(),
            local_port: 80,
            remote: "fd00::2".parse().unwrap(),
            remote_port: port,
        };
        let mut offsets = std::collections::HashSet::new();
        for s in 0..8u8 {
            let g = IsnGenerator::with_secrets([s; 16], [0x55; 16], t0);
            for p in 40000..40008 {
                offsets.insert(g.isn(&tuple(p + 1), t0).wrapping_sub(g.isn(&tuple(p), t0)));
            }
        }
        assert_eq!(offsets.len(), 64, "every offset differs");
    }

    /// The cookie secret is the cookies' own: changing it leaves the ISNs as they were,
    /// and the ISN secret leaves cookies' key alone.
    #[test]
    fn the_cookie_secret_is_apart_from_the_isn_secret() {
        let t0 = Instant::now();
        let t = FourTuple {
            local: "fd00::1".parse().unwrap(),
            local_port: 80,
            remote: "fd00::2".parse().unwrap(),
            remote_port: 40000,
        };
        let a = IsnGenerator::with_secrets([1; 16], [2; 16], t0);
        let b = IsnGenerator::with_secrets([1; 16], [3; 16], t0);
        let c = IsnGenerator::with_secrets([4; 16], [2; 16], t0);
        assert_eq!(a.isn(&t, t0), b.isn(&t, t0));
        assert_ne!(a.isn(&t, t0), c.isn(&t, t0));
        assert_eq!(a.cookie_secret(), c.cookie_secret());
        assert_ne!(a.cookie_secret(), b.cookie_secret());
    }
}
