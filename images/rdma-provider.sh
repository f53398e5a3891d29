#!/usr/bin/env bash
# rdma-core's verbs provider for qpip's iWARP ib_device (qpip_ib.ko): builds
# $QPIP_CACHE/guest/libqpip-rdmav34.so from rdma-provider/ (with rdma-provider/qpip.driver,
# the /etc/libibverbs.d entry that names it, images/guest.sh puts both in the image).
#
# A provider uses libibverbs' private interface (infiniband/driver.h, symbols of version
# IBVERBS_PRIVATE_34), which Debian does not install; so it is compiled against the
# headers of the very rdma-core release the runtime's libibverbs1 comes from, 56.1: Debian's
# orig tarball, downloaded once into $QPIP_CACHE/downloads and checked by its SHA-256. No
# cmake: the headers a provider includes are laid out as rdma-core's build does
# (include/infiniband, util, ccan, rdma, kernel-abi, config.h), the kernel-abi wrappers made
# by rdma-core's own buildlib/make_abi_structs.py (with the host's python3). The compiler
# and libibverbs.so.1 it links against are the runtime's (trixie), as in the guest.
# Refuses, saying so, a runtime whose libibverbs is not 56.x or lacks IBVERBS_PRIVATE_34.
# A stamp keyed on this script, the provider's sources, the uverbs ABI header
# (guest-driver/include/uapi/qpip_ib.h) and the libibverbs version makes a second run a
# no-op. Needs root (gcc in the chroot) when anything is to be done.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=$QPIP_CACHE/guest
SO=$OUT/libqpip-rdmav34.so
STAMP=$OUT/.rdma-provider-stamp
SRC=$QPIP_ROOT/rdma-provider
UAPI=$QPIP_ROOT/guest-driver/include/uapi/qpip_ib.h
RC_VER=56.1
RC_TARBALL=rdma-core_$RC_VER.orig.tar.gz
RC_URL=http://deb.debian.org/debian/pool/main/r/rdma-core/$RC_TARBALL
RC_SHA256=63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8
DOWNLOADS=$QPIP_CACHE/downloads
BUILD_REL=build/qpip-provider       # inside the runtime
BUILD=$RUNTIME_DIR/$BUILD_REL
LIBIBVERBS=usr/lib/x86_64-linux-gnu/libibverbs.so.1
LIBRDMACM=usr/lib/x86_64-linux-gnu/librdmacm.so.1
PABI=34

[ -d "$RUNTIME_DIR/usr/src" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"

# --- the libibverbs the provider is for ------------------------------------------------------
IBV_VER=$(runtime_version libibverbs1)
[ -n "$IBV_VER" ] && [ -e "$RUNTIME_DIR/$LIBIBVERBS" ] \
    || die "rdma provider: libibverbs1 is not installed in the runtime; run images/packages.sh first"
case $IBV_VER in
    "${RC_VER%%.*}".*) ;;
    *) die "rdma provider: the runtime's libibverbs1 is $IBV_VER; this provider is built against rdma-core $RC_VER's private interface (IBVERBS_PRIVATE_$PABI) and needs libibverbs ${RC_VER%%.*}.x" ;;
esac
readelf -V "$RUNTIME_DIR/$LIBIBVERBS" | grep -q "IBVERBS_PRIVATE_$PABI\$" \
    || die "rdma provider: the runtime's libibverbs $IBV_VER does not define IBVERBS_PRIVATE_$PABI (its providers' ABI changed); update RC_VER and the provider"

CHECK=$OUT/qpip-verbs-check
CM_CHECK=$OUT/qpip-cm-check
KEY=$(cd "$QPIP_ROOT" && inputs_hash images/rdma-provider.sh images/lib.sh rdma-provider/qpip.c \
      rdma-provider/test/qpip-verbs-check.c rdma-provider/test/qpip-cm-check.c \
      rdma-provider/test/say.h \
      rdma-provider/qpip.driver guest-driver/include/uapi/qpip_ib.h guest-driver/qpip_abi.h "$IBV_VER" "$RC_SHA256")
if [ -f "$SO" ] && [ -f "$CHECK" ] && [ -f "$CM_CHECK" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ]; then
    say "rdma provider: up to date ($SO, libibverbs $IBV_VER)"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "rdma provider: building needs root (gcc in the runtime with chroot); run ./qpip setup as root"
command -v python3 >/dev/null || die "rdma provider: python3 is missing on this host (./qpip setup installs it)"

# --- rdma-core's sources ---------------------------------------------------------------------
fetch() {
    local tmp=$DOWNLOADS/.$RC_TARBALL.part
    mkdir -p "$DOWNLOADS"
    if command -v curl >/dev/null; then
        curl -fsSL -o "$tmp" "$RC_URL" || return 1
    else
        wget -q -O "$tmp" "$RC_URL" || return 1
    fi
    mv "$tmp" "$DOWNLOADS/$RC_TARBALL"
}
sha_ok() { [ "$(sha256sum "$DOWNLOADS/$RC_TARBALL" | cut -d' ' -f1)" = "$RC_SHA256" ]; }
if [ ! -f "$DOWNLOADS/$RC_TARBALL" ] || ! sha_ok; then
    step "rdma provider: download $RC_URL" fetch
    sha_ok || die "rdma provider: $DOWNLOADS/$RC_TARBALL does not have the SHA-256 $RC_SHA256"
fi

rm -rf "$BUILD"
mkdir -p "$BUILD/src" "$BUILD/include"
rc=rdma-core-$RC_VER
tar -xzf "$DOWNLOADS/$RC_TARBALL" -C "$BUILD/src" --wildcards \
    "$rc/libibverbs/*.h" "$rc/util/*.h" "$rc/ccan/*.h" "$rc/kernel-headers/rdma/*.h" \
    "$rc/kernel-headers/linux/*.h" "$rc/buildlib/make_abi_structs.py" \
    "$rc/librdmacm/rdma_cma.h" \
    || die "rdma provider: $RC_TARBALL lacks the headers a provider needs"
RC=$BUILD/src/$rc

# --- the include tree rdma-core's build would make -------------------------------------------
I=$BUILD/include
mkdir -p "$I/infiniband" "$I/util" "$I/ccan" "$I/rdma" "$I/linux" "$I/kernel-abi"
cp "$RC"/libibverbs/*.h "$I/infiniband/"
cp "$RC"/util/*.h "$I/util/"
cp "$RC"/ccan/*.h "$I/ccan/"
cp "$RC"/kernel-headers/rdma/*.h "$I/rdma/"
cp "$RC"/librdmacm/rdma_cma.h "$I/rdma/"      # for qpip-cm-check
cp "$RC"/kernel-headers/rdma/ib_user_ioctl_verbs.h "$I/infiniband/"   # published there too
cp "$RC"/kernel-headers/linux/*.h "$I/linux/"
cp "$UAPI" "$I/qpip_ib.h"
# The wrappers DECLARE_DRV_CMD uses (_STRUCT_<name> for each structure).
for h in "$I/rdma/ib_user_verbs.h" "$I/qpip_ib.h"; do
    python3 "$RC/buildlib/make_abi_structs.py" "$h" "$I/kernel-abi/${h##*/}" \
        || die "rdma provider: make_abi_structs.py failed on ${h##*/}"
done
# What of buildlib/config.h.in a provider's headers read, as rdma-core's cmake sets it on
# x86-64 Linux with gcc.
cat >"$I/config.h" <<CONFIG
#ifndef CONFIG_H_IN
#define CONFIG_H_IN
#define HAVE_STATEMENT_EXPR 1
#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1
#define HAVE_TYPEOF 1
#define HAVE_ISBLANK 1
#define HAVE_BUILTIN_CLZ 1
#define HAVE_BUILTIN_CLZL 1
#define PACKAGE_VERSION "$RC_VER"
#define STREAM_CLOEXEC "e"
#define RDMA_CDEV_DIR "/dev/infiniband"
#define IBV_CONFIG_DIR "/etc/libibverbs.d"
#define VERBS_PROVIDER_DIR "/usr/lib/x86_64-linux-gnu/libibverbs"
#define VERBS_PROVIDER_SUFFIX "-rdmav$PABI.so"
#define IBVERBS_PABI_VERSION $PABI
#define HAVE_FUNC_ATTRIBUTE_ALWAYS_INLINE 1
#define HAVE_FUNC_ATTRIBUTE_IFUNC 1
#define HAVE_FUNC_ATTRIBUTE_SYMVER 1
#define HAVE_WORKING_IF_H 1
#define HAVE_FULL_SYMBOL_VERSIONS 1
#define SIZEOF_LONG 8
#define VERBS_IOCTL_ONLY 0
#define VERBS_WRITE_ONLY 0
#endif
CONFIG
cp "$SRC/qpip.c" "$BUILD/"
cp "$QPIP_ROOT/guest-driver/qpip_abi.h" "$BUILD/"   # the device interface: CQEs, doorbell page

# --- compile in the runtime --------------------------------------------------------------------
# rdma-core's own headers have unused parameters and partial initialisers; its build turns
# those two warnings off, and so does this one.
build() {
    chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C \
        gcc -std=gnu11 -O2 -g0 -Wall -Wextra -Werror -Wno-unused-parameter \
        -Wno-missing-field-initializers -fPIC -shared -Wl,-z,defs -Wl,--as-needed \
        -I "/$BUILD_REL/include" -o "/$BUILD_REL/libqpip-rdmav$PABI.so" "/$BUILD_REL/qpip.c" \
        "/$LIBIBVERBS" -s
}
step "rdma provider: build libqpip-rdmav$PABI.so against rdma-core $RC_VER (libibverbs $IBV_VER)" build
built=$BUILD/libqpip-rdmav$PABI.so
readelf -V "$built" | grep -q "IBVERBS_PRIVATE_$PABI" \
    || die "rdma provider: $built does not bind libibverbs' IBVERBS_PRIVATE_$PABI"

# The VM tests' verbs program (rdma-provider/test/): plain libibverbs, against the same
# headers and library.
cp "$SRC/test/qpip-verbs-check.c" "$SRC/test/say.h" "$BUILD/"
build_check() {
    chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C \
        gcc -std=gnu11 -O2 -g0 -Wall -Wextra -Werror -Wno-unused-parameter \
        -Wno-missing-field-initializers -I "/$BUILD_REL/include" \
        -o "/$BUILD_REL/qpip-verbs-check" "/$BUILD_REL/qpip-verbs-check.c" "/$LIBIBVERBS" -s
}
step "rdma provider: build qpip-verbs-check (the VM tests' verbs program)" build_check
# And their connection manager program: plain librdmacm.
[ -e "$RUNTIME_DIR/$LIBRDMACM" ] \
    || die "rdma provider: librdmacm1 is not installed in the runtime; run images/packages.sh first"
cp "$SRC/test/qpip-cm-check.c" "$SRC/test/say.h" "$BUILD/"
build_cm_check() {
    chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C \
        gcc -std=gnu11 -O2 -g0 -Wall -Wextra -Werror -Wno-unused-parameter \
        -Wno-missing-field-initializers -I "/$BUILD_REL/include" \
        -o "/$BUILD_REL/qpip-cm-check" "/$BUILD_REL/qpip-cm-check.c" "/$LIBRDMACM" \
        "/$LIBIBVERBS" -s
}
step "rdma provider: build qpip-cm-check (the VM tests' connection manager program)" build_cm_check

mkdir -p "$OUT"
cp "$built" "$SO.tmp"
mv "$SO.tmp" "$SO"
cp "$BUILD/qpip-verbs-check" "$CHECK.tmp"
mv "$CHECK.tmp" "$CHECK"
cp "$BUILD/qpip-cm-check" "$CM_CHECK.tmp"
mv "$CM_CHECK.tmp" "$CM_CHECK"
printf '%s\n' "$KEY" >"$STAMP"
say "rdma provider: $SO ($(stat -c %s "$SO") bytes, for libibverbs $IBV_VER)"
