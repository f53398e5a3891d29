# Shared helpers for the image scripts. Sourced, not run.
# QPIP_CACHE: where built artefacts live (default: <repo>/.cache, gitignored).

QPIP_ROOT=${QPIP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
QPIP_CACHE=${QPIP_CACHE:-$QPIP_ROOT/.cache}
RUNTIME_DIR=$QPIP_CACHE/runtime

say()  { printf '\033[1m[qpip]\033[0m %s\n' "$*" >&2; }
die()  { printf '\033[1;31m[qpip] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Elapsed-time wrapper for long steps: "step NAME CMD..." prints what runs and how long it took.
step() {
    local what=$1; shift
    local t0=$SECONDS
    say "$what ..."
    "$@" || die "$what failed (see the output above)"
    say "$what: done in $((SECONDS - t0)) s"
}

# Content hash of files and strings, used as cache keys so a changed input forces a rebuild.
inputs_hash() {
    { for f in "$@"; do
        if [ -f "$f" ]; then printf '%s\n' "$f"; cat "$f"; else printf '%s\n' "$f"; fi
      done; } | sha256sum | cut -c1-16
}

# The guest tools, linked statically: the guest image carries a libc only for rdma-core's
# tools. They are the binaries of guest-tools/ (crate qpip-tools: the verbs library's
# tools), the driver's test program (guest-driver/test-program/, crate qpip-driver-test)
# and the C API's examples.
# Built by images/guest.sh, and early by ./qpip setup (while the runtime downloads), with
# the same command, so the second build is a no-op.
GUEST_TARGET=x86_64-unknown-linux-gnu
GUEST_BINDIR=${CARGO_TARGET_DIR:-$QPIP_ROOT/target}/$GUEST_TARGET/guest

# guest_tool_names: prints the names of the guest tools, one per line: qpip-tools' binaries
# (one per file or folder of guest-tools/src/bin), qpip-driver-test, then the C API's
# examples (qpip-c-NAME for guest-lib/capi/examples/NAME.c).
guest_tool_names() {
    local src name
    for src in "$QPIP_ROOT"/guest-tools/src/bin/*.rs "$QPIP_ROOT"/guest-tools/src/bin/*/main.rs; do
        [ -f "$src" ] || continue
        case $src in */main.rs) name=${src%/main.rs}; name=${name##*/} ;; *) name=$(basename "$src" .rs) ;; esac
        printf '%s\n' "$name"
    done
    printf '%s\n' qpip-driver-test
    for src in "$QPIP_ROOT"/guest-lib/capi/examples/*.c; do
        [ -f "$src" ] || continue
        printf 'qpip-c-%s\n' "$(basename "$src" .c)"
    done
}

# build_guest_tools: builds them into $GUEST_BINDIR, with the workspace's `guest` profile
# (release with the library inlined into each tool, see Cargo.toml).
# The C API's examples are compiled against its static library (libqpip.a) and linked
# statically too, so that the guest runs the C API on the device.
build_guest_tools() {
    env RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --manifest-path "$QPIP_ROOT/Cargo.toml" --profile guest \
        -p qpip-tools -p qpip-driver-test --target "$GUEST_TARGET" --bins || return 1
    # Only libqpip.a: a static C runtime has no shared libraries.
    env RUSTFLAGS="-C target-feature=+crt-static" \
        cargo rustc --manifest-path "$QPIP_ROOT/Cargo.toml" --profile guest -p qpip-capi \
        --target "$GUEST_TARGET" --lib --crate-type staticlib || return 1
    local src name capi=$QPIP_ROOT/guest-lib/capi
    for src in "$capi"/examples/*.c; do
        [ -f "$src" ] || continue
        name=qpip-c-$(basename "$src" .c)
        # Up to date when newer than the example, the headers and the library.
        if [ "$GUEST_BINDIR/$name" -nt "$src" ] && [ "$GUEST_BINDIR/$name" -nt "$GUEST_BINDIR/libqpip.a" ] \
            && [ "$GUEST_BINDIR/$name" -nt "$capi/include/qpip.h" ] \
            && [ "$GUEST_BINDIR/$name" -nt "$capi/examples/check.h" ]; then
            continue
        fi
        # glibc warns that Rust's std links getaddrinfo and getpwuid_r (which a static
        # program can only use with the shared glibc around); the examples use neither,
        # and rustc hides the same warnings for the Rust tools.
        cc -std=c11 -Wall -Wextra -Werror -O2 -static -I "$capi/include" "$src" \
            "$GUEST_BINDIR/libqpip.a" -lpthread -ldl -lm -o "$GUEST_BINDIR/$name" 2>&1 |
            grep -v "in statically linked applications requires\|: in function \`std::" >&2
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
    done
}

# --- out-of-tree kernel modules for the guest (images/driver.sh, images/siw.sh) -----------
# Built inside the runtime (chroot) with its gcc against the exact guest kernel's headers,
# so that vermagic and symbol versions match the kernel that loads them.

# guest_kernel_headers: sets HDRS_NAME to the runtime's headers tree of the guest kernel
# (usr/src/linux-headers-*-amd64) and KVER to that kernel's version. With two trees, which
# kernel the guest boots would be a guess: it dies unless there is exactly one.
guest_kernel_headers() {
    local hdrs
    shopt -s nullglob
    hdrs=("$RUNTIME_DIR"/usr/src/linux-headers-*-amd64)
    shopt -u nullglob
    [ ${#hdrs[@]} -eq 1 ] || die "expected exactly one $RUNTIME_DIR/usr/src/linux-headers-*-amd64, found ${#hdrs[@]}; rebuild the runtime (images/runtime.sh)"
    HDRS_NAME=$(basename "${hdrs[0]}")
    KVER=${HDRS_NAME#linux-headers-}
}

# runtime_kbuild DIR [ARGS...]: the guest kernel's `make modules` for the module in DIR (a
# path inside the runtime), with the extra make ARGS, run in the runtime.
runtime_kbuild() {
    local dir=$1
    shift
    # env -i: nothing from the caller's environment (ARCH, CC, MAKEFLAGS...) leaks in.
    chroot "$RUNTIME_DIR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=/root \
        make -C "/usr/src/$HDRS_NAME" M="/$dir" "$@" modules
}

# check_vermagic WHAT KO: sets VERMAGIC to module KO's; dies (naming WHAT) unless KO is for
# the kernel the guest boots ($KVER).
check_vermagic() {
    VERMAGIC=$(grep -ao 'vermagic=[[:print:]]*' "$2" | head -1 | sed 's/^vermagic=//; s/ *$//')
    case $VERMAGIC in
        "$KVER "*) ;;
        *) die "$1: ${2##*/} has vermagic '$VERMAGIC', expected kernel $KVER" ;;
    esac
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

# --- the guest kernel's own modules and the runtime's shared libraries ----------------------
# (images/guest.sh packs some into the initramfs, images/extras.sh others into the extras
# share.)

# modules_index MODDIR: reads MODDIR's modules.dep (lines "kernel/path/name.ko.xz: dep.ko.xz
# ...") and modules.builtin, for modules_add. Module names treat - and _ alike, file names do
# not, so names are normalised. Sets REPLY instead of printing in modname: modules.dep has
# thousands of lines, and a command substitution per line (a subshell each) made an
# up-to-date check take seconds.
modname() { local n=${1##*/}; n=${n%%.ko*}; REPLY=${n//-/_}; }
modules_index() {
    local line f
    declare -gA MOD_DEPS=() MOD_FILE=() MOD_BUILTIN=() MOD_SEEN=()
    MODULE_ORDER=()
    while IFS= read -r line; do
        f=${line%%:*}
        modname "$f"
        MOD_FILE[$REPLY]=$f
        MOD_DEPS[$REPLY]=${line#*:}
    done <"$1/modules.dep"
    if [ -f "$1/modules.builtin" ]; then
        while IFS= read -r f; do modname "$f"; MOD_BUILTIN[$REPLY]=1; done <"$1/modules.builtin"
    fi
}

# modules_add NAME: appends module NAME's file (relative to the modules folder) to
# MODULE_ORDER, after its dependencies, depth first; a module built into the kernel, or
# added already (since modules_index), is skipped.
modules_add() {
    local n d
    modname "$1"; n=$REPLY
    [ -z "${MOD_SEEN[$n]:-}" ] || return 0
    MOD_SEEN[$n]=1
    [ -z "${MOD_BUILTIN[$n]:-}" ] || return 0
    [ -n "${MOD_FILE[$n]:-}" ] || die "the guest kernel has module $n neither built in nor in modules.dep"
    for d in ${MOD_DEPS[$n]}; do modules_add "$d"; done
    MODULE_ORDER+=("${MOD_FILE[$n]}")
}

# unpack_module SRC DST: a kernel module file, decompressed (busybox insmod wants the plain
# ELF).
unpack_module() {
    case $1 in
        *.ko.xz)  xz -dc "$1" >"$2" ;;
        *.ko.gz)  gzip -dc "$1" >"$2" ;;
        *.ko.zst) zstd -qdc "$1" >"$2" ;;
        *.ko)     cp "$1" "$2" ;;
        *) die "unknown module format: $1" ;;
    esac
}

# The runtime's dynamic loader and library folder (x86-64).
LOADER=lib64/ld-linux-x86-64.so.2
LIBDIR=usr/lib/x86_64-linux-gnu

# runtime_libs ELF...: sets RUNTIME_LIBS to the shared libraries (paths relative to the
# runtime) that the ELF files need, recursively: what ldd would list, read from the files
# (readelf: nothing runs, no chroot). The dynamic loader is left out (it has a path of its
# own, $LOADER).
runtime_libs() {
    declare -gA RT_LIB_SEEN=()
    RUNTIME_LIBS=()
    local f
    for f in "$@"; do runtime_libs_of "$f"; done
}
runtime_libs_of() {
    local elf=$1 n p d
    # Some libraries find theirs in a folder of their own (RUNPATH: librados in
    # /usr/lib/x86_64-linux-gnu/ceph); those folders are searched too.
    local -a dirs=("$LIBDIR" usr/lib)
    for d in $(readelf -d "$elf" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p' | tr ':' ' '); do
        case $d in /*) dirs+=("${d#/}") ;; esac
    done
    while read -r n; do
        [ -z "${RT_LIB_SEEN[$n]:-}" ] || continue
        [ "$n" != "${LOADER##*/}" ] || continue
        RT_LIB_SEEN[$n]=1
        p=
        for d in "${dirs[@]}"; do
            [ -e "$RUNTIME_DIR/$d/$n" ] && { p=$d/$n; break; }
        done
        [ -n "$p" ] || die "no $n (needed by ${elf#"$RUNTIME_DIR"/}) in the runtime's library folders"
        RUNTIME_LIBS+=("$p")
        runtime_libs_of "$RUNTIME_DIR/$p"
    done < <(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
}

# --- apt in the runtime, and programs for the extras share ------------------------------------

# in_root CMD...: runs CMD in the runtime (chroot), non-interactively.
in_root() { chroot "$RUNTIME_DIR" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }

# runtime_apt_begin / runtime_apt_end: mount /proc and /dev in the runtime for apt, and
# unmount them; an EXIT trap unmounts them too when apt fails or the user interrupts.
# Returns non-zero if a mount fails (callers run under `step`, errexit off).
RUNTIME_MOUNTS=()
runtime_apt_end() {
    local i
    for ((i=${#RUNTIME_MOUNTS[@]}-1; i>=0; i--)); do
        mountpoint -q "${RUNTIME_MOUNTS[$i]}" && umount -l "${RUNTIME_MOUNTS[$i]}" || true
    done
    RUNTIME_MOUNTS=()
}
runtime_apt_begin() {
    trap runtime_apt_end EXIT
    trap 'exit 130' INT TERM
    mount -t proc proc "$RUNTIME_DIR/proc" || return 1
    RUNTIME_MOUNTS+=("$RUNTIME_DIR/proc")
    mount --bind /dev "$RUNTIME_DIR/dev" || return 1
    RUNTIME_MOUNTS+=("$RUNTIME_DIR/dev")
}

# extras_program FILE DIR PREFIX: the runtime's program FILE (a path in the runtime) as
# DIR/libexec/NAME, with a wrapper DIR/bin/NAME that runs it through the image's dynamic
# loader with PREFIX/lib as its library path, PREFIX being where DIR is in the guest.
# (--argv0: programs that read their own name, mke2fs as mkfs.ext2, see the name they
# were called by.)
extras_program() {
    local n=${1##*/}
    cp -L "$RUNTIME_DIR/$1" "$2/libexec/$n"
    printf '#!/bin/sh\nexec /%s --library-path %s/lib --argv0 "$0" %s/libexec/%s "$@"\n' \
        "$LOADER" "$3" "$3" "$n" >"$2/bin/$n"
    chmod 755 "$2/bin/$n"
}

# extras_collect SCRIPT PATH:PACKAGE...: the runtime's programs PATH (from Debian's PACKAGE,
# which SCRIPT installs) for an extras folder: sets EXTRAS_FILES to their paths on this
# host, EXTRAS_MANIFEST to a line each (path, package, version) and RUNTIME_LIBS to the
# shared libraries they need; dies, naming SCRIPT, when one is missing.
extras_collect() {
    local script=$1 p f pkg v
    shift
    EXTRAS_FILES=()
    EXTRAS_MANIFEST=
    for p in "$@"; do
        f=${p%%:*}
        pkg=${p#*:}
        v=$(runtime_version "$pkg")
        [ -n "$v" ] && [ -f "$RUNTIME_DIR/$f" ] \
            || die "no /$f in the runtime (package $pkg); run $script first (it installs it)"
        EXTRAS_FILES+=("$RUNTIME_DIR/$f")
        EXTRAS_MANIFEST+="$f $pkg $v"$'\n'
    done
    runtime_libs "${EXTRAS_FILES[@]}"
}

# extras_key SCRIPT INPUT...: prints the cache key of an extras folder that SCRIPT builds
# from what extras_collect found (the programs, their packages' versions, their libraries)
# and INPUT... (more files or strings).
extras_key() {
    local script=$1 f inputs
    shift
    inputs=("$QPIP_ROOT/$script" "$QPIP_ROOT/images/lib.sh" "$EXTRAS_MANIFEST")
    for f in "${EXTRAS_FILES[@]}"; do inputs+=("$f"); done
    for f in "${RUNTIME_LIBS[@]}"; do inputs+=("$RUNTIME_DIR/$f"); done
    inputs_hash "${inputs[@]}" "$@"
}

# extras_stage TEMPLATE PREFIX PATH:PACKAGE...: sets STAGE to a new folder (mktemp -d
# TEMPLATE, removed when the script exits unless it was moved away) holding what
# extras_collect found for these programs: bin/ (wrappers), libexec/, lib/ and MANIFEST,
# PREFIX being where the folder will be in the guest.
extras_stage() {
    local template=$1 prefix=$2 dir p f
    shift 2
    STAGE=$(mktemp -d "$template")
    trap 'rm -rf "$STAGE"' EXIT
    dir=$STAGE
    chmod 755 "$dir"
    mkdir -p "$dir"/{bin,libexec,lib}
    for p in "$@"; do extras_program "${p%%:*}" "$dir" "$prefix"; done
    for f in "${RUNTIME_LIBS[@]}"; do cp -L "$RUNTIME_DIR/$f" "$dir/lib/${f##*/}"; done
    printf '%s' "$EXTRAS_MANIFEST" >"$dir/MANIFEST"
}
