#!/usr/bin/env bash
# Builds the guest driver qpip.ko into $QPIP_CACHE/guest/qpip.ko, and beside it qpip_ib.ko,
# the function as an iWARP ib_device for the RDMA stack (loaded on demand by lab-qpip-ib).
#
# The build runs inside the runtime (chroot), with the runtime's gcc and the headers of the
# exact guest kernel, so the module's vermagic and compiler match the kernel that loads it.
# W=1 and -Werror: the driver must build without a single warning; any "warning:" line in
# the output (including ones that -Werror does not turn into errors, e.g. from modpost)
# fails the build too. C=1 runs sparse on every source file in the same build (address
# spaces such as __user and __iomem, locking and endianness annotations): its warnings are
# "warning:" lines too, so the driver must be sparse-clean as well.
#
# Idempotent: a stamp records the hash of the driver sources, this script and the headers
# directory name; when nothing changed the build is skipped. Needs root (chroot).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC=$QPIP_ROOT/guest-driver
OUT=$QPIP_CACHE/guest
KO=$OUT/qpip.ko
IB_KO=$OUT/qpip_ib.ko
STAMP=$OUT/.qpip-driver-stamp
BUILD_REL=build/qpip-driver          # inside the runtime
BUILD=$RUNTIME_DIR/$BUILD_REL

[ -d "$RUNTIME_DIR/usr/src" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
[ -x "$RUNTIME_DIR/usr/bin/sparse" ] || die "the runtime in $RUNTIME_DIR has no sparse; rebuild it with ./qpip setup (images/runtime.sh)"

guest_kernel_headers

# The driver's sources: everything under guest-driver/ except build products of an in-tree
# build (see .gitignore) and the user-space test program (test-program/, a Rust crate the
# guest image carries; the module does not depend on it). Sorted, relative paths, so the
# hash is stable across checkouts.
mapfile -t files < <(cd "$SRC" && find . -type f \
    ! -name '*.o' ! -name '*.ko' ! -name '*.mod' ! -name '*.mod.c' ! -name '.*.cmd' \
    ! -name 'Module.symvers' ! -name 'modules.order' ! -path './.tmp_versions/*' \
    ! -path './test-program/*' \
    | sed 's|^\./||' | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || die "no driver sources in $SRC"

KEY=$(cd "$QPIP_ROOT" && inputs_hash "${files[@]/#/guest-driver/}" images/driver.sh images/lib.sh "$HDRS_NAME")
if [ -f "$KO" ] && [ -f "$IB_KO" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ]; then
    say "driver: up to date ($KO, kernel $KVER)"
    exit 0
fi

[ "$(id -u)" = 0 ] || die "building the driver needs root (it runs make in the runtime with chroot); run ./qpip setup as root"

# A clean copy each time: no stale objects from an earlier build or another source tree.
rm -rf "$BUILD"
mkdir -p "$BUILD"
(cd "$SRC" && cp --parents -- "${files[@]}" "$BUILD/")

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

build() {
    runtime_kbuild "$BUILD_REL" W=1 C=1 KCFLAGS=-Werror 2>&1 | tee "$LOG"
}
step "driver: build qpip.ko for $KVER (W=1 and sparse, warnings are errors)" build
if grep -q 'warning:' "$LOG"; then
    die "driver: the build printed compiler or sparse warnings (see above); the driver must build warning-free"
fi
for m in qpip qpip_ib; do
    [ -f "$BUILD/$m.ko" ] || die "driver: make succeeded but $BUILD/$m.ko is missing"
    check_vermagic driver "$BUILD/$m.ko"
done

mkdir -p "$OUT"
cp "$BUILD/qpip.ko" "$KO.tmp"
mv "$KO.tmp" "$KO"
cp "$BUILD/qpip_ib.ko" "$IB_KO.tmp"
mv "$IB_KO.tmp" "$IB_KO"
printf '%s\n' "$KEY" > "$STAMP"
say "driver: $KO ($(stat -c %s "$KO") bytes), $IB_KO ($(stat -c %s "$IB_KO") bytes), vermagic $VERMAGIC"
