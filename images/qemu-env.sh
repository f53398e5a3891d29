#!/usr/bin/env bash
# Runs the runtime's qemu-system-x86_64 without chroot, through the runtime's own dynamic
# loader and libraries (the host's glibc is too old for it). Arguments are passed to QEMU.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
R=${QPIP_RUNTIME_DIR:-$RUNTIME_DIR}
[ -x "$R/usr/bin/qemu-system-x86_64" ] || die "no QEMU runtime in $R; run ./qpip setup"
export QEMU_MODULE_DIR=$R/usr/lib/x86_64-linux-gnu/qemu
exec "$R/lib64/ld-linux-x86-64.so.2" \
    --library-path "$R/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu" \
    "$R/usr/bin/qemu-system-x86_64" -L "$R/usr/share/qemu" -L "$R/usr/share/seabios" "$@"
