#!/usr/bin/env bash
# Stages what scripts/device-check.sh needs on a GPU machine that has no Rust
# and no network, in .devrun/ (ignored by git through .git/info/exclude):
#   .devrun/imgctl        built against that machine's torch (build-for-device.sh)
#   .devrun/wheels/*.whl  diffusers and the huggingface_hub it was released
#                         with, for the PyTorch reference of --compare
# Usage: scripts/prepare-device.sh [TORCH_VERSION]   (default 2.11.0)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-2.11.0}"
cd "$repo"
grep -qx '/.devrun/' .git/info/exclude 2>/dev/null || echo '/.devrun/' >>.git/info/exclude
bin="$(scripts/build-for-device.sh "$version")"
mkdir -p .devrun/wheels
cp "$bin" .devrun/imgctl
strip .devrun/imgctl
# The versions scripts/requirements-test.txt pins for the reference here; the
# device's own huggingface_hub (1.x) is newer than diffusers 0.33 supports.
diffusers="$(grep -E '^diffusers==' scripts/requirements-test.txt)"
python3 -m pip download -q --no-deps --only-binary=:all: -d .devrun/wheels \
  "$diffusers" "huggingface_hub==0.30.2"
du -sh .devrun >&2
echo "device: run command 'bash scripts/device-check.sh', carry ['.devrun'], timeout_s 590" >&2
