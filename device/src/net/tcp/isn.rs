//! Initial sequence numbers (RFC 6528): `ISN = M + F(4-tuple, secret)`, M a clock ticking
//! every 4 µs, F a keyed hash (SipHash-2-4 with a 128-bit secret), so sequence numbers of
//! one connection's incarnations advance with time while an off-path attacker cannot
//! predict another's. The same keyed hash makes SYN cookies.

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

/// Makes ISNs for the connections of one device.
#[derive(Debug, Clone)]
pub struct IsnGenerator {
    secret: [u8; 16],
    base: Instant,
}

impl IsnGenerator {
    /// `secret` must be unpredictable in the device (taken from the OS); tests fix it.
    pub fn new(secret: [u8; 16], base: Instant) -> IsnGenerator {
        IsnGenerator { secret, base }
    }

    pub fn secret(&self) -> &[u8; 16] {
        &self.secret
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

/// A secret from the operating system's random source (for the device; tests pass
/// fixed secrets).
pub fn random_secret() -> [u8; 16] {
    let mut s = [0u8; 16];
    let got = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut s));
    if got.is_err() {
        // No random device: fall back on the clock and the process id (weak, but never
        // the same twice).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let v = t ^ (std::process::id() as u128) << 64;
        s.copy_from_slice(&v.to_le_bytes());
    }
    s
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
}
