# The shell helpers every VM test's guest script starts with (common::script puts them
# first, then the test file's own helpers, then the script).
#  kv KEY VALUE       one report line, `@KEY=VALUE` (Report reads them)
#  await NAME         waits for /lab/NAME, up to 300 s; a timeout is reported as
#                     `@wait.NAME=failed` and returns 1
#  await_unless_host_done NAME
#                     the same, but gives up at once when the lab's host side has ended
#                     (/lab/host-done) without creating NAME: for a lab whose host side
#                     runs until the guests are done, so a failed host side ends the wait
#  run TAG CMD...     runs CMD; its output follows with its `@` lines as `@TAG.…`, then
#                     `@TAG.status` (CMD's exit status)
kv() { printf '@%s=%s\n' "$1" "$2"; }
await() { lab-wait "$1" 300 || { kv "wait.$1" failed; return 1; }; }
await_unless_host_done() {
    i=0
    until [ -e "/lab/$1" ]; do
        if [ -e /lab/host-done ] || [ $i -ge 3000 ]; then kv "wait.$1" failed; return 1; fi
        i=$((i + 1)); sleep 0.1
    done
}
run() { t=$1; shift; "$@" >/tmp/run.$t 2>&1; st=$?; sed "s/^@/@$t./" /tmp/run.$t; kv $t.status $st; }
