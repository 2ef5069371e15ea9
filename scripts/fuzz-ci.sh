#!/usr/bin/env bash
# Bounded coverage-guided fuzzing for CI (`make test` runs it): builds every
# fuzz target with libFuzzer's coverage instrumentation (the flags cargo-fuzz
# passes, on the stable toolchain; no sanitizer, so the targets catch panics
# and aborts, not memory errors: the crate denies unsafe outside src/sys/)
# and runs each for FUZZ_SECONDS (default 12) over a scratch copy of its
# corpus and regressions. A crash fails the run; its input is kept under
# fuzz/artifacts/TARGET/ to be copied into fuzz/regressions/TARGET/
# (replayed by tests/it/fuzz_regressions.rs) once fixed.
#
# One build in the dev profile, with imgctl's torch feature: the torch
# targets (a training config built into a model, a checkpoint's state.json,
# a weights file) link libtorch, and an optimised build of tch and torch-sys
# alone took 14 min 49 s on a 2-core machine, against a few minutes here.
# Debug assertions stay on, so an arithmetic overflow is a crash too.
# Environment: FUZZ_SECONDS, FUZZ_TARGETS (a space-separated subset).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-12}"
read -r -a targets <<<"${FUZZ_TARGETS:-spec_render lock_parse docker_config docker_context oci_index oci_manifest train_config state_json weights_file wire_messages policy_yaml referrer_bundle}"
log() { printf 'fuzz: %s\n' "$*" >&2; }

export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
# No incremental state: it is most of a dev build's disk and only helps a
# rebuild after an edit, which CI never does (cargo fuzz builds the same way).
export CARGO_INCREMENTAL=0
# An explicit --target keeps RUSTFLAGS off the build scripts (as cargo-fuzz does).
triple="$(rustc -vV | sed -n 's/^host: //p')"
started=$(date +%s)
cargo build --quiet --features torch --manifest-path "$repo/fuzz/Cargo.toml" --target-dir "$repo/fuzz/target" \
  --target "$triple" $(printf -- '--bin %s ' "${targets[@]}")
log "built ${targets[*]} in $(( $(date +%s) - started )) s"
# The torch targets find libtorch where setup.sh points .libtorch.
export LD_LIBRARY_PATH="$repo/.libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=0
for t in "${targets[@]}"; do
  corpus="$scratch/$t"
  mkdir -p "$corpus" "$repo/fuzz/artifacts/$t"
  for src in "$repo/fuzz/corpus/$t" "$repo/fuzz/regressions/$t"; do
    [ -d "$src" ] && cp -r "$src/." "$corpus/"
  done
  out="$scratch/$t.log"
  if "$repo/fuzz/target/$triple/debug/$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
      -artifact_prefix="$repo/fuzz/artifacts/$t/" "$corpus" >"$out" 2>&1; then
    log "$t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$out" | tail -1), corpus $(ls "$corpus" | wc -l) inputs"
  else
    log "$t: FAILED; the input that broke it is under fuzz/artifacts/$t/:"
    tail -n 30 "$out" >&2
    failed=1
  fi
done
exit "$failed"
