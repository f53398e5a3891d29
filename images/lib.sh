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
