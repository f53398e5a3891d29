//! The Internet checksum (RFC 1071), fast enough for bulk data.
//!
//! Every TCP segment the device sends or receives is summed once, payload included, so at
//! MTU 1500 this is a large share of a bulk transfer's cost. The sum is taken 32 bits at a
//! time into 64-bit accumulators (no carry handling in the loop: 2^32 words fit), in the
//! machine's byte order, and folded at the end; RFC 1071 §2(B) shows the one's complement
//! sum is byte-order independent up to a final swap. The loop is simple enough for the
//! compiler to vectorise.

/// The one's complement sum of `data` as big-endian 16-bit words (a trailing odd byte is
/// padded with zero), folded to 16 bits and not complemented, added to `initial` (another
/// such sum).
pub fn sum(initial: u16, data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut blocks = data.chunks_exact(64);
    for b in &mut blocks {
        let mut s: u64 = 0;
        for w in b.chunks_exact(4) {
            s += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
        }
        acc += s;
    }
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        acc += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let mut tail = [0u8; 4];
    let r = words.remainder();
    tail[..r.len()].copy_from_slice(r);
    acc += u32::from_ne_bytes(tail) as u64;
    let native = fold64(acc);
    // Words were read in the machine's order: swap back to network order.
    let be = if cfg!(target_endian = "little") {
        native.swap_bytes()
    } else {
        native
    };
    add(initial, be)
}

/// One's complement addition of two 16-bit sums.
pub fn add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

fn fold64(mut x: u64) -> u16 {
    while x >> 16 != 0 {
        x = (x & 0xffff) + (x >> 16);
    }
    x as u16
}

/// The sum of the pseudo-header for an upper-layer message of `len` bytes with next header
/// (protocol) `next`: IPv6's (RFC 8200 §8.1), or IPv4's (RFC 9293 §3.1, RFC 768) when both
/// addresses are IPv4-mapped ([`super::wire::is_ipv4`]): TCP, UDP and their offloads sum
/// through here whatever the family.
pub fn pseudo_header(
    src: &std::net::Ipv6Addr,
    dst: &std::net::Ipv6Addr,
    next: u8,
    len: u32,
) -> u16 {
    let (s, d) = (src.octets(), dst.octets());
    if super::wire::is_ipv4(src) && super::wire::is_ipv4(dst) {
        let mut p = [0u8; 12];
        p[..4].copy_from_slice(&s[12..]);
        p[4..8].copy_from_slice(&d[12..]);
        p[9] = next;
        p[10..12].copy_from_slice(&(len as u16).to_be_bytes());
        return sum(0, &p);
    }
    let mut p = [0u8; 40];
    p[..16].copy_from_slice(&s);
    p[16..32].copy_from_slice(&d);
    p[32..36].copy_from_slice(&len.to_be_bytes());
    p[39] = next;
    sum(0, &p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious definition, 16 bits at a time.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            s += w as u64;
        }
        fold64(s)
    }

    #[test]
    fn matches_the_definition() {
        let mut x: u32 = 12345;
        let data: Vec<u8> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(1103515245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        for len in (0..200).chain([1499, 1500, 1501, 4095, 4096, 5000]) {
            for start in [0, 1, 3] {
                if start + len > data.len() {
                    continue;
                }
                let d = &data[start..start + len];
                assert_eq!(sum(0, d), reference(d), "len {len} start {start}");
            }
        }
        // All ones: the sum stays 0xffff, never wraps to zero.
        assert_eq!(sum(0, &[0xff; 1000]), 0xffff);
        assert_eq!(sum(0, &[]), 0);
        // Sums of parts at even offsets add up.
        let (a, b) = data.split_at(1000);
        assert_eq!(add(sum(0, a), sum(0, b)), sum(0, &data));
        assert_eq!(sum(sum(0, a), b), sum(0, &data));
    }

    #[test]
    fn agrees_with_etherparse() {
        let data: Vec<u8> = (0..3001u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let s = std::net::Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 1);
        let d = std::net::Ipv6Addr::new(0xfd51, 0x5050, 0, 0, 0, 0, 1, 2);
        let theirs = etherparse::checksum::Sum16BitWords::new()
            .add_16bytes(s.octets())
            .add_16bytes(d.octets())
            .add_4bytes((data.len() as u32).to_be_bytes())
            .add_2bytes([0, 6])
            .add_slice(&data)
            .ones_complement();
        let ours = !sum(pseudo_header(&s, &d, 6, data.len() as u32), &data);
        // etherparse's value is the field's bytes in the machine's order.
        assert_eq!(ours.to_be_bytes(), theirs.to_be().to_be_bytes());
    }

    #[test]
    fn ipv4_pseudo_header_agrees_with_etherparse() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 5 + 3) as u8).collect();
        let s = std::net::Ipv4Addr::new(198, 18, 0, 1);
        let d = std::net::Ipv4Addr::new(198, 18, 0, 2);
        let theirs = etherparse::checksum::Sum16BitWords::new()
            .add_4bytes(s.octets())
            .add_4bytes(d.octets())
            .add_2bytes([0, 17])
            .add_2bytes((data.len() as u16).to_be_bytes())
            .add_slice(&data)
            .ones_complement();
        let ours = !sum(
            pseudo_header(
                &s.to_ipv6_mapped(),
                &d.to_ipv6_mapped(),
                17,
                data.len() as u32,
            ),
            &data,
        );
        assert_eq!(ours.to_be_bytes(), theirs.to_be().to_be_bytes());
    }
}
