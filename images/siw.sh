#!/usr/bin/env bash
# Soft-iWARP for the guest: Linux's siw driver and rdma-core's userspace, the iWARP peer
# qpip is checked against.
#
# 1. Installs into the runtime (chroot) what the guest image takes its RDMA software from:
#      linux-source-6.12   siw's sources (Debian's kernel does not build siw:
#                          "# CONFIG_RDMA_SIW is not set"), preferably of the exact version
#                          of the guest kernel
#      libibverbs1 librdmacm1t64 ibverbs-providers ibverbs-utils rdmacm-utils
#                          verbs and RDMA CM libraries, siw's verbs provider, ibv_devices,
#                          ibv_devinfo, rping
#      iproute2            rdma (rdma link add siw0 type siw netdev eth0)
#      perftest            ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw: the bench's RDMA figures on siw
#    A stamp in the runtime records the package list: a rebuilt runtime (images/runtime.sh
#    replaces the whole tree) loses the stamp with the packages and gets them again.
# 2. Builds siw.ko into $QPIP_CACHE/guest/siw.ko out of tree, as images/driver.sh builds
#    qpip.ko: inside the runtime, with the runtime's gcc and the exact guest kernel's
#    headers (so vermagic and symbol versions match the kernel that loads it), from only
#    drivers/infiniband/sw/siw of the source tarball. Upstream code: its warnings are shown,
#    not fatal. A stamp keyed on this script, the headers and the source package's version
#    makes a second run a no-op.
# Needs root (apt and make in the chroot) when anything is to be done.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$QPIP_CACHE/guest
KO=$OUT/siw.ko
STAMP=$OUT/.siw-stamp
BUILD_REL=build/siw                  # inside the runtime
BUILD=$RUNTIME_DIR/$BUILD_REL
SRC_PKG=linux-source-6.12
PACKAGES=("$SRC_PKG" libibverbs1 librdmacm1t64 ibverbs-providers ibverbs-utils rdmacm-utils iproute2 perftest)

[ -d "$RUNTIME_DIR/usr/src" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
guest_kernel_headers

need_root() {
    [ "$(id -u)" = 0 ] || die "siw: $1 needs root (it runs apt or make in the runtime with chroot); run ./qpip setup as root"
}

# dpkg's version of an installed package in the runtime, or nothing. Read from dpkg's
# status file, so an up-to-date check needs neither root nor chroot.
runtime_version() {
    awk -v pkg="$1" '
        /^Package: / { p = ($2 == pkg); st = ""; v = "" }
        p && /^Status: / { st = $0 }
        p && /^Version: / { v = $2 }
        p && /^$/ { if (st == "Status: install ok installed") print v; p = 0 }
        END { if (p && st == "Status: install ok installed") print v }' \
        "$RUNTIME_DIR/var/lib/dpkg/status"
}

# --- 1. packages in the runtime ------------------------------------------------------------
PKG_KEY=$(inputs_hash "${PACKAGES[@]}")
PKG_STAMP=$RUNTIME_DIR/.qpip-siw-packages-$PKG_KEY

# Undo the chroot's mounts even when apt fails or the user interrupts.
mounted=()
unmount_all() {
    local i
    for ((i=${#mounted[@]}-1; i>=0; i--)); do
        mountpoint -q "${mounted[$i]}" && umount -l "${mounted[$i]}" || true
    done
    mounted=()
}
trap unmount_all EXIT
trap 'exit 130' INT TERM

in_root() { chroot "$RUNTIME_DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }

# (Run by step, after `||`: errexit is off here, so every command is checked.)
install_packages() {
    mount -t proc proc "$RUNTIME_DIR/proc" || return 1
    mounted+=("$RUNTIME_DIR/proc")
    mount --bind /dev "$RUNTIME_DIR/dev" || return 1
    mounted+=("$RUNTIME_DIR/dev")
    in_root apt-get update -q || return 1
    # siw's sources should be those of the kernel the guest boots: the kernel image's own
    # version when the mirror still has it, else the newest (a point release apart, the
    # module still builds against the headers; the build below says which it used).
    local kimg want src=$SRC_PKG
    kimg=$(runtime_version "linux-image-$KVER")
    want=${kimg:+$SRC_PKG=$kimg}
    if [ -n "$want" ] && in_root apt-cache show "$want" >/dev/null 2>&1; then
        src=$want
    else
        say "siw: the mirror has no $SRC_PKG ${kimg:-?} (the guest kernel's version); taking its newest"
    fi
    local pkgs=("$src" "${PACKAGES[@]:1}")
    in_root apt-get install -y -q --no-install-recommends "${pkgs[@]}" || return 1
    in_root apt-get clean
    unmount_all
}

if [ -f "$PKG_STAMP" ]; then
    say "siw: runtime packages up to date (${PACKAGES[*]})"
else
    need_root "installing ${PACKAGES[*]}"
    step "siw: install ${PACKAGES[*]} into the runtime" install_packages
    rm -f "$RUNTIME_DIR"/.qpip-siw-packages-*
    touch "$PKG_STAMP"
fi

# --- 2. siw.ko -----------------------------------------------------------------------------
SRC_VER=$(runtime_version "$SRC_PKG")
[ -n "$SRC_VER" ] || die "siw: $SRC_PKG is not installed in the runtime"
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
