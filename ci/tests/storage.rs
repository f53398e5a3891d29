//! Network storage over queue pairs, with the NBD programs nobody here wrote: guest b
//! exports a file with `qpip-nbd serve` over its qpip device's TCP QPs, and guest a's
//! stock `nbd-client` (Debian's, with the kernel's `nbd` driver over the guest's own TCP
//! stack and virtio-net NIC) uses it as a disk: an ext2 file system is made on it, a file
//! written and flushed with `sync`, the file system unmounted, checked by `e2fsck`,
//! mounted again and the file read back, its SHA-256 compared. The server's log must
//! show no failed disk operation.
//!
//! Then the other way round: guest a's `qpip-nbd connect` (a ublk block device whose
//! requests all go over a TCP QP) against `qpip-nbd serve` and against the stock
//! `nbd-server` on guest b's kernel sockets, the same file system checks on each; and what
//! a network disk must do when its server fails: requests end with an I/O error within
//! the timeout (a killed server, a hung one, a cut link), what was flushed survives the server's
//! restart, the client connects again by itself, the device can be removed and made
//! again, and the server keeps no connection of a client that went without a word.
//!
//! The storage programs and modules come from the lab's extras share (`lab-storage`).
//! The test boots VMs: ignored by a plain `cargo test`, run by `./qpip test` (as root).

mod common;

use common::{needs_root, Report};
use qpip_lab::{guest_name, unique_netns, LabHost, LabSpec, Network, QpipdLayout};
use std::time::Duration;

/// Guest b: exports a 128 MiB file on its tmpfs until a is done.
const SERVER: &str = r#"
lab-storage > /tmp/storage 2>&1; kv storage.status $?; sed 's/^/storage: /' /tmp/storage
truncate -s 128M /tmp/disk.img
qpip-nbd serve /tmp/disk.img -n disk > /tmp/serve.log 2>&1 &
s=$!
# Listening once it says so.
i=0
until grep -q serving /tmp/serve.log || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
touch /lab/serving
await done
kill $s
wait $s
kv serve.log.failed "$(grep -c 'the disk answered' /tmp/serve.log)"
sed 's/^/serve: /' /tmp/serve.log
"#;

/// Guest a: the stock client, an ext2 file system, a file through a remount.
const CLIENT: &str = r#"
lab-storage > /tmp/storage 2>&1; kv storage.status $?; sed 's/^/storage: /' /tmp/storage
await serving || exit 1
nbd-client -N disk fd51:5050::1:2 10809 /dev/nbd0 > /tmp/nbd 2>&1; kv connect $?
sed 's/^/nbd-client: /' /tmp/nbd
# The kernel learns the size as the device comes up: give it a moment.
i=0
while [ "$(cat /sys/block/nbd0/size)" = 0 ] && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
kv size "$(blockdev --getsize64 /dev/nbd0)"
mkfs.ext2 -q /dev/nbd0; kv mkfs $?
mkdir -p /mnt
mount -t ext2 /dev/nbd0 /mnt; kv mount $?
head -c 40000000 /dev/urandom > /tmp/f
kv sha "$(sha256sum < /tmp/f | cut -d' ' -f1)"
cp /tmp/f /mnt/f; kv write $?
sync; kv sync $?
umount /mnt; kv umount $?
e2fsck -fn /dev/nbd0 > /tmp/fsck 2>&1; kv fsck $?
sed 's/^/e2fsck: /' /tmp/fsck
# Nothing of the file may come from this guest's page cache: drop it.
echo 3 > /proc/sys/vm/drop_caches
mount -t ext2 -o ro /dev/nbd0 /mnt; kv remount $?
kv back.sha "$(sha256sum < /mnt/f | cut -d' ' -f1)"
umount /mnt
nbd-client -d /dev/nbd0 > /dev/null 2>&1; kv disconnect $?
touch /lab/done
"#;

/// Runs guest a's `client` and guest b's `server` scripts (after [`FS_CHECKS`]'s helpers)
/// on a lab network of their own, the devices functions of one adapter.
fn run_pair(tag: &str, client: &str, server: &str) -> qpip_lab::LabOutcome<()> {
    run_lab(tag, client, server, QpipdLayout::Adapter, |_| ())
}

/// [`run_pair`] in `layout`, with `host` as the lab's host side.
fn run_lab<R: Send>(
    tag: &str,
    client: &str,
    server: &str,
    layout: QpipdLayout,
    host: impl FnOnce(&LabHost) -> R + Send,
) -> qpip_lab::LabOutcome<R> {
    let guest = |n: usize, body: &str| {
        common::lab_guest(
            guest_name(n),
            common::script(FS_CHECKS, body),
            Duration::from_secs(600),
        )
    };
    let spec = LabSpec {
        guests: vec![guest(1, client), guest(2, server)],
        network: Network::Lab(unique_netns(tag)),
        layout,
    };
    common::lab(&spec, host)
}

/// Both guests' reports, and their whole text for a failure's message.
fn reports<R>(out: &qpip_lab::LabOutcome<R>) -> (Report<'_>, Report<'_>, String) {
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{ctx}");
    (a, b, ctx)
}

/// Guest a's file system checks passed (the stock client's, or [`FS_CHECKS`]' under its
/// tag, `prefix` being "TAG."): every step exited 0, and the file read back after the
/// remount is the one written.
fn assert_fs_checks(a: &Report, prefix: &str, ctx: &str) {
    for step in [
        "mkfs", "mount", "write", "sync", "umount", "fsck", "remount",
    ] {
        assert_eq!(
            a.get(&format!("{prefix}{step}")),
            "0",
            "{prefix}{step}\n{ctx}"
        );
    }
    assert_eq!(
        a.get(&format!("{prefix}back.sha")),
        a.get(&format!("{prefix}sha")),
        "{prefix}: the file read back\n{ctx}"
    );
}

/// Guest b's `qpip-nbd serve` logged no failed disk operation.
fn assert_served_all(b: &Report, ctx: &str) {
    assert_eq!(
        b.num("serve.log.failed"),
        0,
        "failed disk operations\n{ctx}"
    );
}

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_stock_nbd_client_uses_qpip_nbd_serve_over_qps_as_an_ext2_disk() {
    needs_root!();
    let out = run_pair("qpip-nbd", CLIENT, SERVER);
    let (a, b, ctx) = reports(&out);
    for (r, who) in [(&a, "a"), (&b, "b")] {
        assert_eq!(r.get("storage.status"), "0", "lab-storage on {who}\n{ctx}");
    }
    assert_eq!(a.get("connect"), "0", "connect\n{ctx}");
    assert_eq!(a.num("size"), 128 << 20, "the disk's size\n{ctx}");
    assert_fs_checks(&a, "", &ctx);
    assert_eq!(a.get("disconnect"), "0", "{ctx}");
    assert_served_all(&b, &ctx);
}

/// Guest a's file system checks on the block device `$dev`, tagged `$1` in the report.
const FS_CHECKS: &str = r#"
fs_checks() {
  t=$1
  mkfs.ext2 -q "$dev"; kv $t.mkfs $?
  mkdir -p /mnt
  mount -t ext2 "$dev" /mnt; kv $t.mount $?
  head -c 30000000 /dev/urandom > /tmp/f
  kv $t.sha "$(sha256sum < /tmp/f | cut -d' ' -f1)"
  cp /tmp/f /mnt/f; kv $t.write $?
  sync; kv $t.sync $?
  umount /mnt; kv $t.umount $?
  e2fsck -fn "$dev" > /tmp/fsck 2>&1; kv $t.fsck $?
  sed "s/^/$t e2fsck: /" /tmp/fsck
  echo 3 > /proc/sys/vm/drop_caches
  mount -t ext2 -o ro "$dev" /mnt; kv $t.remount $?
  kv $t.back.sha "$(sha256sum < /mnt/f | cut -d' ' -f1)"
  umount /mnt
}
# connect TAG ARGS...: qpip-nbd connect in the background (pid in $c), its log in
# /tmp/TAG.log; sets $dev once the device is there.
connect() {
  t=$1; shift
  qpip-nbd connect "$@" > /tmp/$t.log 2>&1 &
  c=$!
  i=0
  until grep -q '^qpip-nbd: /dev/ublkb' /tmp/$t.log || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
  dev=$(sed -n 's|^qpip-nbd: \(/dev/ublkb[0-9]*\) .*|\1|p' /tmp/$t.log)
  kv $t.dev "$dev"
}
# disconnect TAG: ends the client of connect TAG, and reports whether its device is gone.
disconnect() {
  kill -TERM $c; wait $c; kv $1.exit $?
  sed "s/^/$1: /" /tmp/$1.log
  kv $1.gone "$([ -e "$dev" ] && echo no || echo yes)"
}
"#;

/// Guest b: `qpip-nbd serve` on port 10809 and the stock nbd-server on 10810, on its
/// kernel sockets, each its own file.
const SERVERS: &str = r#"
lab-storage > /tmp/storage 2>&1; kv storage.status $?; sed 's/^/storage: /' /tmp/storage
truncate -s 128M /tmp/qp.img /tmp/stock.img
qpip-nbd serve /tmp/qp.img -n disk > /tmp/serve.log 2>&1 &
s=$!
mkdir -p /run /var/run
cat > /tmp/nbd.conf <<'CONF'
[generic]
    user = root
    group = root
    port = 10810
[disk]
    exportname = /tmp/stock.img
    flush = true
    fua = true
    trim = true
CONF
nbd-server -C /tmp/nbd.conf > /tmp/nbd-server.log 2>&1; kv nbd-server $?
i=0
until grep -q serving /tmp/serve.log || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
touch /lab/serving
await done
kill $s
killall nbd-server
kv serve.log.failed "$(grep -c 'the disk answered' /tmp/serve.log)"
sed 's/^/serve: /' /tmp/serve.log
sed 's/^/nbd-server: /' /tmp/nbd-server.log
"#;

/// Guest a: qpip-nbd connect to each server, the file system checks on each.
const QP_CLIENT: &str = r#"
lab-storage > /tmp/storage 2>&1; kv storage.status $?; sed 's/^/storage: /' /tmp/storage
await serving || exit 1
connect qp fd51:5050::1:2 -n disk
fs_checks qp
disconnect qp
# The stock server listens on b's kernel sockets: its NIC's address.
connect stock fd51:5050::2:2 -p 10810 -n disk
fs_checks stock
disconnect stock
touch /lab/done
"#;

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn qpip_nbd_connect_gives_a_block_device_over_qps_against_qpip_and_stock_servers() {
    needs_root!();
    let out = run_pair("qpip-nbdc", QP_CLIENT, SERVERS);
    let (a, b, ctx) = reports(&out);
    assert_eq!(b.get("nbd-server"), "0", "the stock server started\n{ctx}");
    for t in ["qp", "stock"] {
        assert!(
            a.get(&format!("{t}.dev")).starts_with("/dev/ublkb"),
            "{t}\n{ctx}"
        );
        assert_fs_checks(&a, &format!("{t}."), &ctx);
        assert_eq!(a.get(&format!("{t}.exit")), "0", "{t}: exit\n{ctx}");
        assert_eq!(
            a.get(&format!("{t}.gone")),
            "yes",
            "{t}: the device removed\n{ctx}"
        );
    }
    assert_served_all(&b, &ctx);
}

/// Guest b: serves, then kills its server (-9) when a says so, starts it again, hangs it
/// (SIGSTOP) and lets it go on (SIGCONT), each on a's word.
const FAILING_SERVER: &str = r#"
lab-storage > /dev/null 2>&1 || exit 1
truncate -s 64M /tmp/d.img
# Each server's log apart (n: the running one's); -k 4: a client that vanished is dropped
# after about 4 s of silence.
n=0
serve() { n=$((n + 1)); qpip-nbd serve /tmp/d.img -n disk -k 4 > /tmp/serve.$n.log 2>&1 & s=$!; }
serve
sleep 1; touch /lab/serving
await kill || exit 1
kill -9 $s; wait $s; touch /lab/killed
await restart || exit 1
serve; sleep 1; touch /lab/restarted
await hang || exit 1
kill -STOP $s; touch /lab/hung
await resume || exit 1
kill -CONT $s; touch /lab/resumed
# A server that negotiates (an export of 4 MiB), then answers with garbage.
await bogus || exit 1
magic='\000\003\350\211\004\125\145\251'
{ printf 'NBDMAGICIHAVEOPT\000\003'
  printf "$magic"'\000\000\000\007\000\000\000\003\000\000\000\014'
  printf '\000\000\000\000\000\000\000\100\000\000\000\001'
  printf "$magic"'\000\000\000\007\000\000\000\001\000\000\000\000'
  printf 'this is no reply to anything' ; } > /tmp/bogus.bin
# (Kept open: the client must find the garbage, not just the end of the stream.)
{ cat /tmp/bogus.bin; sleep 60; } | nc -l -p 10811 > /dev/null 2>&1 &
sleep 1; touch /lab/bogus-ready
await done
# Every connection the running server took has ended, the one whose client went during the
# cut link too (keepalive found it): none is kept for ever.
open() { echo $(( $(grep -c ' connected$' /tmp/serve.$n.log) - $(grep -c 'client \[[^]]*\]:[0-9]*: ' /tmp/serve.$n.log) )); }
i=0
until [ "$(open)" -eq 0 ] || [ $i -ge 60 ]; do i=$((i + 1)); sleep 1; done
kv serve.open "$(open)"
kill $s
for f in /tmp/serve.*.log; do sed "s|^|$f: |" $f; done
"#;

/// Guest a: data written and flushed, the server killed: I/O errors within the timeout
/// (5 s), the data back once the server is; a hung server and a cut link likewise; then
/// the device removed and made again; last, a server that breaks the protocol.
const FAILING_CLIENT: &str = r#"
lab-storage > /dev/null 2>&1 || exit 1
await serving || exit 1
connect f fd51:5050::1:2 -n disk -t 5
# timed_read TAG SKIP: one 4 KiB read of the disk at block SKIP: its exit status as
# TAG.read, the seconds it took as TAG.secs, its error messages in /tmp/TAG.err.
timed_read() {
  t0=$(date +%s)
  dd if="$dev" of=/dev/null bs=4k count=1 skip=$2 iflag=direct 2> /tmp/$1.err; kv $1.read $?
  kv $1.secs $(( $(date +%s) - t0 ))
}
# read_back KEY TRIES: reads /tmp/pat's 4 MiB back from the disk, trying again once a
# second while the read fails, TRIES times at most; KEY: same or different.
read_back() {
  i=0
  until dd if="$dev" of=/tmp/back bs=1M count=4 iflag=direct 2> /dev/null || [ $i -ge $2 ]; do i=$((i + 1)); sleep 1; done
  kv $1 "$(cmp -s /tmp/pat /tmp/back && echo same || echo different)"
}
head -c 4194304 /dev/urandom > /tmp/pat
# Written and flushed (conv=fsync: the block layer's FLUSH, NBD_CMD_FLUSH).
dd if=/tmp/pat of="$dev" bs=1M oflag=direct conv=fsync 2> /dev/null; kv write $?
touch /lab/kill; await killed
# Reads now fail, within the timeout and the time to notice.
timed_read dead 3000
sed 's/^/dead read: /' /tmp/dead.err
touch /lab/restart; await restarted
# The client connects again by itself: what was flushed is there.
read_back back 30
touch /lab/hang; await hung
timed_read hung 2000
touch /lab/resume; await resumed
read_back resumed.back 30
# The link cut (the lab host drops every frame the bridge forwards): the read fails in
# bounded time; healed, the client is back by itself.
touch /lab/cut; await_unless_host_done cut-done
timed_read cut 1000
touch /lab/heal; await_unless_host_done healed
read_back healed.back 60
disconnect f
# Made again: a new device with the same data.
connect g fd51:5050::1:2 -n disk
dd if="$dev" of=/tmp/back bs=1M count=4 iflag=direct 2> /dev/null; kv again.read $?
kv again.back "$(cmp -s /tmp/pat /tmp/back && echo same || echo different)"
disconnect g
# A server that breaks the protocol after the handshake: the client drops it, requests
# fail once the timeout passes, nothing crashes and the device goes away as asked.
touch /lab/bogus; await bogus-ready
connect h fd51:5050::2:2 -p 10811 -t 3
timed_read bogus 0
kv bogus.noticed "$(grep -c 'malformed reply' /tmp/h.log)"
disconnect h
touch /lab/done
"#;

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn a_failed_server_or_link_gives_io_errors_in_bounded_time_and_flushed_data_survives() {
    needs_root!();
    // A qpipd per guest with its own TAP, so that the guests' frames cross the bridge,
    // where the lab host cuts the link (one adapter would switch them in memory).
    let out = run_lab(
        "qpip-nbdf",
        FAILING_CLIENT,
        FAILING_SERVER,
        QpipdLayout::PerGuest,
        |host| -> Result<(), String> {
            host.wait_for("cut", Duration::from_secs(900))?;
            host.sh("nft add table bridge nbdcut && \
                 nft add chain bridge nbdcut cut '{ type filter hook forward priority 0; }' && \
                 nft add rule bridge nbdcut cut counter drop")?;
            host.signal("cut-done").map_err(|e| e.to_string())?;
            host.wait_for("heal", Duration::from_secs(300))?;
            host.sh("nft delete table bridge nbdcut")?;
            host.signal("healed").map_err(|e| e.to_string())
        },
    );
    let (a, b, ctx) = reports(&out);
    assert_eq!(a.get("write"), "0", "{ctx}");
    // The timeout is 5 s: reconnecting fails meanwhile, then the request fails. A
    // generous bound for a loaded host: what matters is that it ends.
    if let Err(e) = &out.host {
        panic!("lab host: {e}\n{ctx}");
    }
    for t in ["dead", "hung", "cut"] {
        assert_ne!(
            a.get(&format!("{t}.read")),
            "0",
            "{t}: the read must fail\n{ctx}"
        );
        let secs = a.num(&format!("{t}.secs"));
        assert!(secs <= 60, "{t}: the read took {secs} s\n{ctx}");
    }
    assert_eq!(
        a.get("back"),
        "same",
        "flushed data after the restart\n{ctx}"
    );
    assert_eq!(
        a.get("resumed.back"),
        "same",
        "after the hung server resumed\n{ctx}"
    );
    assert_eq!(a.get("f.exit"), "0", "{ctx}");
    assert_eq!(a.get("f.gone"), "yes", "{ctx}");
    assert_eq!(a.get("again.read"), "0", "{ctx}");
    assert_eq!(a.get("again.back"), "same", "{ctx}");
    assert!(a.get("h.dev").starts_with("/dev/ublkb"), "{ctx}");
    assert_ne!(
        a.get("bogus.read"),
        "0",
        "a read from a broken server\n{ctx}"
    );
    assert!(a.num("bogus.secs") <= 60, "{ctx}");
    assert!(a.num("bogus.noticed") >= 1, "the client said why\n{ctx}");
    assert_eq!((a.get("h.exit"), a.get("h.gone")), ("0", "yes"), "{ctx}");
    assert_eq!(
        b.get("serve.open"),
        "0",
        "the server keeps no connection of a client that went\n{ctx}"
    );
}
