#!/usr/bin/env bash
# Stages what scripts/device-check.sh needs on a GPU machine that has no Rust
# and no network, in .devrun/ (ignored by git through .git/info/exclude):
#   .devrun/imgctl        built against that machine's torch (build-for-device.sh)
#   .devrun/wheels/*.whl  diffusers, for the PyTorch reference of --compare
#                         and scripts/profile_step.py
# Usage: scripts/prepare-device.sh [TORCH_VERSION]   (default 2.11.0)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-2.11.0}"
cd "$repo"
grep -qx '/.devrun/' .git/info/exclude 2>/dev/null || echo '/.devrun/' >>.git/info/exclude
bin="$(scripts/build-for-device.sh "$version")"
mkdir -p .devrun
cp "$bin" .devrun/imgctl
strip .devrun/imgctl
# diffusers for the PyTorch reference there. Not the version this repo's venv
# pins (0.33.1 with huggingface_hub 0.30.2): the device's own transformers 5.x
# needs its huggingface_hub 1.x, and diffusers 0.33 imports transformers when
# it is installed, so a carried hub 0.30 broke the reference's import there
# (measured 2026-11-30). diffusers 0.42.1 runs on the device's hub (>= 1.32)
# and safetensors (>= 0.8), so it travels alone.
rm -rf .devrun/wheels && mkdir -p .devrun/wheels
python3 -m pip download -q --no-deps --only-binary=:all: -d .devrun/wheels "diffusers==0.42.1"
du -sh .devrun >&2
echo "device: run command 'bash scripts/device-check.sh', carry ['.devrun'], timeout_s 560" >&2
