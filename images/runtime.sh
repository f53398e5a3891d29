#!/usr/bin/env bash
# Builds the host runtime into $QPIP_CACHE/runtime: a Debian trixie root filesystem holding
#  - QEMU (>= 10.1, from trixie-backports) with the vfio-user-pci client,
#  - the guest kernel (trixie linux-image-amd64) with its headers, gcc and make, so the guest
#    driver is built with the exact compiler and headers of the kernel it runs on, and sparse,
#    which checks it against those headers (images/driver.sh runs make C=1),
#  - busybox-static for the guest initramfs.
# QEMU runs from this tree without chroot, through the tree's own dynamic loader (see
# images/qemu-env.sh). Needs root (debootstrap, chroot). Idempotent: a stamp records the hash
# of this script; when the script changes, the runtime is rebuilt.
# `runtime.sh --check` builds nothing: exit status 0 when the runtime is up to date, 1 if not.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIRROR=${QPIP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Hash by repo-relative name, so the stamp does not depend on how the script was invoked.
KEY=$(cd "$QPIP_ROOT" && inputs_hash images/runtime.sh "$MIRROR")
STAMP=$RUNTIME_DIR/.qpip-runtime-$KEY

if [ "${1:-}" = --check ]; then
    [ -f "$STAMP" ]
    exit
fi
if [ -f "$STAMP" ]; then
    say "runtime: up to date ($RUNTIME_DIR)"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "building the runtime needs root (debootstrap and chroot); run ./qpip setup as root"
command -v debootstrap >/dev/null || die "debootstrap is missing; ./qpip setup installs it"

# Undo mounts even when a step fails or the user interrupts.
mounted=()
cleanup() {
    local m
    for ((i=${#mounted[@]}-1; i>=0; i--)); do
        m=${mounted[$i]}
        mountpoint -q "$m" && umount -l "$m" || true
    done
}
trap cleanup EXIT
# Stopped by a signal (Ctrl-C, or ./qpip setup ending its background build): exit through
# the EXIT trap, so the bind mounts of the half-built tree are undone.
trap 'exit 130' INT TERM

NEW=$RUNTIME_DIR.new
if [ -d "$NEW" ]; then
    for m in proc dev/pts dev; do mountpoint -q "$NEW/$m" && umount -l "$NEW/$m"; done
    rm -rf "$NEW"
fi
mkdir -p "$QPIP_CACHE"

# debootstrap prints several lines per package; show a count every 20 packages instead,
# and every warning or error in full.
debootstrap_progress() {
    debootstrap --variant=minbase trixie "$NEW" "$MIRROR" 2>&1 | awk '
        /^I: Retrieving [^ ]+ [^ ]/ { if (++got % 20 == 0) printf "  downloaded %d packages\n", got; fflush(); next }
        /^I: (Validating|Extracting|Unpacking|Configuring|Installing core|Unpacking the base|Configuring the base|Checking|Retrieving|Resolving|Found|Chosen)/ { next }
        { print "  " $0; fflush() }
        END { printf "  downloaded %d packages in all\n", got }'
}
step "runtime 1/4: debootstrap trixie (minbase) into $NEW" debootstrap_progress

cat > "$NEW/etc/apt/sources.list.d/backports.list" <<SRC
deb $MIRROR trixie-backports main
SRC
# This tree is a build cache, rebuilt from scratch when anything goes wrong (the stamp is
# written last): dpkg need not fsync each of the ~40 000 files it unpacks (the kernel headers
# alone took about a minute with it).
echo force-unsafe-io >"$NEW/etc/dpkg/dpkg.cfg.d/qpip-unsafe-io"
# The guest boots qpip's own initramfs (images/guest.sh), never the distribution's, so the
# kernel package's initramfs generation (half a minute of compression) is diverted to a no-op.
chroot "$NEW" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs
ln -sf /bin/true "$NEW/usr/sbin/update-initramfs"
mount -t proc proc "$NEW/proc"; mounted+=("$NEW/proc")
mount --bind /dev "$NEW/dev";   mounted+=("$NEW/dev")

in_root() { chroot "$NEW" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
step "runtime 2/4: apt-get update (trixie + trixie-backports)" in_root apt-get update -q
step "runtime 3/4: install QEMU from trixie-backports" \
    in_root apt-get install -y -q --no-install-recommends -t trixie-backports qemu-system-x86
# perl (with its modules, not just perl-base): W=1 module builds run scripts/kernel-doc,
# which needs Pod::Usage.
# libdw1t64 must come from backports too: QEMU's backport pulled a newer one, and the
# headers' tool dependencies would otherwise ask for an incompatible older version.
# sparse: the driver's static check (address spaces, endianness, locking annotations).
step "runtime 4/4: install guest kernel, headers, compiler, busybox" \
    in_root apt-get install -y -q --no-install-recommends \
        linux-image-amd64 linux-headers-amd64 gcc make libc6-dev perl busybox-static sparse \
        libdw1t64/trixie-backports
in_root apt-get clean
cleanup; mounted=()

# Checks: a QEMU that cannot attach the device is useless, say precisely why.
QEMU=$NEW/usr/bin/qemu-system-x86_64
[ -x "$QEMU" ] || die "runtime: $QEMU is missing after install"
ver=$(QPIP_RUNTIME_DIR=$NEW "$(dirname "${BASH_SOURCE[0]}")/qemu-env.sh" --version | head -1)
say "runtime: $ver"
major=$(printf '%s\n' "$ver" | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1/p')
minor=$(printf '%s\n' "$ver" | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\2/p')
if [ -z "$major" ] || [ "$major" -lt 10 ] || { [ "$major" -eq 10 ] && [ "$minor" -lt 1 ]; }; then
    die "runtime: QEMU is '$ver'; qpip needs >= 10.1 (vfio-user client). Is trixie-backports reachable at $MIRROR?"
fi
if ! QPIP_RUNTIME_DIR=$NEW "$(dirname "${BASH_SOURCE[0]}")/qemu-env.sh" -device help 2>/dev/null | grep -q '"vfio-user-pci"'; then
    die "runtime: this QEMU ($ver) has no vfio-user-pci device; qpip cannot attach to it"
fi
ls "$NEW"/boot/vmlinuz-* >/dev/null 2>&1 || die "runtime: no guest kernel in $NEW/boot"
ls -d "$NEW"/usr/src/linux-headers-*-amd64 >/dev/null 2>&1 || die "runtime: no kernel headers in $NEW/usr/src"
[ -x "$NEW/usr/bin/busybox" ] || die "runtime: busybox-static is missing"

if [ -d "$RUNTIME_DIR" ]; then rm -rf "$RUNTIME_DIR"; fi
mv "$NEW" "$RUNTIME_DIR"
touch "$RUNTIME_DIR/.qpip-runtime-$KEY"
say "runtime: ready in $RUNTIME_DIR ($(du -sh "$RUNTIME_DIR" | cut -f1))"
