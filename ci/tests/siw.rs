//! Soft-iWARP between two guests: Linux's siw driver and rdma-core's `rping` over the
//! guests' virtio-net NICs, on the lab network's IPv6 addresses — the iWARP peer that qpip
//! is to interoperate with, proven to work here, and the source of the golden capture in
//! `device/tests/data/iwarp/`.
//!
//! Both guests run `lab-siw` (the RDMA modules, siw, and the link `siw0` over the NIC),
//! then `rping` runs between them, one server and one client at a time: first a short
//! exchange captured whole on the lab bridge (the golden capture: every frame must dissect
//! as TCP/MPA/DDP/RDMAP without a malformed frame, and each connection must carry exactly
//! the messages of rping's protocol), then longer runs both ways at several sizes, rping's
//! `-V` checking every byte, captured headers only to count the bytes each connection
//! carried.
//!
//! The VM test is ignored by a plain `cargo test` (`./qpip test` runs it with `--ignored`;
//! it needs root for the lab network). With `QPIP_SIW_GOLDEN=FILE` it also copies its
//! golden capture to FILE once every check passed: that is how
//! `device/tests/data/iwarp/siw-rping.pcap` is made (see the README there). The check of
//! that committed file runs in a plain `cargo test` (it needs tshark, which `./qpip setup`
//! installs, and says so when skipped).

mod common;
// The crate root is this file, so its modules' paths are spelled out.
#[path = "siw/dissect.rs"]
mod dissect;
#[path = "common/dumpcap.rs"]
mod dumpcap;

use common::{needs_root, Report};
use dissect::{by_run, check_full_capture, connections, frames, have_tshark, Connection};
use dumpcap::Capture;
use qpip_lab::netns;
use qpip_lab::{guest_name, unique_netns, LabHost, LabSpec, Network, QpipdLayout};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// rping's TCP port (its default).
const PORT: u16 = 7174;

/// One rping exchange: `client` (guest 1 = a or 2 = b) connects to the other guest's
/// server, `iters` iterations of `size` bytes.
#[derive(Debug, Clone, Copy)]
struct Rping {
    tag: &'static str,
    client: usize,
    iters: u64,
    size: u64,
}

/// `run(tag, client, iters, size)`: an [`Rping`].
const fn run(tag: &'static str, client: usize, iters: u64, size: u64) -> Rping {
    Rping {
        tag,
        client,
        iters,
        size,
    }
}

/// The golden capture's exchanges: a few small iterations, then a size that spans several
/// TCP segments (at the lab's MTU of 1500, an MSS of 1440), so its RDMA Read Response and
/// RDMA Write are cut into several DDP segments.
const GOLDEN: [Rping; 2] = [run("g64", 1, 3, 64), run("g2000", 1, 3, 2000)];

/// The longer runs, both ways: rping's smallest buffer (23 bytes), a size over one
/// segment, and its largest (65535).
const BULK: [Rping; 6] = [
    run("ab23", 1, 300, 23),
    run("ab2000", 1, 150, 2000),
    run("ab65535", 1, 50, 65535),
    run("ba23", 2, 300, 23),
    run("ba2000", 2, 150, 2000),
    run("ba65535", 2, 50, 65535),
];

/// The shell helpers of this file's guest scripts (after common's and `common/rping.sh`,
/// which retries a run whose connection siw's responder stalled).
///  settle                waits until no TCP connection of port 7174 is mid-teardown here,
///                        so the last segments are on the wire before a capture stops
const HELPERS: &str = r#"
settle() {
    i=0
    while awk 'NR > 1 && ($2 ~ /:1C06$/ || $3 ~ /:1C06$/) && $4 != "06" && $4 != "0A" { f = 1 }
               END { exit !f }' /proc/net/tcp6; do
        i=$((i + 1)); [ $i -lt 100 ] || { kv settle timeout; return; }; sleep 0.1
    done
}
"#;

/// Guest `n`'s part of `runs`, in order: the server's or the client's side of each.
fn steps(n: usize, runs: &[Rping]) -> String {
    runs.iter()
        .map(|r| {
            let args = format!("-C {} -S {}", r.iters, r.size);
            if r.client == n {
                let peer = netns::virtio_addr(3 - n);
                format!("client {} siw {peer} {args}\n", r.tag)
            } else {
                format!("serve {} siw {args}\n", r.tag)
            }
        })
        .collect()
}

/// Guest `n`'s script: siw up, the golden exchanges, the longer runs.
fn script(n: usize) -> String {
    let body = format!(
        r#"
lab-siw >/tmp/lab-siw.out 2>&1; st=$?
sed 's/^/  /' /tmp/lab-siw.out
kv siw.status $st
kv siw.link "$(rdma link show siw0/1 2>&1)"
if [ $st != 0 ]; then
    touch /lab/golden-done.$QPIP_GUEST_NAME /lab/bulk-done.$QPIP_GUEST_NAME
    exit 1
fi
await_unless_host_done capture-golden
{golden}settle
touch /lab/golden-done.$QPIP_GUEST_NAME
await_unless_host_done capture-bulk
t0=$(cut -d' ' -f1 /proc/uptime)
{bulk}settle
kv bulk.seconds "$(awk -v t0=$t0 '{{ print $1 - t0 }}' /proc/uptime)"
touch /lab/bulk-done.$QPIP_GUEST_NAME
# Up until the host has stopped its capture: its marker is a ping to guest a.
lab-wait host-done 300
"#,
        golden = steps(n, &GOLDEN),
        bulk = steps(n, &BULK)
    );
    common::script(&format!("{}{HELPERS}", common::RPING_SHELL), &body)
}

/// The host side: the golden capture around the golden exchanges, the headers-only one
/// around the longer runs.
fn capture_both(host: &LabHost) -> Result<(PathBuf, PathBuf), String> {
    let dir = host
        .shared_dir()
        .parent()
        .ok_or("the shared folder has no parent")?
        .to_path_buf();
    let wait_all = |what: &str| -> Result<(), String> {
        for g in host.guests() {
            host.wait_for(&format!("{what}.{g}"), Duration::from_secs(600))?;
        }
        Ok(())
    };
    let signal = |name: &str| host.signal(name).map_err(|e| format!("signal {name}: {e}"));

    let golden = dir.join("siw-rping-golden.pcap");
    let mut cap = Capture::start(host, &golden, PORT..=PORT, None)?;
    signal("capture-golden")?;
    wait_all("golden-done")?;
    cap.stop(host)?;

    // Headers only (Ethernet 14 + IPv6 40 + TCP with options 32 bytes, and some): the
    // lengths of the segments are what is counted.
    let bulk = dir.join("siw-rping-bulk.pcap");
    let mut cap = Capture::start(host, &bulk, PORT..=PORT, Some(128))?;
    signal("capture-bulk")?;
    wait_all("bulk-done")?;
    cap.stop(host)?;
    Ok((golden, bulk))
}

/// Where the committed golden capture lives.
fn committed_golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/tests/data/iwarp/siw-rping.pcap")
}

// ---- tests ---------------------------------------------------------------------------------

/// The committed golden capture still dissects cleanly and holds the golden exchanges.
#[test]
fn golden_capture_dissects_without_malformed_frames() {
    if !have_tshark() {
        eprintln!("skipped: no tshark (./qpip setup installs it)");
        return;
    }
    let file = committed_golden();
    let runs: Vec<(Rping, usize)> = GOLDEN.iter().map(|r| (*r, 0)).collect();
    let conns =
        check_full_capture(&file, &runs).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(conns.len(), GOLDEN.len());
}

/// The check above fails on a capture that differs: the golden one with the MPA length
/// of its first Send (the first 40-byte TCP payload: 2 + 18 + 16 + 4 bytes) made too large,
/// which throws off the FPDU framing of the rest of that connection.
#[test]
fn a_damaged_golden_capture_fails_the_check() {
    if !have_tshark() {
        eprintln!("skipped: no tshark (./qpip setup installs it)");
        return;
    }
    let bytes = fs::read(committed_golden()).unwrap();
    let (header, records) = dumpcap::pcap::records(&bytes, false).unwrap();
    let mut out = header.to_vec();
    let mut damaged = false;
    for (whole, frame) in records {
        let mut whole = whole.to_vec();
        // Ethernet 14 + IPv6 40, then TCP's data offset (in 32-bit words) at byte 12.
        let tcp = 14 + 40;
        let payload = tcp + usize::from(frame[tcp + 12] >> 4) * 4;
        if !damaged && frame.len() - payload == 40 {
            whole[16 + payload..16 + payload + 2].copy_from_slice(&[0x7f, 0xff]);
            damaged = true;
        }
        out.extend_from_slice(&whole);
    }
    assert!(damaged, "the golden capture has no 40-byte TCP payload");
    let file = std::env::temp_dir().join(format!("qpip-siw-damaged-{}.pcap", std::process::id()));
    fs::write(&file, out).unwrap();
    let runs: Vec<(Rping, usize)> = GOLDEN.iter().map(|r| (*r, 0)).collect();
    let result = check_full_capture(&file, &runs);
    let _ = fs::remove_file(&file);
    match result {
        Err(e) => eprintln!(
            "rejected as it should be: {}",
            e.lines().next().unwrap_or("")
        ),
        Ok(conns) => panic!("the damaged capture passed: {conns:#?}"),
    }
}

/// A segment TCP sends again is counted once: the golden capture with, where the server
/// sends the last segment of its RDMA Write and then a Send, first both in one segment (a
/// retransmission that coalesces, carrying the Send for the first time), then the Send
/// alone twice (the original, now old, and once more as a tail loss probe does when an ACK
/// is slow — seen on a loaded host), still holds exactly the golden exchanges.
#[test]
fn a_segment_sent_again_is_counted_once() {
    if !have_tshark() {
        eprintln!("skipped: no tshark (./qpip setup installs it)");
        return;
    }
    let bytes = fs::read(committed_golden()).unwrap();
    let (header, records) = dumpcap::pcap::records(&bytes, false).unwrap();
    assert_eq!(
        &header[..4],
        [0xd4, 0xc3, 0xb2, 0xa1],
        "a little-endian pcap"
    );
    // Ethernet 14, then IPv6: its payload length at 4, its source address at 8..24.
    let (ip, tcp) = (14, 14 + 40);
    let payload = |frame: &[u8]| tcp + usize::from(frame[tcp + 12] >> 4) * 4;
    let src = |frame: &[u8]| frame[ip + 8..ip + 24].to_vec();
    let record = |like: &[u8], frame: &[u8]| -> Vec<u8> {
        let mut r = like[..8].to_vec();
        let len = (frame.len() as u32).to_le_bytes();
        r.extend_from_slice(&len);
        r.extend_from_slice(&len);
        r.extend_from_slice(frame);
        r
    };
    let pair = (0..records.len() - 1)
        .find(|&i| {
            let (a, b) = (records[i].1, records[i + 1].1);
            a.len() - payload(a) == 616 && b.len() - payload(b) == 40 && src(a) == src(b)
        })
        .expect("the golden capture has a 616-byte segment and a 40-byte one from one end");
    let mut out = header.to_vec();
    for (i, (whole, _)) in records.iter().enumerate() {
        out.extend_from_slice(whole);
        if i == pair {
            let (first, last) = (records[pair].1, records[pair + 1].1);
            let mut both = first.to_vec();
            both.extend_from_slice(&last[payload(last)..]);
            let ip_len = (both.len() - tcp) as u16;
            both[ip + 4..ip + 6].copy_from_slice(&ip_len.to_be_bytes());
            out.extend_from_slice(&record(whole, &both));
        }
        if i == pair + 1 {
            out.extend_from_slice(whole);
        }
    }
    let file = std::env::temp_dir().join(format!("qpip-siw-resent-{}.pcap", std::process::id()));
    fs::write(&file, out).unwrap();
    let runs: Vec<(Rping, usize)> = GOLDEN.iter().map(|r| (*r, 0)).collect();
    let result = check_full_capture(&file, &runs);
    let _ = fs::remove_file(&file);
    let conns = result.unwrap_or_else(|e| panic!("a capture with segments sent again: {e}"));
    let resent: Vec<u64> = conns.iter().map(|c| c.resent).collect();
    assert_eq!(resent.iter().sum::<u64>(), 616 + 40 + 40, "{conns:#?}");
}

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn siw_rping_between_two_guests_over_virtio_net() {
    needs_root!();
    let guest = |n: usize| {
        let mut g = common::lab_guest(guest_name(n), script(n), Duration::from_secs(600));
        // siw runs over the virtio-net NIC; the guests need no qpip device.
        g.vm.devices = 0;
        g
    };
    let spec = LabSpec {
        guests: vec![guest(1), guest(2)],
        network: Network::Lab(unique_netns("qpip-siw")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, capture_both);
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    let (golden, bulk) = out
        .host
        .clone()
        .unwrap_or_else(|e| panic!("host side: {e}\n{}", ctx()));
    eprintln!(
        "siw lab: guests a {:.1} s, b {:.1} s; the longer runs {} s in a",
        ga.elapsed.as_secs_f64(),
        gb.elapsed.as_secs_f64(),
        a.get("bulk.seconds"),
    );
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());

    // siw is up on each guest's NIC, and every rping server listened on siw0.
    for (n, rep) in [(1, &a), (2, &b)] {
        assert_eq!(rep.get("siw.status"), "0", "{}", ctx());
        let link = rep.get("siw.link");
        assert!(
            link.contains("state ACTIVE") && link.contains("netdev eth0"),
            "guest {n}: siw0 is {link:?}\n{}",
            ctx()
        );
    }
    // Each run: the server listened on siw0, and both ends finished after the client had
    // verified every iteration (maybe after attempts that stalled).
    let mut stalls = BTreeMap::new();
    for r in GOLDEN.iter().chain(&BULK) {
        let (client, server) = if r.client == 1 { (&a, &b) } else { (&b, &a) };
        let srv_addr = netns::virtio_addr(3 - r.client);
        let listen = server.get(&format!("{}.listen", r.tag));
        assert!(
            listen.contains("siw0/1")
                && listen.contains("state LISTEN")
                && listen.contains(&format!("src-addr {srv_addr}:{PORT}")),
            "{}: the rping server's cm_id is {listen:?}, not listening on siw0 at {srv_addr}\n{}",
            r.tag,
            ctx()
        );
        let stalled = server.num(&format!("{}.stalls", r.tag)) as usize;
        let done = [
            server.get(&format!("{}.server", r.tag)),
            client.get(&format!("{}.client", r.tag)),
        ];
        assert_eq!(
            done,
            ["0", "0"],
            "{}: server and client exit statuses ({stalled} stalled attempts)\n{}",
            r.tag,
            ctx()
        );
        assert_eq!(
            client.num(&format!("{}.pings", r.tag)),
            r.iters,
            "{}: iterations the client verified\n{}",
            r.tag,
            ctx()
        );
        stalls.insert(r.tag, stalled);
    }
    let with_stalls = |runs: &[Rping]| -> Vec<(Rping, usize)> {
        runs.iter().map(|r| (*r, stalls[r.tag])).collect()
    };
    let stalled: Vec<_> = stalls.iter().filter(|(_, n)| **n > 0).collect();
    if !stalled.is_empty() {
        eprintln!(
            "  siw's accept race stalled a connection, and the run was tried again: {stalled:?}"
        );
    }

    // The golden exchanges on the wire, frame by frame.
    check_full_capture(&golden, &with_stalls(&GOLDEN)).unwrap_or_else(|e| {
        panic!("{}: {e}\n{}", golden.display(), ctx());
    });
    // The longer runs: a connection each (and each stalled attempt's), from the right
    // client, carrying at least the bytes rping moved (its buffer read by the server, then
    // written back, each time).
    let conns: Vec<Connection> = connections(&frames(&bulk).unwrap()).into_values().collect();
    let bulk_runs = with_stalls(&BULK);
    let ran = by_run(&conns, &bulk_runs).unwrap_or_else(|e| panic!("{}: {e}", bulk.display()));
    for ((r, _), (_, c)) in bulk_runs.iter().zip(ran) {
        let moved = r.iters * r.size;
        eprintln!(
            "  {}: rping -C {} -S {} from {}: {} bytes to the server, {} back ({} sent again)",
            r.tag, r.iters, r.size, c.client, c.to_server, c.to_client, c.resent
        );
        assert!(
            c.to_server >= moved && c.to_client >= moved,
            "{}: rping moved {moved} bytes each way, the connection carried {c:#?}",
            r.tag
        );
    }

    if let Some(dest) = std::env::var_os("QPIP_SIW_GOLDEN") {
        // The committed capture holds the golden exchanges only.
        assert!(
            GOLDEN.iter().all(|r| stalls[r.tag] == 0),
            "a golden exchange stalled (siw's accept race); not writing {dest:?}: run again"
        );
        fs::copy(&golden, &dest)
            .unwrap_or_else(|e| panic!("copying {} to {dest:?}: {e}", golden.display()));
        eprintln!("golden capture written to {}", Path::new(&dest).display());
    }
}
