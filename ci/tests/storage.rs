//! Network storage over queue pairs, with the NBD programs nobody here wrote: guest b
//! exports a file with `qpip-nbd serve` over its qpip device's TCP QPs, and guest a's
//! stock `nbd-client` (Debian's, with the kernel's `nbd` driver over the guest's own TCP
//! stack and virtio-net NIC) uses it as a disk: an ext2 file system is made on it, a file
//! written and flushed with `sync`, the file system unmounted, checked by `e2fsck`,
//! mounted again and the file read back, its SHA-256 compared. The server's log must
//! show no failed disk operation.
//!
//! The storage programs and modules come from the lab's extras share (`lab-storage`).
//! The test boots VMs: ignored by a plain `cargo test`, run by `./qpip test` (as root).

mod common;

use common::{needs_root, Report};
use qpip_lab::{guest_name, unique_netns, LabSpec, Network, QpipdLayout};
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

#[test]
#[ignore = "boots VMs: run by ./qpip test"]
fn the_stock_nbd_client_uses_qpip_nbd_serve_over_qps_as_an_ext2_disk() {
    needs_root!();
    let guest = |n: usize, body: &str| {
        common::lab_guest(
            guest_name(n),
            common::script("", body),
            Duration::from_secs(600),
        )
    };
    let spec = LabSpec {
        guests: vec![guest(1, CLIENT), guest(2, SERVER)],
        network: Network::Lab(unique_netns("qpip-nbd")),
        layout: QpipdLayout::Adapter,
    };
    let out = common::lab(&spec, |_| ());
    let (ga, gb) = (out.guest("a"), out.guest("b"));
    let (a, b) = (Report::new(ga), Report::new(gb));
    let ctx = || format!("=== a:\n{}\n=== b:\n{}", a.context(), b.context());
    assert_eq!((ga.status, gb.status), (0, 0), "{}", ctx());
    for (r, who) in [(&a, "a"), (&b, "b")] {
        assert_eq!(
            r.get("storage.status"),
            "0",
            "lab-storage on {who}\n{}",
            ctx()
        );
    }
    for step in [
        "connect", "mkfs", "mount", "write", "sync", "umount", "fsck", "remount",
    ] {
        assert_eq!(a.get(step), "0", "{step}\n{}", ctx());
    }
    assert_eq!(a.num("size"), 128 << 20, "the disk's size\n{}", ctx());
    assert_eq!(
        a.get("back.sha"),
        a.get("sha"),
        "the file read back\n{}",
        ctx()
    );
    assert_eq!(a.get("disconnect"), "0", "{}", ctx());
    assert_eq!(
        b.num("serve.log.failed"),
        0,
        "failed disk operations\n{}",
        ctx()
    );
}
