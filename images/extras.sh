#!/usr/bin/env bash
# Builds the guest extras: $QPIP_CACHE/guest/extras/, a folder the lab gives every guest
# as a read-only 9p share (mount tag "extras") and that nothing mounts at boot. Programs a
# few tests need live here rather than in the initramfs, which every boot unpacks: a guest
# script mounts the share and loads them on demand (images/guest/lab-storage).
#   bin/PROGRAM        a wrapper: the runtime's dynamic loader runs libexec/PROGRAM with
#                      lib/ as its library path (the initramfs has the loader and libc)
#   libexec/PROGRAM    the program from the runtime (trixie, images/packages.sh)
#   lib/               every shared library the programs need
#   modules/           kernel modules of the guest kernel, decompressed, and
#   modules/storage-load-order  the order to load the storage ones in
#   MANIFEST           the Debian packages and versions the programs come from
# Storage (the network block device tests):
#   nbd-client, nbd-server   the stock NBD client and server (nbd-client, nbd-server)
#   mke2fs, e2fsck           the ext2 file system on the network disk (e2fsprogs)
#   nbd, ublk_drv, ext4      the kernel's NBD client, its userspace block devices (ublk),
#                            and ext2 (ext4's driver serves it), with their dependencies
# The netdev (the guest kernel's own traffic through the adapter):
#   iperf3, ethtool          throughput against the lab host's iperf3; the driver's
#                            ethtool -i/-S/-k
# Rebuilds only when an input changed (a stamp holds the hash of all of them).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$QPIP_CACHE/guest/extras
# Programs: path in the runtime, and the package it comes from.
PROGRAMS=(usr/sbin/nbd-client:nbd-client usr/bin/nbd-server:nbd-server
          usr/sbin/mke2fs:e2fsprogs usr/sbin/e2fsck:e2fsprogs
          usr/bin/iperf3:iperf3 usr/sbin/ethtool:ethtool)
# Storage modules by name (crc32c: ext4's checksums ask the crypto API for one; it is a
# soft dependency, not in modules.dep).
STORAGE_MODULES=(crc32c_generic ext4 nbd ublk_drv)

kernel=$(ls "$RUNTIME_DIR"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || die "no guest kernel in $RUNTIME_DIR/boot; run images/runtime.sh first"
KVER=${kernel##*/vmlinuz-}
MODDIR=$RUNTIME_DIR/lib/modules/$KVER
[ -f "$MODDIR/modules.dep" ] || die "no $MODDIR/modules.dep for kernel $KVER"
extras_collect images/packages.sh "${PROGRAMS[@]}"
modules_index "$MODDIR"
for m in "${STORAGE_MODULES[@]}"; do modules_add "$m"; done
storage_order=("${MODULE_ORDER[@]}")

KEY=$(extras_key images/extras.sh "$KVER" "${storage_order[@]/#/$MODDIR/}")
if [ -f "$OUT/.stamp-$KEY" ]; then
    say "guest extras: up to date ($OUT)"
    exit 0
fi

extras_stage "$QPIP_CACHE/guest/.extras.XXXXXX" /extras "${PROGRAMS[@]}"
ln -s mke2fs "$STAGE/bin/mkfs.ext2"
mkdir -p "$STAGE/modules"
: >"$STAGE/modules/storage-load-order"
for f in "${storage_order[@]}"; do
    n=${f##*/}
    n=${n%.ko*}.ko
    unpack_module "$MODDIR/$f" "$STAGE/modules/$n"
    printf '/extras/modules/%s\n' "$n" >>"$STAGE/modules/storage-load-order"
done
touch "$STAGE/.stamp-$KEY"
rm -rf "$OUT.old"
[ ! -d "$OUT" ] || mv "$OUT" "$OUT.old"
mv "$STAGE" "$OUT"
rm -rf "$OUT.old"
names=()
for f in "${storage_order[@]}"; do modname "$f"; names+=("$REPLY"); done
say "guest extras: $OUT ($(du -sk "$OUT" | cut -f1) KiB): ${PROGRAMS[*]%%:*}; modules ${names[*]}"
