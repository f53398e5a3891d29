#!/usr/bin/env bash
# The Debian packages the guest image takes programs from, installed into the runtime
# (trixie) in one apt run; images/siw.sh, images/extras.sh and images/guest.sh pick what
# they need from there:
#   linux-source-6.12   siw's sources (images/siw.sh), preferably of the exact version of
#                       the guest kernel
#   libibverbs1 librdmacm1t64 ibverbs-providers ibverbs-utils rdmacm-utils
#                       verbs and RDMA CM libraries, siw's and rxe's verbs providers, ibv_devices,
#                       ibv_devinfo, rping, ucmatose, rdma_server, rdma_client (in the
#                       initramfs: images/guest.sh)
#   iproute2            rdma (rdma link add siw0 type siw netdev eth0)
#   perftest            ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw: the bench's RDMA
#                       figures on siw and on soft-RoCE (rxe)
#   qperf               qperf's RC latency and bandwidth tests over rdma_cm (-cm1), a second
#                       RDMA benchmark beside perftest
#   nbd-client nbd-server e2fsprogs
#                       the stock network block device client and server and mke2fs, the
#                       storage tests' peers and file system (the extras share:
#                       images/extras.sh)
#   iperf3 ethtool      the netdev tests: iperf3 against the lab host's, ethtool -i/-S/-k
#                       (the extras share)
# A stamp in the runtime records the package list: a rebuilt runtime (images/runtime.sh
# replaces the whole tree) loses the stamp with the packages and gets them again.
# Needs root (apt in the chroot) when anything is to be done.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC_PKG=linux-source-6.12
PACKAGES=("$SRC_PKG" libibverbs1 librdmacm1t64 ibverbs-providers ibverbs-utils rdmacm-utils
          iproute2 perftest qperf nbd-client nbd-server e2fsprogs iperf3 ethtool)

[ -d "$RUNTIME_DIR/usr/src" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
guest_kernel_headers

PKG_KEY=$(inputs_hash "${PACKAGES[@]}")
PKG_STAMP=$RUNTIME_DIR/.qpip-guest-packages-$PKG_KEY
if [ -f "$PKG_STAMP" ]; then
    say "guest packages: up to date in the runtime (${PACKAGES[*]})"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "guest packages: installing ${PACKAGES[*]} needs root (apt in the runtime with chroot); run ./qpip setup as root"

# (Run by step, after `||`: errexit is off here, so every command is checked.)
install_packages() {
    runtime_apt_begin || return 1
    in_root apt-get update -q || return 1
    # siw's sources should be those of the kernel the guest boots: the kernel image's own
    # version when the mirror still has it, else the newest (a point release apart, the
    # module still builds against the headers; images/siw.sh says which it used).
    local kimg want src=$SRC_PKG
    kimg=$(runtime_version "linux-image-$KVER")
    want=${kimg:+$SRC_PKG=$kimg}
    if [ -n "$want" ] && in_root apt-cache show "$want" >/dev/null 2>&1; then
        src=$want
    else
        say "guest packages: the mirror has no $SRC_PKG ${kimg:-?} (the guest kernel's version); taking its newest"
    fi
    local pkgs=("$src" "${PACKAGES[@]:1}")
    in_root apt-get install -y -q --no-install-recommends "${pkgs[@]}" || return 1
    in_root apt-get clean
    runtime_apt_end
}

step "guest packages: install ${PACKAGES[*]} into the runtime" install_packages
rm -f "$RUNTIME_DIR"/.qpip-siw-packages-* "$RUNTIME_DIR"/.qpip-guest-packages-*
touch "$PKG_STAMP"
