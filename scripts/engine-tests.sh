#!/usr/bin/env bash
# The engine-facing integration tests against a second Docker engine version
# (#28 item 5). `make test` (so CI) runs `scripts/engine-tests.sh 28` after the
# whole suite has passed on the machine's own engine (Debian's 20.10, API 1.41):
#
#   1. scripts/dev-engine.sh 28 swaps Debian unstable's docker.io 28 in on
#      /var/run/docker.sock (its own data root, /var/lib/docker-28);
#   2. the test bases are loaded there (scripts/test-bases.sh, from the tarballs
#      it keeps in the cache: no second debootstrap);
#   3. the tests that talk to the engine run: attest, build, buildkit, cdi (a fake
#      vendor's CDI spec: on 28 the container must see its edits), engine, image
#      end to end, and verify (its --image tests). On 28, `--builder auto`
#      picks BuildKit, as it does for most users;
#   4. the machine's own engine comes back (scripts/dev-engine.sh system), on
#      every path: a failure, Ctrl-C or SIGTERM included.
#
# A developer runs either engine's set by hand:
#   scripts/engine-tests.sh 28       the set on Docker 28, then back to the system engine
#   scripts/engine-tests.sh system   the same set on the machine's own engine
# Arguments after the version go to the test binary: filters there replace the
# default set (`scripts/engine-tests.sh 28 image_e2e --nocapture`).
# Environment: IMGCTL_ENGINE_TESTS=0 skips this step (`make test` on a machine
# where the engine must not be swapped); IMGCTL_CACHE as in scripts/setup.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-28}"
shift || true
log() { printf 'engine-tests: %s\n' "$*" >&2; }

if [ "${IMGCTL_ENGINE_TESTS:-1}" = 0 ]; then
  log "skipped (IMGCTL_ENGINE_TESTS=0)"
  exit 0
fi
# The modules whose tests talk to the engine (tests/it/<module>.rs).
filters=(attest:: build:: buildkit:: cdi:: engine:: https:: image_e2e:: verify:: workstation::)
for a in "$@"; do case "$a" in -*) ;; *) filters=() ;; esac; done

case "$version" in
  system) ;;
  28)
    restore() {
      local rc=$?
      trap - EXIT INT TERM
      log "restoring the machine's engine"
      bash "$repo/scripts/dev-engine.sh" system || rc=1
      exit "$rc"
    }
    trap restore EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bash "$repo/scripts/dev-engine.sh" 28
    ;;
  *)
    echo "usage: scripts/engine-tests.sh 28|system [TEST ARGS...]" >&2
    exit 2
    ;;
esac

engine="$(bash "$repo/scripts/dev-engine.sh" status)"
log "engine: $engine"
started=$(date +%s)
bash "$repo/scripts/test-bases.sh"
log "bases ready in $(( $(date +%s) - started )) s"
started=$(date +%s)
# The browser test runs once, on the machine's engine (tests/it/image_e2e/browser.rs).
export IMGCTL_E2E_BROWSER=0
# ... and the signed push of the 6.6 GB end-to-end image (minutes, and disk): the machine's
# engine runs it (tests/it/image_e2e/supply.rs).
export IMGCTL_E2E_SIGNED_PUSH=0
# ... and its Podman step (a 6.6 GB copy into Podman's storage, tests/it/image_e2e/podman.rs):
# Podman is the same on either Docker engine.
export IMGCTL_E2E_PODMAN=0
# The tests of Podman's own CDI path (tests/it/cdi/podman.rs) do not touch the Docker engine.
skip=()
[ "${#filters[@]}" -gt 0 ] && skip=(--skip cdi::podman::)
# --test it only: the unit tests and the rest of the suite do not touch the engine.
cargo test --test it -- "${filters[@]}" "${skip[@]}" "$@"
log "passed on $engine in $(( $(date +%s) - started )) s"
