#!/usr/bin/env bash
# Soft-iWARP for the guest: Linux's siw driver, the iWARP peer qpip is checked against.
# Debian's kernel does not build siw ("# CONFIG_RDMA_SIW is not set"), so this builds
# siw.ko into $QPIP_CACHE/guest/siw.ko out of tree, as images/driver.sh builds qpip.ko:
# inside the runtime, with the runtime's gcc and the exact guest kernel's headers (so
# vermagic and symbol versions match the kernel that loads it), from only
# drivers/infiniband/sw/siw of the linux-source-6.12 package images/packages.sh installs
# (preferably of the guest kernel's exact version). Upstream code: its warnings are shown,
# not fatal. A stamp keyed on this script, the headers and the source package's version
# makes a second run a no-op. rdma-core's userspace comes from images/packages.sh too.
# Needs root (make in the chroot) when anything is to be done.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$QPIP_CACHE/guest
KO=$OUT/siw.ko
STAMP=$OUT/.siw-stamp
BUILD_REL=build/siw                  # inside the runtime
BUILD=$RUNTIME_DIR/$BUILD_REL
SRC_PKG=linux-source-6.12

[ -d "$RUNTIME_DIR/usr/src" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
guest_kernel_headers

need_root() {
    [ "$(id -u)" = 0 ] || die "siw: $1 needs root (it runs make in the runtime with chroot); run ./qpip setup as root"
}

# --- siw.ko -----------------------------------------------------------------------------------
SRC_VER=$(runtime_version "$SRC_PKG")
[ -n "$SRC_VER" ] || die "siw: $SRC_PKG is not installed in the runtime; run images/packages.sh first"
TARBALL=$RUNTIME_DIR/usr/src/$SRC_PKG.tar.xz
[ -f "$TARBALL" ] || die "siw: $SRC_PKG installed no $TARBALL"
KEY=$(cd "$QPIP_ROOT" && inputs_hash images/siw.sh images/lib.sh "$HDRS_NAME" "$SRC_VER")
if [ -f "$KO" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ]; then
    say "siw: up to date ($KO, kernel $KVER, sources $SRC_PKG $SRC_VER)"
    exit 0
fi
need_root "building siw.ko"

rm -rf "$BUILD"
mkdir -p "$BUILD"
extract() {
    # Only siw's folder: the whole tree is about 1.5 GiB unpacked.
    tar -xJf "$TARBALL" -C "$BUILD" --strip-components=5 "$SRC_PKG/drivers/infiniband/sw/siw"
}
step "siw: extract drivers/infiniband/sw/siw from $SRC_PKG $SRC_VER" extract
[ -f "$BUILD/siw_main.c" ] && [ -f "$BUILD/Makefile" ] || die "siw: $TARBALL has no drivers/infiniband/sw/siw with siw_main.c and its Makefile"
# The in-tree Makefile builds siw.o only under CONFIG_RDMA_SIW; out of tree the module is
# asked for directly, with the object list of that Makefile.
# (The list may continue over lines ending in a backslash.)
objs=$(awk '/^siw-y[[:space:]]*:?=/ { on = 1; sub(/^[^=]*=/, "") }
            on { cont = sub(/\\[[:space:]]*$/, ""); printf "%s ", $0; if (!cont) on = 0 }' \
       "$BUILD/Makefile" | tr -s ' \t' ' ')
objs=$(echo $objs)   # one space between names, none around
[ -n "$objs" ] || die "siw: no 'siw-y :=' object list in $BUILD/Makefile"
printf 'obj-m := siw.o\nsiw-y := %s\n' "$objs" >"$BUILD/Kbuild"
rm -f "$BUILD/Makefile"

build() { runtime_kbuild "$BUILD_REL"; }
step "siw: build siw.ko for $KVER" build
[ -f "$BUILD/siw.ko" ] || die "siw: make succeeded but $BUILD/siw.ko is missing"
check_vermagic siw "$BUILD/siw.ko"
mkdir -p "$OUT"
# Debug info is most of the object's size; the guest loads it into RAM from the initramfs.
strip --strip-debug -o "$KO.tmp" "$BUILD/siw.ko"
mv "$KO.tmp" "$KO"
printf '%s\n' "$KEY" >"$STAMP"
say "siw: $KO ($(stat -c %s "$KO") bytes, vermagic $VERMAGIC, sources $SRC_PKG $SRC_VER)"
