#!/usr/bin/env bash
# The GPU measurements the verify, train-demo and benchmark issues ask for, in
# one bounded run on a GPU machine (the device tool: one call, about 10 minutes,
# at most 8 files back). Each stage has its own deadline, cut to what is left
# of the whole budget ($DEVICE_CHECK_BUDGET_S, default 500 s, so the whole
# device call stays under 540 s); once less than
# 30 s is left, the remaining stages are skipped and say so. Everything lands in
# $OUT/results.tar.gz, with summary.tsv, the verify table and a sample grid
# beside it.
#
# Prepare here first (builds imgctl against the device's torch, fetches the
# diffusers wheels): scripts/prepare-device.sh
# Then, with the device tool: command "bash scripts/device-check.sh",
# carry [".devrun"], timeout_s 560. Stages can be named to run a subset:
#   bash scripts/device-check.sh verify_quick train_bf16
# Rehearse the orchestration on a CPU-only machine (tiny model, few steps):
#   DEVICE_CHECK_CPU=1 OUT=/tmp/dc bash scripts/device-check.sh
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
OUT="${OUT:?set OUT to the folder that comes back}"
budget="${DEVICE_CHECK_BUDGET_S:-500}"
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

  steps=6 bench_batch=2 bench_batches="2 4" expect=(--expect-gpus 0) train_precisions="fp32"
  profile_args=(--device cpu --warmup 1 --steps 1)
  op_steps=(--warmup 1 --steps 1) op_n=1
  default_run=(--steps 6)
  # Stages that take a step count of their own (50 on the GPU): a few here,
  # where bf16 runs unaccelerated and the CI machine's two cores are shared.
  dp_steps=6
  # The data-parallel path with one rank: CPU ranks here, NCCL on the device.
  dp=(env IMGCTL_CPU_RANKS=1 "$bin" train-demo --config "$work/small.yaml")
  # The lever sweep (issue 41): the fused GroupNorm is CUDA code.
  sweep_batch=2 sweep_steps=(--warmup 1 --steps 2)
  gpu_only="bench_fp16 sweep_cl_gn sweep_all"
else
  bin="${IMGCTL_BIN:-$repo/.devrun/imgctl}"
  torch_dir="$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')"
  export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ls .devrun/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target "$work/site" .devrun/wheels/*.whl
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export IMGCTL_PYTHON=python3
  model=()
  steps=300 bench_batch=64 bench_batches="64 128 256" expect=() train_precisions="fp32 fp16"
  profile_args=()
  op_steps=(--warmup 5 --steps 3) op_n=3
  default_run=()
  dp_steps=50
  dp=("$bin" train-demo --gpus 1)
  # The lever sweep (issue 41) at the first device run's best bf16 batch.
  sweep_batch="${SWEEP_BATCH:-256}" sweep_steps=(--warmup 8 --steps 30)
  gpu_only=""
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
  if grep -qw -- "$name" <<<"$gpu_only"; then
    printf '%s\tskipped\t0\tneeds a GPU (CPU rehearsal)\n' "$name" >>"$res/summary.tsv"
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
# --- The lever sweep (issue 41), first: it decides the defaults. ---
# One process per variant, bf16 at batch $sweep_batch; each row of
# sweep.tsv: img/s, step time, MFU, peak memory, the levers that passed
# their self-check (scripts/sweep_table.py).
sweep_bench() {
  local name=$1 note=$2
  shift 2
  stage "$name" 75 "issue 41 sweep: $note, bf16 batch $sweep_batch" -- \
    "$bin" train-demo --benchmark "${model[@]}" --precision bf16 --batch-size "$sweep_batch" \
    "${sweep_steps[@]}" "$@" --json
}
sweep_bench sweep_baseline "baseline (NCHW, ATen GroupNorm, loss read every step)" --read-every 1
sweep_bench sweep_cl "+ channels-last" --channels-last --read-every 1
sweep_bench sweep_cl_gn "+ fused GroupNorm (NVRTC, self-checked against ATen)" --channels-last --groupnorm fused --read-every 1
printf 'sweep_graphs\tskipped\t0\tnot built yet (issue 41 item 2: CUDA-graph capture)\n' >>"$res/summary.tsv"
sweep_bench sweep_all "all levers built (channels-last, fused GroupNorm, loss read every 10 steps)" --channels-last --groupnorm fused --read-every 10
stage sweep_ref 300 "issue 41 sweep: PyTorch eager with imgctl's recipe, eager with diffusers', torch.compile (each its own process), bf16 batch $sweep_batch" -- \
  env IMGCTL_REFERENCE_TIMEOUT=200 "$bin" train-demo --benchmark "${model[@]}" --precision bf16 \
  --batch-size "$sweep_batch" "${sweep_steps[@]}" --compare --json
stage sweep_table 20 "issue 41 sweep: the table (sweep.tsv)" -- \
  python3 scripts/sweep_table.py "$res"
[ -f "$res/sweep_table.out" ] && cp "$res/sweep_table.out" "$res/sweep.tsv"

stage verify_quick 60 "issue 4: NVML and library facts" -- \
  "$bin" verify "${expect[@]}" --json --junit "$res/verify-quick.xml"
stage verify_full 170 "issue 4: functional checks (matmul, bandwidths, NCCL)" -- \
  "$bin" verify --level full "${expect[@]}" --json --junit "$res/verify-full.xml"
stage verify_expect2 30 "issue 4: --expect-gpus 2 on one GPU must fail (exit 1)" -- \
  "$bin" verify --expect-gpus 2 --only nvml --json
# One node's fleet verify at the full level under real torchrun (its
# c10d rendezvous, as on a cluster): the node's figures against the SKU
# table's expected values, and the fleet's own checks around them.
stage fleet_full 120 "issue 25: verify --fleet --level full on one node under torchrun: the node's figures against the reference table, the fleet checks" -- \
  "$IMGCTL_PYTHON" -m torch.distributed.run --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d \
  --rdzv-endpoint 127.0.0.1:29531 --no-python "$bin" verify --fleet --level full "${expect[@]}" \
  --json --junit "$res/fleet-full.xml"
stage budget_device 40 "issue 17: a batch far beyond the GPU's free memory must exit 2 naming the GPU and the largest batch that fits" -- \
  "$bin" train-demo "${model[@]}" --precision bf16 --batch-size 20000000 --steps 1 --out "$work/budget"
stage train_bf16 150 "issue 5: default config, $steps steps in bf16: loss, img/s, torch's peak memory; issue 29: the GPU watch (summary gpus[]: mean utilisation, peak memory)" -- \
  "$bin" train-demo "${model[@]}" --precision bf16 --steps "$steps" --sample-every 150 \
  --checkpoint-every "$steps" --out "$work/train-bf16" --json
stage nccl_world1 150 "issue 6: train_bf16 again through NCCL with one rank (--gpus 1): same loss curve, watchdog events complete" -- \
  "${dp[@]}" --precision bf16 --steps "$steps" --sample-every 0 \
  --checkpoint-every "$steps" --out "$work/nccl1" --json
for p in $train_precisions; do
  stage "train_$p" 150 "issue 5: default config, $steps steps in $p: loss, img/s, torch's peak memory" -- \
    "$bin" train-demo "${model[@]}" --precision "$p" --steps "$steps" --sample-every 150 \
    --checkpoint-every "$steps" --out "$work/train-$p" --json
done
# The batch sweep (imgctl only), then the comparison at the best of them.
for b in $bench_batches; do
  stage "bench_bf16_b$b" 60 "issue 6: benchmark bf16 batch $b (imgctl only; the sweep)" -- \
    "$bin" train-demo --benchmark "${model[@]}" --precision bf16 --batch-size "$b" --json
done
best=$(python3 - "$res" $bench_batches <<'PY' 2>/dev/null || echo "$bench_batch"
import json, sys
res, batches = sys.argv[1], sys.argv[2:]
rates = {}
for b in batches:
    try:
        rates[b] = json.load(open(f"{res}/bench_bf16_b{b}.out"))["img_per_s"]
    except Exception:
        pass
print(max(rates, key=rates.get) if rates else batches[0])
PY
)
echo "device-check: best bf16 batch: $best" >&2
stage bench_bf16 240 "issue 6: benchmark bf16 at the sweep's best batch ($best) vs PyTorch eager (both recipes) and torch.compile" -- \
  env IMGCTL_REFERENCE_TIMEOUT=150 "$bin" train-demo --benchmark "${model[@]}" --precision bf16 \
  --batch-size "$best" --compare --json
stage bench_bf16_cl 60 "issue 6: the bf16 benchmark at batch $best in channels-last layout (decides the default)" -- \
  "$bin" train-demo --benchmark "${model[@]}" --precision bf16 --batch-size "$best" \
  --channels-last --json
stage bench_bf16_gc 90 "issue 15: the bf16 benchmark at batch $best with --gradient-checkpointing: allocator peak, per-image memory and throughput cost, off against on in the same run (checkpointing_comparison)" -- \
  "$bin" train-demo --benchmark "${model[@]}" --precision bf16 --batch-size "$best" \
  --gradient-checkpointing --json
# Where the step's time goes: imgctl's own step under libtorch's profiler, and
# diffusers' eager step (autocast bf16) under torch.profiler, summed alike.
stage trace_bf16 90 "issue 12: imgctl's bf16 step at batch $best, 3 steps under libtorch's profiler, summed by kernel kind" -- \
  bash -c 'IMGCTL_PROFILE_TRACE="$1" "$2" train-demo --benchmark "${@:4}" --precision bf16 --batch-size "$3" \
    --warmup 3 --steps 3 --json >/dev/null && "$IMGCTL_PYTHON" scripts/trace_summary.py "$1"' \
  _ "$res/trace-bf16.json" "$bin" "$best" "${model[@]}"
stage profile_ref 90 "issue 12: diffusers' eager bf16-autocast step at batch $best under torch.profiler, summed the same way" -- \
  "$IMGCTL_PYTHON" scripts/profile_step.py --unet-config "$work/train-bf16/unet/config.json" \
  --batch-size "$best" "${profile_args[@]}"
# What each step launches, operator by operator, against the reference with
# imgctl's recipe (the 0.72x of the first device run); the traces stay here.
stage op_profile_bf16 120 "issue 24: ATen operators and bytes a step, imgctl against PyTorch eager with imgctl's recipe, bf16 batch $best" -- \
  "$bin" train-demo --benchmark --op-profile "${model[@]}" --precision bf16 --batch-size "$best" \
  "${op_steps[@]}" --out "$work/op-profile" --json
stage op_profile_kernels 30 "issue 24: the op profile's two traces summed by kernel kind, imgctl's then the reference's" -- \
  bash -c 'for t in imgctl reference; do echo "== $t"; "$IMGCTL_PYTHON" scripts/trace_summary.py "$1/$t.trace.json" --steps "$2" || exit 1; done' \
  _ "$work/op-profile" "$op_n"
stage bench_fp32 150 "issue 6: benchmark fp32 batch $best vs PyTorch (compile capped at 60 s)" -- \
  env IMGCTL_REFERENCE_TIMEOUT=60 "$bin" train-demo --benchmark "${model[@]}" --precision fp32 \
  --batch-size "$best" --compare --json
stage bench_fp16 60 "issue 6: benchmark fp16 (autocast + loss scaling) batch $best" -- \
  "$bin" train-demo --benchmark "${model[@]}" --precision fp16 --batch-size "$best" --json
stage train_default_run 180 "issue 15: the default preset's whole default run (bf16): do its samples show the data? (end line: sample statistics vs the data's)" -- \
  "$bin" train-demo "${model[@]}" --precision bf16 "${default_run[@]}" --out "$work/train-default" --json
# Last, as the budget allows: the data-parallel path's own cost at one rank.
stage nccl_world1_off 90 "issue 6: nccl_world1 with --overlap-grad-reduce off, $dp_steps steps" -- \
  "${dp[@]}" --precision bf16 --steps "$dp_steps" --sample-every 0 --out "$work/nccl1-off" \
  --overlap-grad-reduce off --json
stage bench_nccl1 90 "issue 6: bf16 benchmark through NCCL with one rank, overlapped (cost of the DP path)" -- \
  "${dp[@]}" --benchmark --precision bf16 --batch-size "$best" --json

# What comes back: the summary, the verify table, one sample grid, and all of it packed.
for d in "$work"/nccl1 "$work"/nccl1-off; do
  [ -f "$d/metrics.jsonl" ] && cp "$d/metrics.jsonl" "$res/$(basename "$d")-metrics.jsonl"
done
for d in "$work"/train-bf16 "$work"/train-fp32 "$work"/train-fp16 "$work"/train-default; do
  g=$(ls "$d"/samples/*.png 2>/dev/null | tail -n 1)
  [ -n "$g" ] && cp "$g" "$res/$(basename "$d")-$(basename "$g")"
  [ -f "$d/metrics.jsonl" ] && cp "$d/metrics.jsonl" "$res/$(basename "$d")-metrics.jsonl"
done
tar -C "$(dirname "$res")" -czf "$OUT/results.tar.gz" results
cp "$res/summary.tsv" "$OUT/"
[ -f "$res/sweep.tsv" ] && cp "$res/sweep.tsv" "$OUT/"
[ -f "$res/verify_full.err" ] && cp "$res/verify_full.err" "$OUT/verify-full-table.txt"
[ -f "$res/fleet_full.err" ] && cp "$res/fleet_full.err" "$OUT/fleet-full-table.txt"
g=$(ls "$res"/train-bf16-*.png 2>/dev/null | tail -n 1)
[ -n "$g" ] && cp "$g" "$OUT/sample-bf16.png"
cat "$res/summary.tsv"
[ -f "$res/sweep.tsv" ] && column -t -s $'\t' "$res/sweep.tsv" 2>/dev/null
echo "device-check: $(($(date +%s) - start)) s; results in $OUT" >&2
