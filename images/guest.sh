#!/usr/bin/env bash
# Builds the guest image: $QPIP_CACHE/guest/vmlinuz (the runtime's kernel, a bzImage),
# $QPIP_CACHE/guest/vmlinux (the same kernel uncompressed, for faster PVH boot; only when
# the kernel has a PVH entry) and $QPIP_CACHE/guest/initramfs.cpio.gz holding
#   /init                      images/guest/init (the boot protocol: see that file)
#   /bin/busybox + applet links  from the runtime's busybox-static
#   /lib/modules/...           the virtio/9p modules the kernel builds as modules, decompressed,
#   /lib/modules/load-order      and the order /init loads them in (dependencies first)
#   /lib/qpip/qpip.ko          the guest driver, built by images/driver.sh
#   /lib/qpip/qpip_ib.ko       its iWARP ib_device, beside it; loaded on demand by lab-qpip-ib
#   /usr/lib/qpip/libqpip-preload.so  the preload library that runs socket programs over
#   /usr/bin/qpip-run                 qpip sockets (images/preload.sh, docs/sockets.md), its
#   /usr/bin/qpip-sockcheck           wrapper (preload/qpip-run) and its check program,
#                                     dynamic (a static program cannot be preloaded)
#   /usr/bin/qpip-*            the guest tools (guest-tools/, guest-driver/test-program/ and
#                              the C API's examples), linked statically
#   /usr/bin/lab-wait          waits for a file in /lab, the folder a lab's guests share
#   /lib/qpip/nap.sh           `nap`: waits 0.1 s without starting a process (sourced by scripts)
#   /usr/bin/lab-udp           UDP over kernel sockets (busybox nc is TCP only), static C
#   /usr/bin/lab-sockets-check the descriptor semantics of TCP sockets between a server and a
#                              client (epoll, fork, SCM_RIGHTS, sendfile...), dynamic C, so
#                              that an LD_PRELOAD library (qpip-run) can take its sockets
#   /usr/bin/lab-qpip-net      routes the lab through the qpip interface (qpip sockets)
#   /usr/bin/lab-extras        mounts the extras share (images/extras.sh) and puts its
#                              programs on the PATH, on demand
#   /usr/bin/lab-storage       lab-extras, then the storage modules from the share
#   soft-iWARP, loaded only on demand by lab-siw (boot time matters to every test):
#   /lib/modules/.../siw.ko    built by images/siw.sh, and the RDMA core modules it and
#   /lib/modules/rdma-load-order  rping need, decompressed, with their load order
#   /usr/bin/lab-siw           loads them and adds the siw link over the virtio-net NIC
#   /usr/bin/lab-qpip-ib       loads them (not siw.ko) and qpip_ib.ko
#   soft-RoCE, loaded only on demand by lab-rxe:
#   /lib/modules/.../rdma_rxe.ko  the kernel's rxe and the crc32 and UDP tunnel modules it needs,
#   /lib/modules/rxe-load-order   decompressed, with their load order (after the RDMA core's)
#   /usr/bin/lab-rxe           loads them (not siw.ko) and adds the rxe link over the NIC
#   /usr/bin/rping, ibv_devices, ibv_devinfo, rdma, ib_write_lat, ib_write_bw, ib_read_lat, ib_read_bw,
#     ib_send_bw, ib_send_lat, qperf, ibv_asyncwatch, ibv_rc_pingpong, ucmatose, rdma_server,
#     rdma_client
#                              rdma-core's, iproute2's, perftest's and qperf's tools from
#                              the runtime (trixie), dynamic, with siw's and rxe's verbs
#                              providers (/etc/libibverbs.d/siw.driver, rxe.driver) and qpip's (qpip.driver,
#                              built by images/rdma-provider.sh), every shared library they
#                              need and the dynamic loader (/lib64/ld-linux-x86-64.so.2)
#   /usr/bin/qpip-verbs-check  the VM tests' verbs program (rdma-provider/test/), built with
#                              the provider
#   /usr/bin/qpip-cm-check     their connection manager program (the same; librdmacm)
# Rebuilds only when an input changed (a stamp holds the hash of all of them).
#
# Environment: QPIP_KO overrides the driver module to pack (default $QPIP_CACHE/guest/qpip.ko;
# qpip_ib.ko is taken from beside it),
# QPIP_PRELOAD_SO the preload library (default $QPIP_CACHE/guest/libqpip-preload.so),
# QPIP_GUEST_OUT the output directory (default $QPIP_CACHE/guest).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT=${QPIP_GUEST_OUT:-$QPIP_CACHE/guest}
KO=${QPIP_KO:-$QPIP_CACHE/guest/qpip.ko}
IB_KO=$(dirname "$KO")/qpip_ib.ko
PRELOAD_SO=${QPIP_PRELOAD_SO:-$QPIP_CACHE/guest/libqpip-preload.so}
QPIP_RUN=$QPIP_ROOT/preload/qpip-run
SOCKCHECK=$(dirname "$PRELOAD_SO")/qpip-sockcheck
INIT=$QPIP_ROOT/images/guest/init
LAB_WAIT=$QPIP_ROOT/images/guest/lab-wait
NAP=$QPIP_ROOT/images/guest/nap.sh
LAB_UDP_SRC=$QPIP_ROOT/images/guest/lab-udp.c
LAB_QPIP_NET=$QPIP_ROOT/images/guest/lab-qpip-net
LAB_SOCKETS_SRC=$QPIP_ROOT/images/guest/lab-sockets-check.c
LAB_SIW=$QPIP_ROOT/images/guest/lab-siw
LAB_QPIP_IB=$QPIP_ROOT/images/guest/lab-qpip-ib
LAB_RXE=$QPIP_ROOT/images/guest/lab-rxe
LAB_STORAGE=$QPIP_ROOT/images/guest/lab-storage
LAB_EXTRAS=$QPIP_ROOT/images/guest/lab-extras
SIW_KO=$QPIP_CACHE/guest/siw.ko
BUSYBOX=$RUNTIME_DIR/usr/bin/busybox

# Modules the guest needs, by name; their dependencies are added from modules.dep and any
# that the kernel has built in are skipped:
#   9p, 9pnet_virtio  the host share (/host) over virtio-9p (pulls in 9pnet, netfs)
#   virtio_net        the virtio-net NIC the lab gives each guest for the sockets baseline
# (No virtio-rng: with -cpu max the kernel seeds its RNG from RDRAND before init runs.)
# The virtio core and virtio_pci are checked too: built in on the Debian kernel, but a
# kernel that builds them as modules needs them loaded first.
MODULES=(virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
         netfs 9pnet 9pnet_virtio 9p virtio_net)
# What siw.ko and rdma-core's tools need, loaded by lab-siw only (in this order, their own
# dependencies first; siw.ko, not the kernel's, comes last):
#   crc32c_generic    a crc32c for libcrc32c, which asks the crypto API for one when it
#                     loads (modules.softdep: "libcrc32c pre: crc32c"; not in modules.dep)
#   libcrc32c ib_core ib_uverbs   siw's dependencies (modinfo siw.ko: depends)
#   iw_cm ib_cm rdma_cm rdma_ucm  the RDMA connection manager and its /dev/infiniband/rdma_cm,
#                     which librdmacm (rping) uses; ib_uverbs gives /dev/infiniband/uverbs0
RDMA_MODULES=(crc32c_generic libcrc32c ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm)
# Soft-RoCE (the kernel's own rdma_rxe), loaded by lab-rxe after RDMA_MODULES: rxe needs
# the UDP tunnel sockets (udp_tunnel, ip6_udp_tunnel) for RoCEv2's UDP port 4791, the RDMA
# core above, and a "crc32" from the crypto API for its packets' ICRC, which it asks for
# when a device is added (crc32_generic; not in modules.dep or modules.softdep: without
# it `rdma link add` fails with "No such file or directory").
RXE_MODULES=(crc32_generic udp_tunnel ip6_udp_tunnel rdma_rxe)
# rdma-core, iproute2 and perftest programs for the guest, with siw's verbs provider, which
# libibverbs opens by name (lib<driver>-rdmav34.so for each /etc/libibverbs.d/*.driver).
# perftest's ib_write_lat, ib_write_bw, ib_read_lat and ib_read_bw give the bench its figures on
# siw and rxe; they and ib_send_bw, ib_send_lat run on qpip's provider against siw in
# ci/tests/rdma_cm.rs; qperf (RC tests over rdma_cm) is the VM tests' second benchmark.
# ibv_asyncwatch (a process holding a device open) and ibv_rc_pingpong are the qpip
# provider's test's users (ci/tests/rdma_core.rs). ucmatose, rdma_server and rdma_client
# (librdmacm's examples, rdmacm-utils) are clients and servers of their own between qpip
# devices (ci/tests/rdma_qpip.rs).
RDMA_PROGRAMS=(usr/bin/rping usr/bin/ibv_devices usr/bin/ibv_devinfo usr/bin/rdma
               usr/bin/ib_write_lat usr/bin/ib_write_bw usr/bin/ib_read_lat usr/bin/ib_read_bw
               usr/bin/ib_send_bw usr/bin/ib_send_lat
               usr/bin/qperf usr/bin/ibv_asyncwatch usr/bin/ibv_rc_pingpong
               usr/bin/ucmatose usr/bin/rdma_server usr/bin/rdma_client)
SIW_PROVIDER=usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so
SIW_DRIVER_CONF=etc/libibverbs.d/siw.driver
RXE_PROVIDER=usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
RXE_DRIVER_CONF=etc/libibverbs.d/rxe.driver
# qpip's provider, built outside the runtime (images/rdma-provider.sh), and where it goes.
QPIP_PROVIDER_SO=$QPIP_CACHE/guest/libqpip-rdmav34.so
QPIP_PROVIDER=usr/lib/x86_64-linux-gnu/libibverbs/libqpip-rdmav34.so
QPIP_DRIVER_CONF_SRC=$QPIP_ROOT/rdma-provider/qpip.driver
QPIP_DRIVER_CONF=etc/libibverbs.d/qpip.driver
# The VM tests' verbs program, built with the provider (rdma-provider/test/).
QPIP_VERBS_CHECK=$QPIP_CACHE/guest/qpip-verbs-check
QPIP_CM_CHECK=$QPIP_CACHE/guest/qpip-cm-check

[ -x "$BUSYBOX" ] || die "no busybox in the runtime ($BUSYBOX); run images/runtime.sh first"
[ -f "$KO" ] || die "no guest driver at $KO; run images/driver.sh first"
[ -f "$IB_KO" ] || die "no qpip_ib.ko beside $KO; run images/driver.sh first"
[ -f "$QPIP_PROVIDER_SO" ] || die "no rdma-core provider at $QPIP_PROVIDER_SO; run images/rdma-provider.sh first"
[ -f "$QPIP_VERBS_CHECK" ] || die "no $QPIP_VERBS_CHECK; run images/rdma-provider.sh first"
[ -f "$QPIP_CM_CHECK" ] || die "no $QPIP_CM_CHECK; run images/rdma-provider.sh first"
[ -f "$PRELOAD_SO" ] && [ -f "$SOCKCHECK" ] || die "no preload library at $PRELOAD_SO (or no qpip-sockcheck beside it); run images/preload.sh first"
[ -f "$SIW_KO" ] || die "no siw.ko at $SIW_KO; run images/siw.sh first"
for f in "${RDMA_PROGRAMS[@]}" "$SIW_PROVIDER" "$SIW_DRIVER_CONF" "$RXE_PROVIDER" "$RXE_DRIVER_CONF"; do
    [ -f "$RUNTIME_DIR/$f" ] || die "no /$f in the runtime; run images/packages.sh first (it installs rdma-core, perftest and qperf there)"
done
kernel=$(ls "$RUNTIME_DIR"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || die "no guest kernel in $RUNTIME_DIR/boot; run images/runtime.sh first"
KVER=${kernel##*/vmlinuz-}
MODDIR=$RUNTIME_DIR/lib/modules/$KVER
[ -f "$MODDIR/modules.dep" ] || die "no $MODDIR/modules.dep for kernel $KVER"
for tool in cargo cc xz gzip readelf strip; do
    command -v "$tool" >/dev/null || die "$tool is missing on this host"
done

# --- guest tools: static, so they need nothing of the image ------------------------------
mapfile -t bins < <(guest_tool_names)
[ ${#bins[@]} -gt 0 ] || die "no guest tools (guest-tools/src/bin is empty)"
step "guest image: build guest tools (${bins[*]}, static)" build_guest_tools
BINDIR=$GUEST_BINDIR
for b in "${bins[@]}"; do
    [ -x "$BINDIR/$b" ] || die "cargo built no $BINDIR/$b"
    # A dynamic binary would fail in the guest with a bare "not found" from the shell.
    if readelf -l "$BINDIR/$b" | grep -q INTERP; then
        die "$BINDIR/$b is dynamically linked (has an ELF interpreter); the guest tools must be static"
    fi
done

# --- kernel modules: resolve names to files and dependency order --------------------------
modules_index "$MODDIR"
for m in "${MODULES[@]}"; do modules_add "$m"; done
load_order=("${MODULE_ORDER[@]}")
builtins=()
for m in "${MODULES[@]}"; do modname "$m"; [ -z "${MOD_BUILTIN[$REPLY]:-}" ] || builtins+=("$REPLY"); done
say "guest image: kernel $KVER; built in: ${builtins[*]:-none}"
names=()
for f in "${load_order[@]}"; do modname "$f"; names+=("$REPLY"); done
say "guest image: modules to load: ${names[*]}"
# The RDMA modules: what the boot loads already is not listed again (modules_add skips what
# it added before).
MODULE_ORDER=()
for m in "${RDMA_MODULES[@]}"; do modules_add "$m"; done
rdma_order=("${MODULE_ORDER[@]}")
names=()
for f in "${rdma_order[@]}"; do modname "$f"; names+=("$REPLY"); done
say "guest image: RDMA modules for lab-siw: ${names[*]} siw"
MODULE_ORDER=()
for m in "${RXE_MODULES[@]}"; do modules_add "$m"; done
rxe_order=("${MODULE_ORDER[@]}")
names=()
for f in "${rxe_order[@]}"; do modname "$f"; names+=("$REPLY"); done
say "guest image: soft-RoCE modules for lab-rxe (after the RDMA core's): ${names[*]}"

# --- shared libraries of the RDMA tools -----------------------------------------------------
# glibc opens libgcc_s at run time to unwind a thread that ends with pthread_exit, as
# rping's threads do ("libgcc_s.so.1 must be installed for pthread_exit to work", abort).
runtime_libs "${RDMA_PROGRAMS[@]/#/$RUNTIME_DIR/}" "$RUNTIME_DIR/$SIW_PROVIDER" "$RUNTIME_DIR/$RXE_PROVIDER" \
    "$RUNTIME_DIR/$LIBDIR/libgcc_s.so.1"
libs=("${RUNTIME_LIBS[@]}")
[ -n "${RT_LIB_SEEN[libgcc_s.so.1]:-}" ] || libs+=("$LIBDIR/libgcc_s.so.1")
interp=$(readelf -l "$RUNTIME_DIR/${RDMA_PROGRAMS[0]}" | sed -n 's/.*interpreter: \(.*\)\]/\1/p')
[ "$interp" = "/$LOADER" ] || die "rping's ELF interpreter is '$interp', expected /$LOADER"
say "guest image: shared libraries of the RDMA tools: ${libs[*]##*/}"

# --- uncompressed kernel for PVH boot ----------------------------------------------------
# QEMU boots an ELF vmlinux that carries a PVH entry note directly (-kernel vmlinux): no
# real-mode setup and no in-guest decompression, which under TCG saves 1.5-2 s per boot.
# The payload's place is in the bzImage header (boot protocol >= 2.08): setup_sects at 0x1f1,
# payload_offset/length at 0x248/0x24c, counted from the end of the setup sectors.
extract_vmlinux() {
    local bz=$1 out=$2 magic setup off len start
    [ "$(dd if="$bz" bs=1 skip=$((0x202)) count=4 status=none)" = HdrS ] || return 1
    [ "$(od -An -tu2 -j $((0x206)) -N2 "$bz" | tr -d ' ')" -ge $((0x208)) ] || return 1
    setup=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
    [ "$setup" -ne 0 ] || setup=4
    off=$(od -An -tu4 -j $((0x248)) -N4 "$bz" | tr -d ' ')
    len=$(od -An -tu4 -j $((0x24c)) -N4 "$bz" | tr -d ' ')
    start=$(( (setup + 1) * 512 + off ))
    magic=$(od -An -tx1 -j "$start" -N4 "$bz" | tr -d ' ')
    # xz and zstd payloads end with the 4-byte decompressed size the kernel's build appends;
    # the decompressors would take it for a damaged next frame.
    # (dd, not tail|head: under pipefail the SIGPIPE of an early-closed pipe is a failure.)
    payload() { dd if="$bz" bs=1M iflag=skip_bytes,count_bytes skip="$start" count="$1" status=none; }
    case $magic in
        28b52ffd) payload $((len - 4)) | zstd -qdc >"$out" ;;
        fd377a58) payload $((len - 4)) | xz -dc >"$out" ;;
        1f8b*)    payload "$len" | gzip -dc >"$out" ;;
        *) return 1 ;;
    esac || return 1
    # Type 0x12 in the Xen notes is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point.
    local notes
    notes=$(readelf -n "$out" 2>/dev/null) || return 1
    grep -Eq 'Xen.*\(0x0*12\)' <<<"$notes"
}

# --- up to date? ---------------------------------------------------------------------------
hash_inputs=("$QPIP_ROOT/images/guest.sh" "$INIT" "$LAB_WAIT" "$NAP" "$LAB_UDP_SRC" "$LAB_QPIP_NET" "$LAB_SOCKETS_SRC" "$LAB_SIW" "$LAB_QPIP_IB" "$LAB_RXE" "$LAB_STORAGE" "$LAB_EXTRAS" "$KO" "$IB_KO"
             "$QPIP_PROVIDER_SO" "$QPIP_DRIVER_CONF_SRC" "$QPIP_VERBS_CHECK" "$QPIP_CM_CHECK"
             "$PRELOAD_SO" "$QPIP_RUN" "$SOCKCHECK"
             "$SIW_KO" "$BUSYBOX" "$kernel")
for b in "${bins[@]}"; do hash_inputs+=("$BINDIR/$b"); done
for f in "${load_order[@]}" "${rdma_order[@]}" "${rxe_order[@]}"; do hash_inputs+=("$MODDIR/$f"); done
for f in "${RDMA_PROGRAMS[@]}" "$SIW_PROVIDER" "$SIW_DRIVER_CONF" "$RXE_PROVIDER" "$RXE_DRIVER_CONF" "${libs[@]}" "$LOADER"; do
    hash_inputs+=("$RUNTIME_DIR/$f")
done
KEY=$(inputs_hash "${hash_inputs[@]}")
STAMP=$OUT/.initramfs-$KEY
if [ -f "$STAMP" ] && [ -f "$OUT/initramfs.cpio.gz" ] && cmp -s "$kernel" "$OUT/vmlinuz" \
   && { [ -f "$OUT/vmlinux" ] || [ -f "$OUT/.no-vmlinux" ]; }; then
    say "guest image: up to date ($OUT)"
    exit 0
fi

# --- assemble the tree ---------------------------------------------------------------------
mkdir -p "$OUT"
STAGE=$(mktemp -d "$OUT/.stage.XXXXXX")
# mktemp makes it 0700; it becomes the guest's /, which every user must be able to enter.
chmod 755 "$STAGE"
trap 'rm -rf "$STAGE" "$OUT/.initramfs.tmp" "$OUT/vmlinux.tmp" "$OUT/vmlinuz.tmp"' EXIT
say "guest image: assembling in $STAGE"
cd "$STAGE"
mkdir -p bin sbin usr/bin usr/sbin lib/modules lib/qpip etc root dev proc sys host tmp run
chmod 1777 tmp
install -m 0755 "$INIT" init
install -m 0755 "$BUSYBOX" bin/busybox
# Applet links, except those that would make busybox act as a system init (linuxrc,
# sbin/init): this image's init is /init, and busybox init would start shells nobody reads.
while IFS= read -r applet; do
    case $applet in linuxrc|sbin/init|bin/busybox) continue ;; esac
    mkdir -p "$(dirname "$applet")"
    ln -sf /bin/busybox "$applet"
done < <("$BUSYBOX" --list-full)
[ -L bin/sh ] || die "busybox provides no sh applet"
# The console the kernel opens for /init before devtmpfs is mounted (needs root; /init
# reopens it from devtmpfs either way).
if [ "$(id -u)" = 0 ]; then
    mknod -m 600 dev/console c 5 1
    mknod -m 666 dev/null c 1 3
fi
printf 'root:x:0:0:root:/root:/bin/sh\n' >etc/passwd
printf 'root:x:0:\n' >etc/group
printf '127.0.0.1 localhost\n::1 localhost\n' >etc/hosts

# put_module FILE LIST: the kernel's module FILE (relative to its modules folder) into the
# image, decompressed, its path appended to LIST.
put_module() {
    local dst=lib/modules/$KVER/${1%.ko*}.ko
    mkdir -p "$(dirname "$dst")"
    unpack_module "$MODDIR/$1" "$dst"
    printf '/%s\n' "$dst" >>"$2"
}
for f in "${load_order[@]}"; do put_module "$f" lib/modules/load-order; done
touch lib/modules/load-order
for f in "${rdma_order[@]}"; do put_module "$f" lib/modules/rdma-load-order; done
mkdir -p "lib/modules/$KVER/extra"
install -m 0644 "$SIW_KO" "lib/modules/$KVER/extra/siw.ko"
printf '/%s\n' "lib/modules/$KVER/extra/siw.ko" >>lib/modules/rdma-load-order
for f in "${rxe_order[@]}"; do put_module "$f" lib/modules/rxe-load-order; done

# rdma-core's and iproute2's tools, dynamic: each file at its path in the runtime (symlinks
# followed), the libraries where the loader looks by default.
for f in "${RDMA_PROGRAMS[@]}" "$SIW_PROVIDER" "$SIW_DRIVER_CONF" "$RXE_PROVIDER" "$RXE_DRIVER_CONF" "$LOADER"; do
    mkdir -p "$(dirname "$f")"
    cp -L "$RUNTIME_DIR/$f" "$f"
done
mkdir -p "$LIBDIR"
for f in "${libs[@]}"; do cp -L "$RUNTIME_DIR/$f" "$LIBDIR/${f##*/}"; done
install -m 0644 "$QPIP_PROVIDER_SO" "$QPIP_PROVIDER"
install -m 0644 "$QPIP_DRIVER_CONF_SRC" "$QPIP_DRIVER_CONF"
install -m 0755 "$QPIP_VERBS_CHECK" usr/bin/qpip-verbs-check
install -m 0755 "$QPIP_CM_CHECK" usr/bin/qpip-cm-check
# It needs what siw's provider needs (libibverbs, libc); say so if that ever changes.
for n in $(readelf -d "$QPIP_PROVIDER" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$LIBDIR/$n" ] || die "qpip's rdma-core provider needs $n, which the image does not carry"
done

install -m 0644 "$KO" lib/qpip/qpip.ko
# Debug info is most of its size; the guest loads it into RAM from the initramfs.
strip --strip-debug -o lib/qpip/qpip_ib.ko "$IB_KO"
chmod 0644 lib/qpip/qpip_ib.ko
# The preload library needs only libc, which the image has for rdma-core's tools.
mkdir -p usr/lib/qpip
install -m 0644 "$PRELOAD_SO" usr/lib/qpip/libqpip-preload.so
install -m 0755 "$QPIP_RUN" usr/bin/qpip-run
install -m 0755 "$SOCKCHECK" usr/bin/qpip-sockcheck
for b in "${bins[@]}"; do
    # The release profile keeps line tables for host backtraces; the guest copy needs none.
    strip -o "usr/bin/$b" "$BINDIR/$b"
done
install -m 0755 "$LAB_WAIT" usr/bin/lab-wait
install -m 0644 "$NAP" lib/qpip/nap.sh
install -m 0755 "$LAB_SIW" usr/bin/lab-siw
install -m 0755 "$LAB_QPIP_IB" usr/bin/lab-qpip-ib
install -m 0755 "$LAB_RXE" usr/bin/lab-rxe
install -m 0755 "$LAB_STORAGE" usr/bin/lab-storage
install -m 0755 "$LAB_EXTRAS" usr/bin/lab-extras
install -m 0755 "$LAB_QPIP_NET" usr/bin/lab-qpip-net
# Static, like the Rust tools (the image's libc is there for rdma-core's tools only).
# Numeric addresses only (no resolver, so static glibc needs no NSS modules).
cc -static -O2 -Wall -Wextra -Werror -s -o usr/bin/lab-udp "$LAB_UDP_SRC" \
    || die "cannot build lab-udp from $LAB_UDP_SRC"
# Dynamic: a preload library must be able to take its socket calls. Built by the runtime's
# gcc against the runtime's glibc, the one the image carries (as root, in the chroot; else
# by the host's cc, whose glibc must not be newer than the runtime's).
build_lab_sockets_check() {
    local dir
    if [ "$(id -u)" = 0 ]; then
        dir=$(mktemp -d "$RUNTIME_DIR/tmp/lab-sockets-check.XXXXXX") || return 1
        cp "$LAB_SOCKETS_SRC" "$dir/lab-sockets-check.c"
        chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C \
            gcc -O2 -Wall -Wextra -Werror -s -o "/tmp/${dir##*/}/lab-sockets-check" \
            "/tmp/${dir##*/}/lab-sockets-check.c" \
            && install -m 0755 "$dir/lab-sockets-check" usr/bin/lab-sockets-check
        local rc=$?
        rm -rf "$dir"
        return $rc
    fi
    cc -O2 -Wall -Wextra -Werror -s -o usr/bin/lab-sockets-check "$LAB_SOCKETS_SRC"
}
build_lab_sockets_check || die "cannot build lab-sockets-check from $LAB_SOCKETS_SRC"
for n in $(readelf -d usr/bin/lab-sockets-check | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$LIBDIR/$n" ] || die "lab-sockets-check needs $n, which the image does not carry"
done

# --- pack ----------------------------------------------------------------------------------
# Fixed timestamps and owners, sorted names: the same inputs give the same archive on one
# host. (Not --ignore-devno: busybox then zeroes the device numbers of /dev/console too.)
find . -exec touch -h -d @0 {} +
find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc -R 0:0 --renumber-inodes \
    | gzip -n -9 >"$OUT/.initramfs.tmp"
[ -s "$OUT/.initramfs.tmp" ] || die "packing the initramfs produced nothing"
mv -f "$OUT/.initramfs.tmp" "$OUT/initramfs.cpio.gz"
cp "$kernel" "$OUT/vmlinuz.tmp" && mv -f "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
rm -f "$OUT/.no-vmlinux"
if extract_vmlinux "$kernel" "$OUT/vmlinux.tmp"; then
    mv -f "$OUT/vmlinux.tmp" "$OUT/vmlinux"
    say "guest image: $OUT/vmlinux (PVH entry: boots without decompression)"
else
    rm -f "$OUT/vmlinux.tmp" "$OUT/vmlinux"
    touch "$OUT/.no-vmlinux"
    say "guest image: could not extract a PVH-bootable vmlinux from $kernel; only vmlinuz"
fi
rm -f "$OUT"/.initramfs-*
touch "$STAMP"
say "guest image: $OUT/initramfs.cpio.gz ($(du -k "$OUT/initramfs.cpio.gz" | cut -f1) KiB), $OUT/vmlinuz ($KVER)"
