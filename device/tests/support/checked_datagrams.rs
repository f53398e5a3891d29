//! Datagrams that carry their own check, for the tests that send UDP over a path that may
//! lose, repeat or damage frames (two stacks on an impaired link, the stack against the
//! Linux kernel): `[seq u32][FNV-1a of the body u64][body]`, the body a pattern of the
//! sequence number. Anything corrupt that got through is seen, and every loss is counted
//! by sequence number, never hidden.

/// The sequence number and the hash before the body.
pub const HEADER: usize = 12;

/// The largest UDP payload one frame carries on a 1500-byte link (the MTU of both paths
/// these datagrams take): anything longer is fragmented.
const ONE_FRAME: usize = 1500 - 40 - 8;

/// FNV-1a.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Datagram `seq`, with a body of `len` bytes.
pub fn datagram(seq: u32, len: usize) -> Vec<u8> {
    let body: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ seq).wrapping_mul(2654435761) as u8)
        .collect();
    let mut d = seq.to_be_bytes().to_vec();
    d.extend_from_slice(&fnv(&body).to_be_bytes());
    d.extend_from_slice(&body);
    d
}

/// The 16-bit one's complement sum of `b` (the Internet checksum's arithmetic).
fn ones_sum(b: &[u8]) -> u16 {
    let mut s: u64 = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64)
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Checks a received datagram; returns its sequence number and whether it arrived damaged.
///
/// The impairment flips one bit per corrupted frame, which UDP's checksum always catches
/// in a datagram of one frame. A datagram of several fragments can take two flips that
/// cancel in the one's complement sum (same bit, opposite directions): no IPv6 host can
/// detect those, so such a datagram is accepted here (and printed) only if its damage is
/// exactly of that kind — anything the checksum could have caught fails the test.
pub fn verify(d: &[u8]) -> (u32, bool) {
    assert!(d.len() >= HEADER, "short datagram of {} bytes", d.len());
    let seq = u32::from_be_bytes(d[..4].try_into().unwrap());
    let want = datagram(seq, d.len() - HEADER);
    if d == &want[..] {
        return (seq, false);
    }
    let diffs: Vec<usize> = (0..d.len()).filter(|&i| d[i] != want[i]).collect();
    println!(
        "datagram {seq} ({} bytes) arrived with {} damaged bytes at {diffs:?}",
        d.len(),
        diffs.len()
    );
    assert!(
        d.len() > ONE_FRAME,
        "datagram {seq} of one frame arrived damaged"
    );
    assert_eq!(
        ones_sum(d),
        ones_sum(&want),
        "datagram {seq}: damage the UDP checksum would have caught"
    );
    (seq, true)
}
