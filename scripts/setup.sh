#!/usr/bin/env bash
# Idempotent set-up for imgctl development, tests and CI.
#
# - installs torch==2.7.0 (and the Python test dependencies) into a virtual
#   environment in a cache directory outside the repository, reused when present;
# - points the repository's stable `.libtorch` symlink at that torch, so that
#   plain `cargo build|test|run` find libtorch through `.cargo/config.toml`;
# - installs and starts a Docker engine when none answers;
# - installs the host tools the tests use (debootstrap, busybox-static, ssh, podman).
#
# Environment: IMGCTL_CACHE (default ~/.cache/imgctl), IMGCTL_SKIP_DOCKER=1.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${IMGCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgctl}"
# Pinned: torch 2.7.0 is the release tch 0.20.0 binds (tch's README).
torch_version="2.7.0"
venv="$cache/venv-torch-$torch_version"
log() { printf 'setup: %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- host tools ------------------------------------------------------------
# docker-registry + apache2-utils (htpasswd): the `--push` test runs a local registry with auth.
# openssl: tests/it/tls_registry.rs makes the test CA and certificates, and tests/it/signing.rs checks
#   imgctl's keys and raw signatures with it (ca-certificates pulls it in; named all the same).
# skopeo: tests/it/https.rs reads an image imgctl pushed over HTTPS with a client nobody here wrote.
# python3-pip: the host's pip (`imgctl lock` resolves with the venv's uv, from requirements-test.txt).
# g++: torch-sys's C++ wrapper and our csrc/torch_ext.cpp are compiled at build time.
# iproute2: tests/it/multinode.rs makes its "nodes" with `ip netns` and veth pairs.
# procps: tests/it/buildkit.rs watches a cancelled step's process with pgrep.
# xz-utils: scripts/dev-engine.sh reads Debian's package index (engine-tests.sh 28 in make test).
# bsdutils: script(1) gives tests/it/cli.rs a pseudo-terminal (messages wrapped to its width).
# slurmctld slurmd slurm-client munge: tests/it/slurm.rs runs a real SLURM cluster (22.05 in
#   bookworm) on its network namespaces; it starts the daemons itself, with its own config,
#   ports and munge socket (the packages' services are never started: no init runs them here).
# chromium chromium-driver: tests/it/image_e2e/browser.rs opens JupyterLab and TensorBoard in a
#   real headless browser (driven by Selenium, from requirements-test.txt).
# iptables: tests/it/multinode/silent.rs drops a node's packets where the kernel has no netem
#   (Debian's docker.io pulls it in too; named so the suite does not lean on that).
# podman crun runc catatonit uidmap slirp4netns fuse-overlayfs: tests/it/podman.rs starts its own
#   `podman system service` (Debian's Podman 4.3; the packages' podman.socket unit is not used,
#   no init runs it here); runc because crun refuses hybrid cgroup hierarchies; uidmap,
#   slirp4netns and fuse-overlayfs are what Podman needs rootless.
apt_install ca-certificates openssl g++ debootstrap busybox-static openssh-client curl binutils python3-venv python3-pip docker-registry apache2-utils skopeo iproute2 procps bsdutils xz-utils slurmctld slurmd slurm-client munge chromium chromium-driver iptables \
  podman crun runc catatonit uidmap slirp4netns fuse-overlayfs

# --- rootless Podman's test user ------------------------------------------
# tests/it/podman/rootless.rs runs `podman system service` as this user: it needs subordinate
# uids and gids (newuidmap/newgidmap from uidmap), and slirp4netns needs /dev/net/tun, which a
# stock Debian makes 0666 (some VMs make it 0600; rootless networking then fails).
rootless_user=imgctl-rootless
if ! id "$rootless_user" >/dev/null 2>&1; then
  log "adding the user $rootless_user (rootless Podman tests)"
  as_root useradd --create-home --shell /usr/sbin/nologin "$rootless_user"
fi
if ! grep -q "^$rootless_user:" /etc/subuid || ! grep -q "^$rootless_user:" /etc/subgid; then
  as_root usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$rootless_user"
fi
if [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
  as_root chmod 0666 /dev/net/tun
fi
# The user's storage is overlay, not vfs: vfs stores every layer whole, so the end-to-end image
# (6.6 GB; tests/it/image_e2e/podman.rs loads it rootless) would cost many times that. Linux
# 5.13+ mounts overlay inside a user namespace itself; an older kernel needs fuse-overlayfs, and
# so /dev/fuse open to the user (some machines make it 0600). A storage first made with vfs
# keeps it (libpod's database pins the driver), so it is started over.
rootless_home=$(getent passwd "$rootless_user" | cut -d: -f6)
rootless_conf="$rootless_home/.config/containers/storage.conf"
kernel=$(uname -r | cut -d- -f1)
if [ "$(printf '%s\n5.13\n' "$kernel" | sort -V | head -1)" = 5.13 ]; then
  storage='[storage]\ndriver = "overlay"\n'
else
  storage='[storage]\ndriver = "overlay"\n[storage.options.overlay]\nmount_program = "/usr/bin/fuse-overlayfs"\n'
  if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then as_root chmod 0666 /dev/fuse; fi
fi
if [ "$(cat "$rootless_conf" 2>/dev/null)" != "$(printf "$storage")" ]; then
  log "rootless Podman's storage: overlay ($rootless_conf)"
  as_root mkdir -p "$(dirname "$rootless_conf")"
  printf "$storage" | as_root tee "$rootless_conf" >/dev/null
  as_root chown -R "$rootless_user:" "$rootless_home/.config"
fi
rootless_run=$(mktemp -d)
as_root chown "$rootless_user:" "$rootless_run"
rootless_driver() {
  as_root setpriv --reuid="$rootless_user" --regid="$(id -g "$rootless_user")" --init-groups \
    env HOME="$rootless_home" XDG_RUNTIME_DIR="$rootless_run" \
    podman info --format '{{.Store.GraphDriverName}}' 2>"$rootless_run.err" || true
}
if [ "$(rootless_driver)" != overlay ]; then
  log "rootless Podman's storage was not overlay: starting it over"
  as_root rm -rf "$rootless_home/.local/share/containers"
  if [ "$(rootless_driver)" != overlay ]; then
    echo "setup: rootless Podman cannot use overlay storage: $(tail -1 "$rootless_run.err")" >&2
    exit 1
  fi
fi
as_root rm -rf "$rootless_run" "$rootless_run.err"

# --- Python environment with torch 2.7.0 -----------------------------------
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
  log "creating $venv (torch==$torch_version, about 5 GB)"
  mkdir -p "$cache"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "torch==$torch_version"
fi
# Test dependencies: pinned to the image spec's versions where they overlap.
# Installed again whenever requirements-test.txt changes (its hash is stamped).
req="$repo/scripts/requirements-test.txt"
stamp="$venv/.imgctl-requirements.sha256"
if ! "$venv/bin/python" -c "import diffusers, safetensors, tensorboard, PIL" 2>/dev/null \
  || [ ! -x "$venv/bin/uv" ] \
  || [ "$(sha256sum <"$req")" != "$(cat "$stamp" 2>/dev/null)" ]; then
  log "installing Python test dependencies"
  "$venv/bin/pip" install -q -r "$req"
  sha256sum <"$req" >"$stamp"
fi

# NVRTC 13 (what torch 2.11+cu130 ships on the device machine): the CI test
# tests/it/kernels.rs compiles imgctl's CUDA kernels for sm_80, sm_90 and
# sm_100, and the torch 2.7 wheel's NVRTC 12.6 stops at sm_90. No GPU needed.
nvrtc_version="13.0.88"
nvrtc_dir="$cache/nvrtc-$nvrtc_version"
if [ ! -f "$nvrtc_dir/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  log "installing nvidia-cuda-nvrtc==$nvrtc_version into $nvrtc_dir"
  "$venv/bin/pip" install -q --no-deps --target "$nvrtc_dir" "nvidia-cuda-nvrtc==$nvrtc_version"
fi
ln -sfn "$nvrtc_dir/nvidia/cu13/lib" "$repo/.nvrtc"

# Stable symlink: .cargo/config.toml sets LIBTORCH=.libtorch (relative = true).
torch_dir="$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
ln -sfn "$torch_dir" "$repo/.libtorch"
ln -sfn "$venv" "$repo/.venv"
log "libtorch: $torch_dir"

# --- Docker engine ----------------------------------------------------------
docker_answers() {
  if command -v docker >/dev/null 2>&1; then docker version --format '{{.Server.Version}}' >/dev/null 2>&1; else
    curl -sf --unix-socket /var/run/docker.sock http://localhost/_ping >/dev/null 2>&1; fi
}
if [ "${IMGCTL_SKIP_DOCKER:-0}" != 1 ] && ! docker_answers; then
  if ! command -v dockerd >/dev/null 2>&1; then apt_install docker.io; fi
  log "starting dockerd in the background (log: /var/log/imgctl-dockerd.log)"
  as_root bash -c 'setsid nohup dockerd >/var/log/imgctl-dockerd.log 2>&1 < /dev/null &'
  for _ in $(seq 1 60); do docker_answers && break; sleep 1; done
  docker_answers || { log "error: dockerd did not answer within 60 s; see /var/log/imgctl-dockerd.log"; exit 1; }
fi
# make test's peak disk (README, "Developing imgctl"): said up front, so that
# a run that will run out says so before it starts, not 20 minutes in.
free=$(df -Pk "$repo" | awk 'NR==2 {print int($4/1048576)}')
if [ "$free" -lt 40 ]; then
  log "warning: ${free} GB free on this disk; a whole make test takes up to about 40 GB (test images, target/, the Docker 28 engine, the fuzzing; see the README)"
fi
log "ready"
