#!/usr/bin/env bash
# One prepared pass over imgctl's GPU-only paths on a device machine (one
# NVIDIA H200, python3 with torch 2.11.0+cu130, no Rust, no network), most
# valuable first, each step under its own timeout and all of them under one
# budget, so a single `run` call returns something useful even when a step
# hangs. Everything lands in OUTDIR as at most 8 files (the device tool's
# limit): smoke.log (each step's command, exit code, seconds and stderr) and
# one JSON document per step that prints one.
#
# Build on the x86-64 host first, against the device's torch release, and
# copy the binary into a git-ignored folder that the run carries:
#   cp "$(scripts/build-for-device.sh 2.11.0)" .devbin/imgctl
# On the device:  scripts/gpu-smoke.sh .devbin/imgctl "$OUT"
# SMOKE_BUDGET (seconds, default 480) bounds the whole pass.
set -uo pipefail
bin=$(realpath "${1:?usage: scripts/gpu-smoke.sh IMGCTL_BINARY [OUTDIR]}")
out=${2:-${OUT:-/tmp/imgctl-gpu-smoke}}
budget=${SMOKE_BUDGET:-480}
mkdir -p "$out"
log="$out/smoke.log"
: >"$log"
work=$(mktemp -d)
# The binary links libtorch by soname; take the image's own torch.
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$SECONDS

# step NAME SECONDS CMD…: runs CMD with at most SECONDS (less when the budget
# is nearly spent); stdout goes to $out/NAME.json when NAME ends in .json.
step() {
  local name=$1 secs=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  if ((left < 15)); then
    echo "=== $name: skipped, budget of ${budget}s spent" | tee -a "$log"
    return
  fi
  ((secs > left)) && secs=$left
  local dest=/dev/null
  [[ $name == *.json ]] && dest="$out/$name"
  echo "=== $name (timeout ${secs}s): $*" >>"$log"
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@" >"$dest" 2>>"$log"
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$log"
}

# 0. Facts: the driver, torch's own view, and whether the binary resolves.
step facts 30 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv;
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_arch_list())';
  ldd '$bin' | grep -E 'not found|torch|cudart' ; '$bin' --version"
# 1. verify, quick: NVML on a real driver, torch facts, library provenance.
step verify-quick.json 60 "$bin" verify --level quick --json
# 2. verify, full: matmuls, bandwidths, the NCCL all-reduce (issue: ≤ ~2 min).
step verify-full.json 150 "$bin" verify --level full --json
# 3. The benchmark at the default config in bf16: img/s, peak memory, MFU.
step bench-bf16.json 90 "$bin" train-demo --benchmark --precision bf16 --json
# 4. --gpus 1: supervisor, worker exec with CUDA_VISIBLE_DEVICES, cudaSetDevice
#    through the mapped libcudart.so.13, NCCL set-up and the bucketed all-reduce.
step gpus1 60 "$bin" train-demo --gpus 1 --preset tiny --steps 20 --out "$work/gpus1"
# 5. fp32 (TF32 convolutions) and fp16 (autocast + loss scaling) benchmarks.
step bench-fp32.json 90 "$bin" train-demo --benchmark --precision fp32 --json
step bench-fp16.json 60 "$bin" train-demo --benchmark --precision fp16 --json
# 6. A short real run: checkpoints, samples on the GPU, the summary.
step train-bf16 90 "$bin" train-demo --steps 100 --precision bf16 --out "$work/train"
# 7. imgctl against the PyTorch reference (eager, then torch.compile), when
#    python3 can import diffusers (not in the device image: carry the pure-Python
#    wheel, e.g. `pip download --no-deps diffusers==0.33.1`, and add the folder
#    it is unpacked in to PYTHONPATH).
if python3 -c 'import diffusers' 2>/dev/null; then
  step compare-bf16.json 180 "$bin" train-demo --benchmark --compare --precision bf16 --json
else
  echo "=== compare-bf16.json: skipped, python3 cannot import diffusers" | tee -a "$log"
fi
echo "=== total $((SECONDS - start))s of ${budget}s" | tee -a "$log"
