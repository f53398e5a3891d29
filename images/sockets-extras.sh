#!/usr/bin/env bash
# What only the socket programs' tests (ci/tests/sockets.rs: unmodified programs over kernel
# sockets and under qpip-run) and ./qpip bench need in the guests, on demand: Debian's
# socket programs. They are not in images/packages.sh, which every `./qpip setup` and
# `./qpip demo` run: ./qpip test and ./qpip bench run this script instead.
#   nginx                     a web server (static files, epoll, worker processes)
#   wrk, curl                 its load generator, and a client whose download is checked
#   valkey-server, valkey-benchmark, valkey-cli
#                             a key-value server and its benchmark and client
#   sockperf                  TCP ping-pong latency
# Installs their packages into the runtime (trixie), then adds them to the guest extras
# (built by images/extras.sh first) as $QPIP_CACHE/guest/extras/sockets/:
#   bin/PROGRAM        a wrapper: the runtime's dynamic loader runs libexec/PROGRAM with
#                      lib/ as its library path (an LD_PRELOAD library still applies)
#   bin/lab-nginx      nginx with conf/nginx.conf: serves /tmp/www on port 8080 (both
#                      families), in the foreground, its pid and temporary files in /tmp/nginx
#   bin/lab-valkey     valkey-server with conf/valkey.conf: port 6379 (both families),
#                      nothing saved, in the foreground
#   libexec/, lib/     the programs from the runtime and every shared library they need
#   conf/              nginx.conf, mime.types (Debian's), valkey.conf
#   MANIFEST           the packages and versions
# images/guest/lab-extras puts sockets/bin/* on the PATH when the folder is there.
# Stamps make a second run a no-op: one in the runtime for the packages (a rebuilt runtime
# loses it with them), one in the folder for its contents (images/extras.sh replaces the
# whole extras folder when it rebuilds it, and this folder with its stamp goes too).
# Needs root (apt in the chroot) when the packages are to be installed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# nginx, not nginx-light: in trixie nginx-light is nginx plus the echo module.
PACKAGES=(nginx wrk curl valkey-server valkey-tools sockperf)
PROGRAMS=(usr/sbin/nginx:nginx usr/bin/wrk:wrk usr/bin/curl:curl
          usr/bin/valkey-server:valkey-server usr/bin/valkey-benchmark:valkey-tools
          usr/bin/valkey-cli:valkey-tools usr/bin/sockperf:sockperf)
CONF=$QPIP_ROOT/images/guest/sockets
EXTRAS=$QPIP_CACHE/guest/extras
OUT=$EXTRAS/sockets

[ -d "$RUNTIME_DIR/usr" ] || die "no runtime in $RUNTIME_DIR; run ./qpip setup (images/runtime.sh) first"
[ -d "$EXTRAS" ] || die "no guest extras in $EXTRAS; run images/extras.sh first"

PKG_KEY=$(inputs_hash "${PACKAGES[@]}")
PKG_STAMP=$RUNTIME_DIR/.qpip-sockets-packages-$PKG_KEY
if [ ! -f "$PKG_STAMP" ]; then
    [ "$(id -u)" = 0 ] || die "sockets extras: installing ${PACKAGES[*]} needs root (apt in the runtime with chroot)"
    # (Run by step, after `||`: errexit is off here, so every command is checked.)
    install_packages() {
        runtime_apt_begin || return 1
        # nginx's and valkey's packages start their services when installed: not in the
        # runtime (policy-rc.d says no to every service start while apt runs).
        printf '#!/bin/sh\nexit 101\n' >"$RUNTIME_DIR/usr/sbin/policy-rc.d"
        chmod 755 "$RUNTIME_DIR/usr/sbin/policy-rc.d"
        local rc=0
        in_root apt-get update -q \
            && in_root apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" \
            && in_root apt-get clean || rc=1
        rm -f "$RUNTIME_DIR/usr/sbin/policy-rc.d"
        runtime_apt_end
        return $rc
    }
    step "sockets extras: install ${PACKAGES[*]} into the runtime" install_packages
    rm -f "$RUNTIME_DIR"/.qpip-sockets-packages-*
    touch "$PKG_STAMP"
fi

extras_collect images/sockets-extras.sh "${PROGRAMS[@]}"

KEY=$(extras_key images/sockets-extras.sh "$CONF"/* "$RUNTIME_DIR/etc/nginx/mime.types")
if [ -f "$OUT/.stamp-$KEY" ]; then
    say "sockets extras: up to date ($OUT)"
    exit 0
fi

extras_stage "$EXTRAS/.sockets.XXXXXX" /extras/sockets "${PROGRAMS[@]}"
mkdir "$STAGE/conf"
install -m 0644 "$CONF/nginx.conf" "$CONF/valkey.conf" "$RUNTIME_DIR/etc/nginx/mime.types" "$STAGE/conf/"
install -m 0755 "$CONF/lab-nginx" "$CONF/lab-valkey" "$STAGE/bin/"
touch "$STAGE/.stamp-$KEY"
rm -rf "$OUT"
mv "$STAGE" "$OUT"
say "sockets extras: $OUT ($(du -sk "$OUT" | cut -f1) KiB): ${PROGRAMS[*]%%:*}"
