#!/usr/bin/env bash
# The last two steps of `make test`, side by side: the bounded fuzzing
# (scripts/fuzz-ci.sh, whose instrumented build keeps both cores busy for
# minutes) and the engine tests on Docker 28 (scripts/engine-tests.sh 28, most
# of whose time is the end-to-end image's cold build, part of it waiting on
# pip's downloads inside a container). One after the other they took about
# 1034-1090 s on a 2-core machine; side by side 972 s and 890 s in two runs
# (2026-12-03): a small gain, since unpacking wheels and committing layers
# is CPU work too.
#
# The fuzzing's lines come prefixed with `fuzz: ` as they are printed. The
# exit status is the first failure's (the engine tests', then the fuzzing's);
# both always run to their end. Ctrl-C or SIGTERM stops both: the fuzzing is
# killed, and engine-tests.sh brings the machine's engine back as it always
# does.
# Environment: as for the two scripts (FUZZ_SECONDS, FUZZ_TARGETS,
# IMGCTL_ENGINE_TESTS, IMGCTL_CACHE); IMGCTL_CI_SERIAL=1 runs them one after
# the other, as before.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "${IMGCTL_CI_SERIAL:-0}" = 1 ]; then
  bash "$repo/scripts/fuzz-ci.sh"
  exec bash "$repo/scripts/engine-tests.sh" 28
fi

started=$(date +%s)
# A background job of a non-interactive shell ignores SIGINT: stop it by hand.
fuzz_pid=""
stop_fuzz() {
  if [ -n "$fuzz_pid" ] && kill -0 "$fuzz_pid" 2>/dev/null; then
    # Its own process group: cargo, rustc and a fuzz target go with it.
    kill -TERM -- "-$fuzz_pid" 2>/dev/null || true
  fi
}
trap 'stop_fuzz; exit 130' INT
trap 'stop_fuzz; exit 143' TERM
trap stop_fuzz EXIT

# In a process group of its own (setsid), so that stopping it stops all of it.
# fuzz-ci.sh logs with a `fuzz: ` prefix; the rest (a failure's tail) gets one.
setsid bash "$repo/scripts/fuzz-ci.sh" > >(sed -u '/^fuzz: /!s/^/fuzz: /' >&2) 2>&1 &
fuzz_pid=$!

rc=0
bash "$repo/scripts/engine-tests.sh" 28 || rc=$?
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
fuzz_pid=""
printf 'ci-last: engine tests on Docker 28 exit %s, fuzzing exit %s, both in %s s\n' \
  "$rc" "$fuzz_rc" "$(($(date +%s) - started))" >&2
[ "$rc" -ne 0 ] && exit "$rc"
exit "$fuzz_rc"
