#!/usr/bin/env bash
# Builds imgctl against another torch release's libtorch, for a GPU machine
# whose python3 carries that torch (e.g. a device with torch 2.11.0+cu130 and
# no Rust). Only the headers and libraries of the PyPI wheel are used; CUDA
# libraries missing here are resolved on the target (--allow-shlib-undefined).
# On the target: export LD_LIBRARY_PATH=$(python3 -c 'import os,torch;print(os.path.dirname(torch.__file__))')/lib
#
# Usage: scripts/build-for-device.sh [TORCH_VERSION]   (default 2.11.0)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-2.11.0}"
dir="${IMGCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgctl}/libtorch-$version"
if [ ! -d "$dir/torch/lib" ]; then
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps "torch==$version" -d "$dir"
  unzip -q -o "$dir"/torch-"$version"-*.whl 'torch/include/*' 'torch/lib/*' -d "$dir"
fi
cd "$repo"
LIBTORCH="$dir/torch" LIBTORCH_BYPASS_VERSION_CHECK=1 \
  CARGO_TARGET_DIR="$repo/target/torch-$version" \
  RUSTFLAGS="-C link-arg=-Wl,--allow-shlib-undefined" \
  cargo build --release --bin imgctl >&2
echo "$repo/target/torch-$version/release/imgctl"
