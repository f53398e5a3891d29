#!/usr/bin/env bash
# What only `./qpip bench` needs in the guests, on demand: fio (the storage part's random
# reads). Its Debian package pulls in ceph's and gluster's libraries (a large download),
# so it is not in images/packages.sh, which every `./qpip setup` and `./qpip demo` run.
# Installs fio into the runtime (trixie), then adds it to the guest extras (built by
# images/extras.sh first) as $QPIP_CACHE/guest/extras/bench/:
#   bin/fio            a wrapper: the runtime's dynamic loader runs libexec/fio with lib/
#                      as its library path
#   libexec/fio        fio from the runtime
#   lib/               every shared library fio needs
#   MANIFEST           the package and version
# images/guest/lab-storage puts bench/bin/* on the PATH when the folder is there.
# Stamps make a second run a no-op: one in the runtime for the package (a rebuilt runtime
# loses it with the package), one in the folder for its contents (images/extras.sh replaces
# the whole extras folder when it rebuilds it, and this folder with its stamp goes too).
# Needs root (apt in the chroot) when fio is to be installed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(fio)
PROGRAMS=(usr/bin/fio:fio)
EXTRAS=$QPIP_CACHE/guest/extras
OUT=$EXTRAS/bench

[ -d "$RUNTIME_DIR/usr" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
[ -d "$EXTRAS" ] || die "no guest extras in $EXTRAS; run images/extras.sh first"

PKG_KEY=$(inputs_hash "${PACKAGES[@]}")
PKG_STAMP=$RUNTIME_DIR/.qpip-bench-packages-$PKG_KEY
if [ ! -f "$PKG_STAMP" ]; then
    [ "$(id -u)" = 0 ] || die "bench extras: installing ${PACKAGES[*]} needs root (apt in the runtime with chroot)"
    # (Run by step, after `||`: errexit is off here, so every command is checked.)
    install_packages() {
        runtime_apt_begin || return 1
        in_root apt-get update -q || return 1
        in_root apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" || return 1
        in_root apt-get clean
        runtime_apt_end
    }
    step "bench extras: install ${PACKAGES[*]} into the runtime" install_packages
    rm -f "$RUNTIME_DIR"/.qpip-bench-packages-*
    touch "$PKG_STAMP"
fi

extras_collect images/bench-extras.sh "${PROGRAMS[@]}"

KEY=$(extras_key images/bench-extras.sh)
if [ -f "$OUT/.stamp-$KEY" ]; then
    say "bench extras: up to date ($OUT)"
    exit 0
fi

extras_stage "$EXTRAS/.bench.XXXXXX" /extras/bench "${PROGRAMS[@]}"
touch "$STAGE/.stamp-$KEY"
rm -rf "$OUT"
mv "$STAGE" "$OUT"
say "bench extras: $OUT ($(du -sk "$OUT" | cut -f1) KiB): ${PROGRAMS[*]%%:*}"
