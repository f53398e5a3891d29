//! The switch between functions (`backend::switch`): forwarding by MAC (learning, floods,
//! moves, the table's bound, hostile bytes), the uplink both ways (a memory pair plays the
//! wire), TCP super-frames, readiness for poll(2), concurrent engines, and two real stacks
//! talking through it.

mod concurrency;
mod forwarding;
mod identity;
mod readiness;
mod stacks;
mod uplink;

use std::os::fd::RawFd;
use std::sync::Arc;

use qpip_device::backend::switch::{Mac, PortOptions, Switch, SwitchConfig, SwitchPort};
use qpip_device::backend::{memory, Backend};

pub const A: Mac = [0x02, 0, 0, 0, 0, 0x0a];
pub const B: Mac = [0x02, 0, 0, 0, 0, 0x0b];
pub const C: Mac = [0x02, 0, 0, 0, 0, 0x0c];
/// A host beyond the uplink.
pub const H: Mac = [0x02, 0, 0, 0, 0, 0x11];
/// Nobody's.
pub const UNKNOWN: Mac = [0x02, 0, 0, 0, 0, 0x99];
pub const BROADCAST: Mac = [0xff; 6];
/// All-nodes IPv6 multicast.
pub const MULTICAST: Mac = [0x33, 0x33, 0, 0, 0, 1];

/// A minimum-size frame from `src` to `dst` carrying `tag` (EtherType: local experimental).
pub fn frame(dst: &Mac, src: &Mac, tag: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(dst);
    f.extend_from_slice(src);
    f.extend_from_slice(&0x88b5u16.to_be_bytes());
    f.extend_from_slice(&tag.to_be_bytes());
    f.resize(60, 0);
    f
}

pub fn tag(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[14..18].try_into().unwrap())
}

/// Every frame `b` has now, with `recv_owned` as an engine takes them.
pub fn drain(b: &mut dyn Backend) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(n) = b.recv_owned(&mut buf).unwrap() {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Every frame each port has, the uplink pumped dry: drains until a round takes nothing
/// and no port's fd is readable (a port's `recv` stops when its own queue is empty, while
/// the uplink may still hold frames for the others).
pub fn drain_all(ports: &mut [SwitchPort]) -> Vec<Vec<Vec<u8>>> {
    let mut out = vec![Vec::new(); ports.len()];
    // Far more rounds than the frames in flight need: a port readable with nothing to
    // take would otherwise keep this going forever.
    for _ in 0..10_000 {
        let mut n = 0;
        for (i, p) in ports.iter_mut().enumerate() {
            let frames = drain(p);
            n += frames.len();
            out[i].extend(frames);
        }
        if n == 0 && ports.iter().all(|p| !readable(p.fd())) {
            return out;
        }
    }
    panic!("a port stays readable with nothing to take");
}

/// The tags of every frame `b` has now.
pub fn tags(b: &mut dyn Backend) -> Vec<u32> {
    drain(b).iter().map(|f| tag(f)).collect()
}

/// Whether poll(2) with a zero timeout says `fd` is readable.
pub fn readable(fd: RawFd) -> bool {
    poll_in(fd, 0)
}

/// poll(2) for input on `fd` for up to `ms` milliseconds.
pub fn poll_in(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1 && p.revents & libc::POLLIN != 0
}

/// The functions' MACs: port i's is `FUNCTION_MACS[i]`.
pub const FUNCTION_MACS: [Mac; 3] = [A, B, C];

/// A switch with `n` ports (port i a function of MAC `FUNCTION_MACS[i]`, no other
/// address, not trusted) and, if `uplink`, a memory wire as its uplink, whose far end
/// (the world beyond) is returned.
pub fn switch(
    n: usize,
    uplink: bool,
) -> (Arc<Switch>, Vec<SwitchPort>, Option<memory::MemoryLink>) {
    switch_with(n, uplink, SwitchConfig::default(), &[])
}

/// As [`switch`], with `config`, the ports in `trusted` trusted.
pub fn switch_with(
    n: usize,
    uplink: bool,
    config: SwitchConfig,
    trusted: &[usize],
) -> (Arc<Switch>, Vec<SwitchPort>, Option<memory::MemoryLink>) {
    let (sw, far) = if uplink {
        let (near, far) = memory::pair().unwrap();
        (Switch::with_config(Some(Box::new(near)), config), Some(far))
    } else {
        (Switch::with_config(None, config), None)
    };
    let ports = (0..n)
        .map(|i| {
            let name = format!("f{i}");
            let options = PortOptions {
                trusted: trusted.contains(&i),
                ..PortOptions::default()
            };
            sw.declare(&name, options);
            let mut p = sw.port(&name).unwrap();
            p.claim_identity(FUNCTION_MACS[i], &[]).unwrap();
            p
        })
        .collect();
    (sw, ports, far)
}
