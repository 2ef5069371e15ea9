#!/usr/bin/env bash
# The GPU measurements the verify, train-demo and benchmark issues ask for, in
# one bounded run on a GPU machine (the device tool: one call, about 10 minutes,
# at most 8 files back). Each stage has its own deadline, cut to what is left
# of the whole budget ($DEVICE_CHECK_BUDGET_S, default 520 s); once less than
# 30 s is left, the remaining stages are skipped and say so. Everything lands in
# $OUT/results.tar.gz, with summary.tsv, the verify table and a sample grid
# beside it.
#
# Prepare here first (builds imgctl against the device's torch, fetches the
# diffusers wheels): scripts/prepare-device.sh
# Then, with the device tool: command "bash scripts/device-check.sh",
# carry [".devrun"], timeout_s 590. Stages can be named to run a subset:
#   bash scripts/device-check.sh verify_quick train_bf16
# Rehearse the orchestration on a CPU-only machine (tiny model, few steps):
#   DEVICE_CHECK_CPU=1 OUT=/tmp/dc bash scripts/device-check.sh
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:?set OUT to the folder that comes back}"
budget="${DEVICE_CHECK_BUDGET_S:-520}"
cpu="${DEVICE_CHECK_CPU:-0}"
start=$(date +%s)
res="$(mktemp -d)/results"
work="$(mktemp -d)"
mkdir -p "$res" "$OUT"
printf 'stage\texit\tseconds\tnote\n' >"$res/summary.tsv"

if [ "$cpu" = 1 ]; then
  bin="${IMGCTL_BIN:-$repo/target/debug/imgctl}"
  export IMGCTL_PYTHON="${IMGCTL_PYTHON:-$repo/.venv/bin/python}" OMP_NUM_THREADS=1
  printf 'preset: tiny\nmodel:\n  sample_size: 16\ntraining:\n  workers: 1\n  synthetic_images: 64\n' >"$work/small.yaml"
  model=(--config "$work/small.yaml" --device cpu)
  gpu_model=(--config "$work/small.yaml")
  steps=6 bench_batch=2 expect=(--expect-gpus 0) train_precisions="fp32 bf16"
else
  bin="${IMGCTL_BIN:-$repo/.devrun/imgctl}"
  torch_dir="$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')"
  export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ls .devrun/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target "$work/site" .devrun/wheels/*.whl
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export IMGCTL_PYTHON=python3
  model=() gpu_model=(--preset tiny)
  steps=300 bench_batch=64 expect=() train_precisions="bf16 fp32"
fi
[ -x "$bin" ] || { echo "device-check: no imgctl at $bin (run scripts/prepare-device.sh)" >&2; exit 2; }

# stage NAME SECONDS NOTE -- COMMAND...: runs COMMAND with a deadline; stdout to
# NAME.out, stderr to NAME.err; skipped when the budget left is smaller.
stage() {
  local name=$1 limit=$2 note=$3
  shift 4
  if [ "$#" -eq 0 ] || { [ -n "${only:-}" ] && ! grep -qw -- "$name" <<<"$only"; }; then
    return 0
  fi
  local left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 30 ]; then
    printf '%s\tskipped\t0\tonly %ss of the budget left\n' "$name" "$left" >>"$res/summary.tsv"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "== $name (<= ${limit}s): $*" >&2
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >"$res/$name.out" 2>"$res/$name.err"
  rc=$?
  printf '%s\t%s\t%.1f\t%s\n' "$name" "$rc" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$note" >>"$res/summary.tsv"
  tail -n 3 "$res/$name.err" >&2
}
only="$*"

stage facts 60 "what the machine's own tools say, to check verify against" -- bash -c '
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,ecc.mode.current,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,temperature.gpu,power.draw,power.limit --format=csv 2>&1
  nvidia-smi -q -d PERFORMANCE,ECC,PAGE_RETIREMENT 2>&1 | head -n 80
  python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"cudnn\", torch.backends.cudnn.version(), \"nccl\", torch.cuda.nccl.version() if torch.cuda.is_available() else None, \"arch\", torch.cuda.get_arch_list())" 2>&1
  env | grep -E "^(TORCH_ALLOW|NVIDIA_|CUDA_VISIBLE)" ; '"$bin"' --version
  ldd '"$bin"' | grep -E "not found|torch|cuda|nccl" 2>&1; true'
stage verify_quick 60 "issue 4: NVML and library facts" -- \
  "$bin" verify "${expect[@]}" --json --junit "$res/verify-quick.xml"
stage verify_full 170 "issue 4: functional checks (matmul, bandwidths, NCCL)" -- \
  "$bin" verify --level full "${expect[@]}" --json --junit "$res/verify-full.xml"
stage verify_expect2 30 "issue 4: --expect-gpus 2 on one GPU must fail (exit 1)" -- \
  "$bin" verify --expect-gpus 2 --only nvml --json
for p in $train_precisions; do
  stage "train_$p" 150 "issue 5: default config, $steps steps in $p: img/s, device memory" -- \
    "$bin" train-demo "${model[@]}" --precision "$p" --steps "$steps" --sample-every 150 \
    --checkpoint-every "$steps" --out "$work/train-$p" --json
done
stage nccl_world1 90 "issue 6: --gpus 1, the NCCL path with one rank (all-reduce overlapped on its own stream)" -- \
  "$bin" train-demo "${gpu_model[@]}" --gpus 1 --steps 20 --sample-every 0 --out "$work/nccl1" --json
stage bench_bf16 260 "issue 6: benchmark bf16 batch $bench_batch vs PyTorch eager and compile" -- \
  env IMGCTL_REFERENCE_TIMEOUT=150 "$bin" train-demo --benchmark "${model[@]}" --precision bf16 \
  --batch-size "$bench_batch" --compare --json
stage bench_bf16_cl 90 "issue 6: the bf16 benchmark in channels-last layout (decides the default)" -- \
  "$bin" train-demo --benchmark "${model[@]}" --precision bf16 --batch-size "$bench_batch" \
  --channels-last --json
stage bench_fp32 150 "issue 6: benchmark fp32 batch $bench_batch vs PyTorch (compile capped at 60 s)" -- \
  env IMGCTL_REFERENCE_TIMEOUT=60 "$bin" train-demo --benchmark "${model[@]}" --precision fp32 \
  --batch-size "$bench_batch" --compare --json
stage train_fp16 90 "issue 5: fp16 autocast with loss scaling, 50 steps" -- \
  "$bin" train-demo "${model[@]}" --precision fp16 --steps 50 --sample-every 0 --out "$work/train-fp16" --json
stage bench_fp16 90 "issue 6: benchmark fp16 (autocast + loss scaling) batch $bench_batch" -- \
  "$bin" train-demo --benchmark "${model[@]}" --precision fp16 --batch-size "$bench_batch" --json
# Last, as the budget allows: the data-parallel path's own cost at one rank.
stage nccl_world1_off 60 "issue 6: nccl_world1 with --overlap-grad-reduce off (its loss curve against nccl_world1's)" -- \
  "$bin" train-demo "${gpu_model[@]}" --gpus 1 --steps 20 --sample-every 0 --out "$work/nccl1-off" \
  --overlap-grad-reduce off --json
stage bench_nccl1 90 "issue 6: bf16 benchmark through NCCL with one rank, overlapped (cost of the DP path)" -- \
  "$bin" train-demo --benchmark "${model[@]}" --gpus 1 --precision bf16 --batch-size "$bench_batch" --json

# What comes back: the summary, the verify table, one sample grid, and all of it packed.
for d in "$work"/nccl1 "$work"/nccl1-off; do
  [ -f "$d/metrics.jsonl" ] && cp "$d/metrics.jsonl" "$res/$(basename "$d")-metrics.jsonl"
done
for d in "$work"/train-bf16 "$work"/train-fp32; do
  g=$(ls "$d"/samples/*.png 2>/dev/null | tail -n 1)
  [ -n "$g" ] && cp "$g" "$res/$(basename "$d")-$(basename "$g")"
  [ -f "$d/metrics.jsonl" ] && cp "$d/metrics.jsonl" "$res/$(basename "$d")-metrics.jsonl"
done
tar -C "$(dirname "$res")" -czf "$OUT/results.tar.gz" results
cp "$res/summary.tsv" "$OUT/"
[ -f "$res/verify_full.err" ] && cp "$res/verify_full.err" "$OUT/verify-full-table.txt"
g=$(ls "$res"/train-bf16-*.png 2>/dev/null | tail -n 1)
[ -n "$g" ] && cp "$g" "$OUT/sample-bf16.png"
cat "$res/summary.tsv"
echo "device-check: $(($(date +%s) - start)) s; results in $OUT" >&2
