//! A SYN flood from addresses nobody has at a guest's listener while Linux connections
//! echo through it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use qpip_testkit::*;

use crate::echo_server::{adapter_on_a_tap, EchoServer, SLOT};
use crate::fixture::*;
use crate::live;

/// Sends SYNs to `dst`:`port` (at MAC `dst_mac`) out of interface `ifname` of the calling
/// thread's namespace (a packet socket: whole Ethernet frames), each from a random address
/// of the on-link prefix that nobody has and a random port — a flood whose SYN-ACKs no one
/// will answer — at about `rate` a second until `until`. Returns how many.
fn syn_flood(
    ifname: &str,
    dst_mac: [u8; 6],
    dst: std::net::Ipv6Addr,
    port: u16,
    rate: u64,
    until: Instant,
) -> u64 {
    use qpip_device::net::tcp::wire::{self as tcpw, flags, Header};
    use qpip_device::net::wire;
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
    assert!(
        fd >= 0,
        "packet socket: {}",
        std::io::Error::last_os_error()
    );
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex > 0, "no interface {ifname}");
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_ifindex = ifindex as i32;
    sa.sll_halen = 6;
    sa.sll_addr[..6].copy_from_slice(&dst_mac);
    let mut rng = Rng::new(0x5717);
    let (mut sent, start) = (0u64, Instant::now());
    while Instant::now() < until {
        let r = rng.next_u64();
        let mut src = dst.segments();
        src[4] = 0xdead;
        src[5] = (r >> 16) as u16;
        src[6] = (r >> 32) as u16;
        src[7] = (r >> 48) as u16;
        let src = std::net::Ipv6Addr::from(src);
        let h = Header {
            src_port: 1024 + (r as u16 % 60000),
            dst_port: port,
            seq: (r >> 20) as u32,
            flags: flags::SYN,
            window: 65535,
            ..Header::default()
        };
        let seg = tcpw::build(&src, &dst, &h, &[]);
        let mut frame = wire::ipv6_packet(&src, &dst, 6, 64, &seg);
        let src_mac = [
            0x02,
            0xee,
            (r >> 8) as u8,
            (r >> 16) as u8,
            (r >> 24) as u8,
            r as u8,
        ];
        wire::write_ethernet(&mut frame, &dst_mac, &src_mac);
        // SAFETY: a valid buffer and address of the sizes given.
        let n = unsafe {
            libc::sendto(
                fd,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n == frame.len() as isize {
            sent += 1;
        }
        // Paced: no more than `rate` a second on average.
        let due = start + Duration::from_micros(sent * 1_000_000 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    sent
}

#[test]
#[ignore = "a stress case: ./qpip stress"]
fn a_syn_flood_while_connections_move_data() {
    const CONNS: usize = 16;
    const PORT: u16 = 9200;
    const RATE: u64 = 40_000;
    let phase = Duration::from_secs(10);
    let Some((ns, ad)) = adapter_on_a_tap("a SYN flood", "qpipflood", "qfl0") else {
        return;
    };
    let mut g = ad.guest(0);
    let mut server = EchoServer::new(&mut g, CONNS, PORT, 64);
    let streams = server.connect_all(&mut g, &ns);
    // Three phases of `phase`: before, during and after the flood. The clients count what
    // they verify per phase; the device echoes throughout.
    let t0 = Instant::now() + Duration::from_millis(100);
    let marks = [t0 + phase, t0 + 2 * phase, t0 + 3 * phase];
    let clients: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(j, mut s)| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(j as u64 + 7);
                let mut per_phase = [0u64; 3];
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                loop {
                    let now = Instant::now();
                    let Some(p) = marks.iter().position(|&m| now < m) else {
                        break;
                    };
                    let len = 1 + rng.below(4096) as usize;
                    let chunk = rng.bytes(len);
                    s.write_all(&chunk).expect("write");
                    let mut back = vec![0; len];
                    s.read_exact(&mut back).expect("the echo");
                    assert!(back == chunk, "stream {j}: the echo differs");
                    per_phase[p] += len as u64;
                }
                per_phase
            })
        })
        .collect();
    let flood = {
        let (start, end) = (marks[0], marks[1]);
        let nsr = &ns;
        std::thread::scope(|s| {
            let flooder = s.spawn(move || {
                nsr.within(|| {
                    if let Some(w) = start.checked_duration_since(Instant::now()) {
                        std::thread::sleep(w);
                    }
                    syn_flood("qfl0", mac(0), ADDRS[0].parse().unwrap(), PORT, RATE, end)
                })
            });
            let mut heap_peak = live();
            let heap_before = live();
            while Instant::now() < marks[2] + Duration::from_secs(1) {
                let p = server.pump(&mut g, marks[2]);
                heap_peak = heap_peak.max(live());
                if !p.any {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            (flooder.join().expect("flooder"), heap_before, heap_peak)
        })
    };
    let (syns, heap_before, heap_peak) = flood;
    let per_phase: Vec<[u64; 3]> = clients
        .into_iter()
        .map(|h| h.join().expect("a client"))
        .collect();
    let total = |p: usize| per_phase.iter().map(|c| c[p]).sum::<u64>();
    let (before, during, after) = (total(0), total(1), total(2));
    // Afterwards a new connection is accepted (a QP of the listener's context, with a
    // buffer of its own).
    let c = &mut server.ctxs[0];
    let mut fresh = g
        .create_qp_typed(
            c.ctx,
            (c.scq.id, c.rcq.id),
            (2, 2),
            QP_TYPE_TCP,
            FRAMING_STREAM,
        )
        .unwrap();
    let buf = g.alloc_buf(SLOT, 0);
    let mr = g.reg_mr(c.ctx, &buf, MR_ACCESS_LOCAL_WRITE).unwrap();
    let acc = g.submit_accept(c.ctx, c.listener, fresh.id);
    let mut s = ns.within(|| {
        TcpStream::connect(format!("[{}]:{PORT}", ADDRS[0])).expect("a connection after the flood")
    });
    g.admin_wait_ok(acc, "accept after the flood");
    g.post_recv(
        &mut fresh,
        &[recv_wqe(0, &[buf.sge(0, SLOT as u32, mr.lkey)])],
    );
    s.write_all(b"after").unwrap();
    let c = g.wait_cqe(&mut server.ctxs[0].rcq);
    assert_eq!((c.qp, c.byte_len), (fresh.id, 5));
    let stats = g.query_stats().counters;
    let cookies = stats[STAT_TCP_SYN_COOKIES as usize];
    println!(
        "stress: a SYN flood of {syns} SYNs in {} s ({} a second, each from a random address \
         nobody has on the link and a random port) at a guest's \
         listener while {CONNS} connections echo: none lost, every byte verified; their \
         throughput {:.1} MB/s before, {:.1} during ({:.0} %), {:.1} after; SYN cookies sent \
         {cookies}; device heap grew by at most {} KiB; a new connection afterwards accepted",
        phase.as_secs(),
        syns / phase.as_secs(),
        before as f64 / phase.as_secs_f64() / 1e6,
        during as f64 / phase.as_secs_f64() / 1e6,
        100.0 * during as f64 / before.max(1) as f64,
        after as f64 / phase.as_secs_f64() / 1e6,
        (heap_peak - heap_before) / 1024,
    );
    assert!(cookies > 0, "SYN cookies engaged");
    assert!(
        during > 0 && after > 0,
        "the connections moved data throughout"
    );
}
