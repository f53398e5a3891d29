#!/usr/bin/env bash
# Builds the guest's preload library, libqpip-preload.so (preload/, docs/sockets.md), into
# $QPIP_CACHE/guest/libqpip-preload.so, and beside it qpip-sockcheck (preload/test/
# sockcheck.c: the socket calls checked against Linux's answers); images/guest.sh puts them
# in the image at /usr/lib/qpip/libqpip-preload.so and /usr/bin/qpip-sockcheck, with
# preload/qpip-run.
#
# The build runs inside the runtime (chroot) with its gcc and glibc, which are the guest's
# (Debian trixie): the library is loaded into the guest's programs, so it must be linked
# against their glibc, not this host's. preload/Makefile holds the flags (-O2 -fPIC
# -fvisibility=hidden, -Wall -Wextra -Werror); the result may need nothing but libc.
#
# Idempotent: a stamp records the hash of the sources, the driver's interface header, this
# script and the runtime's gcc and libc6 versions; when nothing changed the build is
# skipped. Needs root (chroot).
# Environment: QPIP_PRELOAD_OUT overrides the library's output file (qpip-sockcheck goes to
# the same folder).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC=$QPIP_ROOT/preload
UAPI=guest-driver/include/uapi/qpip.h
# The device's ring formats, for the fast path's rings (fastpath.c).
ABI_H=guest-driver/qpip_abi.h
OUT_SO=${QPIP_PRELOAD_OUT:-$QPIP_CACHE/guest/libqpip-preload.so}
OUT_CHECK=$(dirname "$OUT_SO")/qpip-sockcheck
STAMP=$OUT_SO.stamp
BUILD_REL=build/qpip-preload        # inside the runtime
BUILD=$RUNTIME_DIR/$BUILD_REL
# What the library may export: the calls it interposes (intercept.c), nothing else.
EXPORTS="__recv_chk __recvfrom_chk accept accept4 bind close close_range closefrom connect dup dup2 dup3
fcntl fcntl64 getpeername getsockname getsockopt listen read readv recv recvfrom recvmmsg recvmsg send
sendfile sendfile64
sendmmsg sendmsg sendto
setsockopt shutdown socket socketpair write writev"

[ -x "$RUNTIME_DIR/usr/bin/gcc" ] && [ -x "$RUNTIME_DIR/usr/bin/make" ] \
    || die "no gcc or make in the runtime ($RUNTIME_DIR); run ./qpip setup (images/runtime.sh) first"

# The sources: the C files, headers and Makefile of preload/, and qpip-sockcheck's.
mapfile -t files < <(cd "$QPIP_ROOT" && { find preload -maxdepth 1 -type f \
    \( -name '*.c' -o -name '*.h' -o -name Makefile \); echo preload/test/sockcheck.c; } | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || die "no preload sources in $SRC"

KEY=$(cd "$QPIP_ROOT" && inputs_hash "${files[@]}" "$UAPI" "$ABI_H" images/preload.sh images/lib.sh \
    "gcc $(runtime_version gcc) libc6 $(runtime_version libc6)")
if [ -f "$OUT_SO" ] && [ -f "$OUT_CHECK" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ]; then
    say "preload: up to date ($OUT_SO)"
    exit 0
fi

[ "$(id -u)" = 0 ] || die "building the preload library needs root (it runs make in the runtime with chroot); run ./qpip setup as root"

# A clean copy each time, laid out as in the repository (the Makefile finds the driver's
# header at ../guest-driver/include).
rm -rf "$BUILD"
mkdir -p "$BUILD"
(cd "$QPIP_ROOT" && cp --parents -- "${files[@]}" "$UAPI" "$ABI_H" "$BUILD/")

build() {
    # env -i: nothing from the caller's environment (CC, CFLAGS, MAKEFLAGS...) leaks in.
    chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=/root \
        make -C "/$BUILD_REL/preload" OUT=out CFLAGS=-O2
}
step "preload: build libqpip-preload.so (the guest's gcc and glibc)" build
SO=$BUILD/preload/out/libqpip-preload.so
CHECK=$BUILD/preload/out/qpip-sockcheck
[ -f "$SO" ] && [ -f "$CHECK" ] || die "preload: make succeeded but $SO or $CHECK is missing"

# The guest image carries the libraries of its other dynamic programs only: this one must
# need nothing but libc (and glibc 2.34+ has dlsym there).
needed=$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
[ "$needed" = "libc.so.6 " ] || die "preload: libqpip-preload.so needs '$needed'; expected only libc.so.6"
exported=$(nm -D --defined-only "$SO" | awk '{print $3}' | LC_ALL=C sort | tr '\n' ' ')
want=$(printf '%s\n' $EXPORTS | LC_ALL=C sort | tr '\n' ' ')
[ "$exported" = "$want" ] || die "preload: libqpip-preload.so exports '$exported'; expected '$want' (update EXPORTS in images/preload.sh with intercept.c)"

mkdir -p "$(dirname "$OUT_SO")"
strip --strip-unneeded -o "$OUT_SO.tmp" "$SO"
mv "$OUT_SO.tmp" "$OUT_SO"
strip -o "$OUT_CHECK.tmp" "$CHECK"
mv "$OUT_CHECK.tmp" "$OUT_CHECK"
printf '%s\n' "$KEY" >"$STAMP"
say "preload: $OUT_SO ($(stat -c %s "$OUT_SO") bytes)"
