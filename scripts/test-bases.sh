#!/usr/bin/env bash
# Creates the local base images the build tests use, since no registry is
# reachable from the test machines (issue 2, "Tests"; issue 3, "End-to-end"):
#
#   imgctl-test/busybox:latest   FROM scratch + Debian's busybox-static, with a
#                                symlink per applet (what `busybox --install -s`
#                                makes) and a minimal /etc/passwd; a few MB.
#   imgctl-test/debian:bookworm  `debootstrap --variant=minbase bookworm` from the
#                                Debian mirror, imported with `docker import`.
#
# Idempotent: an image that already exists is kept (so the engine's layer cache
# built on it stays valid between runs). The Debian root filesystem is kept as a
# tarball in the cache ($IMGCTL_CACHE/bases/, about 120 MB), so a second engine
# (scripts/engine-tests.sh) imports it in seconds instead of a second
# debootstrap; delete the tarball for a fresh one. Usage: test-bases.sh [busybox|debian]...
# (default: both). Needs root (debootstrap) or sudo, and a Docker engine.
# Environment: IMGCTL_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

log() { printf 'test-bases: %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# The CLI here may be newer than the engine (Docker 20.10 speaks API 1.41).
export DOCKER_API_VERSION="${DOCKER_API_VERSION:-1.41}"

busybox_image="imgctl-test/busybox:latest"
debian_image="imgctl-test/debian:bookworm"
mirror="${IMGCTL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
bases_cache="${IMGCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgctl}/bases"
debian_tar="$bases_cache/debian-bookworm-minbase.tar"

exists() { docker image inspect "$1" >/dev/null 2>&1; }

# One process at a time: tests running in parallel may all call this script.
lock="${TMPDIR:-/tmp}/imgctl-test-bases.lock"
exec 9>"$lock"
flock 9

# The busybox base's layout version: an older image on the engine is made
# again (2: /dev, /proc and /sys exist, so a RUN step's layer holds no mount
# point that the runtime made with the time of the build).
busybox_layout=2
make_busybox() {
  if [ "$(docker image inspect --format '{{ index .Config.Labels "io.imgctl.test-base.layout" }}' "$busybox_image" 2>/dev/null)" = "$busybox_layout" ]; then
    log "$busybox_image exists"
    return 0
  fi
  # Debian's busybox-static installs /bin/busybox; a static binary has no
  # program interpreter (PT_INTERP), which readelf (binutils) shows.
  local bb=/bin/busybox
  if [ ! -x "$bb" ] || readelf -l "$bb" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    log "error: no static busybox at $bb (apt-get install busybox-static)"
    exit 1
  fi
  local dir
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' RETURN
  mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home,workspace,dev,proc,sys}
  chmod 1777 "$dir/tmp"
  cp "$bb" "$dir/bin/busybox"
  # What `busybox --install -s` does, without running it on the host's /bin.
  for applet in $("$bb" --list-full); do
    [ "$applet" = bin/busybox ] && continue
    ln -sf /bin/busybox "$dir/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$dir/etc/passwd"
  printf 'root:x:0:\n' >"$dir/etc/group"
  log "importing $busybox_image"
  tar -C "$dir" --numeric-owner --owner=0 --group=0 -c . |
    docker import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL io.imgctl.test-base.layout=$busybox_layout" - "$busybox_image" >/dev/null
}

import_debian() {
  docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$debian_image" >/dev/null
}

make_debian() {
  if exists "$debian_image"; then log "$debian_image exists"; return 0; fi
  if [ -s "$debian_tar" ]; then
    log "importing $debian_image from $debian_tar"
    import_debian <"$debian_tar"
    return 0
  fi
  command -v debootstrap >/dev/null || { log "error: debootstrap missing (apt-get install debootstrap)"; exit 1; }
  local dir
  dir="$(mktemp -d)"
  trap 'as_root rm -rf "$dir"' RETURN
  log "debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
  as_root debootstrap --variant=minbase bookworm "$dir/root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
    tail -n 20 "$dir/debootstrap.log" >&2
    log "error: debootstrap failed"
    exit 1
  }
  # Keep the image small: the package cache and lists are refetched by apt-get update.
  as_root rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
  log "importing $debian_image (root filesystem kept as $debian_tar)"
  mkdir -p "$bases_cache"
  as_root tar -C "$dir/root" --numeric-owner -c . >"$debian_tar.tmp.$$"
  mv "$debian_tar.tmp.$$" "$debian_tar"
  import_debian <"$debian_tar"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(busybox debian)
for t in "${targets[@]}"; do
  case "$t" in
    busybox) make_busybox ;;
    debian) make_debian ;;
    *) log "error: unknown base '$t' (busybox or debian)"; exit 2 ;;
  esac
done
