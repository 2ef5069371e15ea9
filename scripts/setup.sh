#!/usr/bin/env bash
# Idempotent set-up for imgctl: installs only what the chosen target needs.
#
#   scripts/setup.sh TARGET [--dry-run]
#
# TARGET (each includes the ones above it):
#   front  the front end (`make install`): a Rust toolchain and a C compiler; nothing else
#   full   + torch==2.7.0 in a venv in the cache, outside the repository (`make install-full`),
#          and the repository's `.libtorch` / `.venv` links that `.cargo/config.toml` reads
#   image  + a Docker engine, installed and started only when none answers (`make image`)
#   test   + the test world (`make test`): SLURM, Chromium, Podman and its rootless user,
#          the registry, skopeo, debootstrap, iptables, NVRTC 13, the Python test packages,
#          and dist's tool chain (the stranger test installs a release tarball)
#   dist   full + the release tool chain (`make dist`): Debian's rustc-web, cargo-web and
#          rust-web-src (std for the static musl targets), qemu-user-static (the aarch64
#          check), and ziglang from PyPI (zig cc: the linker, with musl, for both arches)
# (no TARGET: test, as before)
#
# It first prints what it will install and change on this machine (packages not yet
# installed, users, services, files, disk); --dry-run prints only that, and changes nothing.
# docs/getting-started.md has the same plan as a table per target; tests/it/setup_plan.rs
# holds the two equal.
#
# Environment: IMGCTL_CACHE (default ~/.cache/imgctl), IMGCTL_SKIP_DOCKER=1.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${IMGCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgctl}"
# Pinned: torch 2.7.0 is the release tch 0.20.0 binds (tch's README).
torch_version="2.7.0"
venv="$cache/venv-torch-$torch_version"
log() { printf 'setup: %s\n' "$*" >&2; }

target=test dry=0
for a in "$@"; do
  case "$a" in
    front|full|image|test|dist) target=$a ;;
    --dry-run|-n) dry=1 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument '$a' (targets: front, full, image, test, dist; --dry-run)" >&2; exit 2 ;;
  esac
done
# Which parts the target includes.
want() {
  case "$1" in
    front) return 0 ;;
    full) [[ $target =~ ^(full|image|test|dist)$ ]] ;;
    image) [[ $target =~ ^(image|test)$ ]] ;;
    test) [ "$target" = test ] ;;
    dist) [[ $target =~ ^(dist|test)$ ]] ;;
  esac
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- the plan: every package, user, service and file each target installs ----
# One list per part; the plan printed below and tests/it/setup_plan.rs read them.
pkgs_front="gcc libc6-dev ca-certificates"
pkgs_full="g++ python3-venv python3-pip"
pkgs_image="docker.io"
pkgs_test="openssl debootstrap busybox-static openssh-client curl binutils docker-registry apache2-utils skopeo iproute2 procps bsdutils xz-utils slurmctld slurmd slurm-client munge chromium chromium-driver iptables podman crun runc catatonit uidmap slirp4netns fuse-overlayfs"
pkgs_dist="rustc-web cargo-web rust-web-src qemu-user-static"
rootless_user=imgctl-rootless

missing() { local out=(); for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || out+=("$p"); done; echo "${out[*]:-none}"; }
plan() {
  local pk=() ; want front && pk+=($pkgs_front); want full && pk+=($pkgs_full)
  want test && pk+=($pkgs_test); want dist && pk+=($pkgs_dist)
  echo "imgctl set-up, target '$target': on this machine it will"
  echo "  check:    a Rust toolchain (cargo) is on PATH (install it with rustup; nothing is installed for it)"
  echo "  packages: ${pk[*]} (Debian; missing now: $(missing "${pk[@]}"))"
  if want image; then
    echo "  packages: $pkgs_image, only when no Docker engine answers"
    echo "  service:  dockerd, started in the background, only when no Docker engine answers"
  fi
  if want full; then
    echo "  python:   torch==$torch_version in the venv $venv (about 5 GB)"
    echo "  files:    links .libtorch and .venv in $repo"
  fi
  if want test; then
    echo "  user:     $rootless_user (system user with subordinate ids 200000-265535; rootless Podman tests)"
    echo "  files:    $rootless_user's ~/.config/containers/storage.conf (overlay), /dev/net/tun made 0666"
    echo "  python:   the test packages of scripts/requirements-test.txt into the same venv"
    echo "  python:   nvidia-cuda-nvrtc==13.0.88 into $cache/nvrtc-13.0.88; link .nvrtc in $repo"
    echo "  disk:     up to about 40 GB free for a whole make test"
  fi
  if want dist; then
    echo "  python:   ziglang in the venv $cache/venv-dist (zig cc, the static linker)"
  fi
  return 0
}
plan
[ "$dry" = 1 ] && exit 0

command -v cargo >/dev/null 2>&1 || { log "error: no cargo on PATH: install a Rust toolchain first (https://rustup.rs), then run this again"; exit 1; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install $pkgs_front
want full && apt_install $pkgs_full
want dist && apt_install $pkgs_dist

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
if want test; then
apt_install $pkgs_test

# --- rootless Podman's test user ------------------------------------------
# tests/it/podman/rootless.rs runs `podman system service` as this user: it needs subordinate
# uids and gids (newuidmap/newgidmap from uidmap), and slirp4netns needs /dev/net/tun, which a
# stock Debian makes 0666 (some VMs make it 0600; rootless networking then fails).
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
fi # want test

# --- Python environment with torch 2.7.0 -----------------------------------
if want full; then
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
  log "creating $venv (torch==$torch_version, about 5 GB)"
  mkdir -p "$cache"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "torch==$torch_version"
fi
fi # want full
if want test; then
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
fi # want test

# Stable symlink: .cargo/config.toml sets LIBTORCH=.libtorch (relative = true).
if want full; then
torch_dir="$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
ln -sfn "$torch_dir" "$repo/.libtorch"
ln -sfn "$venv" "$repo/.venv"
log "libtorch: $torch_dir"
fi # want full

# --- the release tool chain ------------------------------------------------
if want dist; then
  dist_venv="$cache/venv-dist"
  if [ ! -x "$dist_venv/bin/python" ] || ! "$dist_venv/bin/python" -c "import ziglang" 2>/dev/null; then
    log "installing ziglang into $dist_venv"
    python3 -m venv "$dist_venv"
    "$dist_venv/bin/pip" install -q ziglang
  fi
fi

# --- Docker engine ----------------------------------------------------------
docker_answers() {
  if command -v docker >/dev/null 2>&1; then docker version --format '{{.Server.Version}}' >/dev/null 2>&1; else
    curl -sf --unix-socket /var/run/docker.sock http://localhost/_ping >/dev/null 2>&1; fi
}
if want image && [ "${IMGCTL_SKIP_DOCKER:-0}" != 1 ] && ! docker_answers; then
  if ! command -v dockerd >/dev/null 2>&1; then apt_install docker.io; fi
  log "starting dockerd in the background (log: /var/log/imgctl-dockerd.log)"
  as_root bash -c 'setsid nohup dockerd >/var/log/imgctl-dockerd.log 2>&1 < /dev/null &'
  for _ in $(seq 1 60); do docker_answers && break; sleep 1; done
  docker_answers || { log "error: dockerd did not answer within 60 s; see /var/log/imgctl-dockerd.log"; exit 1; }
fi
# make test's peak disk (README, "Developing imgctl"): said up front, so that
# a run that will run out says so before it starts, not 20 minutes in.
free=$(df -Pk "$repo" | awk 'NR==2 {print int($4/1048576)}')
if want test && [ "$free" -lt 40 ]; then
  log "warning: ${free} GB free on this disk; a whole make test takes up to about 40 GB (test images, target/, the Docker 28 engine, the fuzzing; see the README)"
fi
log "ready"
