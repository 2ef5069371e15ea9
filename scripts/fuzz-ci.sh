#!/usr/bin/env bash
# Bounded coverage-guided fuzzing for CI (`make test` runs it): builds the
# fuzz targets that need no libtorch with libFuzzer's coverage instrumentation
# (the flags cargo-fuzz passes, on the stable toolchain; no sanitizer, so the
# targets catch panics and aborts, not memory errors: the crate denies unsafe
# outside src/sys/) and runs each for FUZZ_SECONDS (default 20) over a
# scratch copy of its corpus and regressions. A crash fails the run; its input
# is kept under fuzz/artifacts/TARGET/ to be copied into fuzz/regressions/TARGET/
# (replayed by tests/it/fuzz_regressions.rs) once fixed.
#
# The torch targets (train_config, state_json) are replayed by the suite; run
# them by hand with `cargo fuzz run --features torch TARGET`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-20}"
targets=(spec_render lock_parse docker_config)
log() { printf 'fuzz: %s\n' "$*" >&2; }

export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
# An explicit --target keeps RUSTFLAGS off the build scripts (as cargo-fuzz does).
triple="$(rustc -vV | sed -n 's/^host: //p')"
started=$(date +%s)
cargo build --quiet --release --manifest-path "$repo/fuzz/Cargo.toml" --target-dir "$repo/fuzz/target" \
  --target "$triple" $(printf -- '--bin %s ' "${targets[@]}")
log "built ${targets[*]} in $(( $(date +%s) - started )) s"

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
  if "$repo/fuzz/target/$triple/release/$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
      -artifact_prefix="$repo/fuzz/artifacts/$t/" "$corpus" >"$out" 2>&1; then
    log "$t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$out" | tail -1), corpus $(ls "$corpus" | wc -l) inputs"
  else
    log "$t: FAILED; the input that broke it is under fuzz/artifacts/$t/:"
    tail -n 30 "$out" >&2
    failed=1
  fi
done
exit "$failed"
