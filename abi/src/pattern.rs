//! Test payloads: the bytes the tests send through the device, the guests and the guest
//! tools and compare on arrival. Not part of the interface; they live here because this
//! is the one crate every other one (the device, the library and its tools, the lab)
//! already depends on, so every test makes the same bytes from the same seed.

/// An endless xorshift byte stream from a seed, the same in every run: take as many bytes
/// as a transfer needs (`Pattern::new(seed).take(len).collect::<Vec<u8>>()`). Each seed
/// gives its own stream, so bytes that land in the wrong transfer do not match.
#[derive(Clone, Debug)]
pub struct Pattern(u64);

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        // Spread the seed over the state (neighbouring seeds give unrelated streams);
        // xorshift's state must not be zero.
        Pattern(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
}

impl Iterator for Pattern {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        Some(*x as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<const N: usize>(seed: u64) -> [u8; N] {
        let mut b = [0; N];
        for (x, p) in b.iter_mut().zip(Pattern::new(seed)) {
            *x = p;
        }
        b
    }

    #[test]
    fn patterns_are_fixed_by_their_seed() {
        assert_eq!(bytes::<8>(1), [173, 118, 54, 116, 236, 121, 207, 234]);
        assert_eq!(bytes::<8>(2), [27, 173, 68, 140, 245, 146, 199, 212]);
        assert_eq!(bytes::<1000>(7), bytes::<1000>(7));
        // Seeds that differ only in the lowest bit give different streams.
        assert_ne!(bytes::<8>(2), bytes::<8>(3));
    }
}
