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

# Disk: the Docker 28 engine's data root takes about 16 GB (its own copy of
# the end-to-end image and its cache) and the fuzzing's build about 2 GB, on
# top of what the suite left: the machine engine's test images (about 17 GB)
# and target/. A CI machine with 53 GB free ran out in the fuzzing's build
# (2026-12-04). So when less than IMGCTL_CI_NEED_GB (default 32) is free,
# the suite's own leftovers go first: the machine engine's `imgctl-test/`
# images and build cache (the next run builds them again) and target/'s
# incremental state (unused by a clean clone). Each step says what it freed.
free_gb() { df -Pk "$repo" /var/lib | awk 'NR>1 && (min=="" || $4<min) {min=$4} END {print int(min/1048576)}'; }
need_gb="${IMGCTL_CI_NEED_GB:-32}"
log() { printf 'ci-last: %s\n' "$*" >&2; }
before=$(free_gb)
log "disk: ${before} GB free (this step needs about ${need_gb} GB)"
if [ "$before" -lt "$need_gb" ]; then
  images=$(docker image ls --filter 'reference=imgctl-test/*' --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -v ':<none>$' || true)
  if [ -n "$images" ]; then
    # shellcheck disable=SC2086 # one name a line, no spaces in image names
    docker image rm -f $images >/dev/null 2>&1 || true
  fi
  docker image prune -f >/dev/null 2>&1 || true
  docker builder prune -af >/dev/null 2>&1 || true
  rm -rf "$repo/target/debug/incremental"
  log "disk: removed the suite's images on the machine's engine, its build cache and target/debug/incremental: ${before} -> $(free_gb) GB free"
  if [ "$(free_gb)" -lt "$need_gb" ]; then
    log "warning: $(free_gb) GB free, under the ${need_gb} GB this step needs; it may run out of disk"
  fi
fi

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
log "engine tests on Docker 28 exit $rc, fuzzing exit $fuzz_rc, both in $(($(date +%s) - started)) s; disk: $(free_gb) GB free"
[ "$rc" -ne 0 ] && exit "$rc"
exit "$fuzz_rc"
