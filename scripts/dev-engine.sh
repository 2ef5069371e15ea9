#!/usr/bin/env bash
# Swap the Docker engine answering on /var/run/docker.sock, to test imgctl against
# another engine version on this machine. `make test` (so CI) runs the suite on
# whatever engine the machine runs (scripts/setup.sh starts one when none answers),
# then scripts/engine-tests.sh swaps 28 in through this script for the engine tests.
#
#   scripts/dev-engine.sh 28       stop the running dockerd; start Debian's docker.io
#                                  28.x (from unstable, else testing; unpacked under the
#                                  cache, not installed) with its own data root
#                                  /var/lib/docker-28
#   scripts/dev-engine.sh system   stop it; start the machine's /usr/sbin/dockerd again
#   scripts/dev-engine.sh status   which engine answers
#
# Debian's docker.io 28 needs glibc >= 2.34 and containerd >= 1.4 (bookworm has 2.36
# and 1.6): only dockerd and docker-proxy come from the package; containerd, runc and
# docker-init are the machine's. Each engine keeps its own images and build cache:
# /var/lib/docker-28 grew to 48 GB over one session of image tests and cache
# benchmarks; remove it (`rm -rf /var/lib/docker-28`, engine stopped) before CI needs
# the disk.
# Environment: IMGCTL_CACHE (default ~/.cache/imgctl), DEBIAN_MIRROR.
set -euo pipefail

CACHE="${IMGCTL_CACHE:-$HOME/.cache/imgctl}/engines"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SOCK=/var/run/docker.sock
log() { echo "dev-engine: $*" >&2; }

answers() { curl -sf --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1; }
version() {
  curl -sf --max-time 5 --unix-socket "$SOCK" http://localhost/version |
    python3 -c 'import json,sys; v=json.load(sys.stdin); print("Docker %s (API %s)" % (v["Version"], v["ApiVersion"]))'
}

stop_running() {
  local pids
  pids=$(pgrep -x dockerd || true)
  [ -z "$pids" ] && return 0
  log "stopping dockerd (pid $pids)"
  kill $pids
  for _ in $(seq 1 60); do pgrep -x dockerd >/dev/null || break; sleep 0.5; done
  if pgrep -x dockerd >/dev/null; then log "error: dockerd did not stop within 30 s"; exit 1; fi
  # dockerd's own containerd goes with it; wait for the socket to be free.
  for _ in $(seq 1 20); do pgrep -f 'containerd --config /var/run/docker' >/dev/null || break; sleep 0.5; done
}

wait_answer() {
  for _ in $(seq 1 60); do answers && { log "answering: $(version)"; return 0; }; sleep 1; done
  log "error: the engine did not answer within 60 s; see $1"
  exit 1
}

fetch_28() {
  local dir="$CACHE/docker.io-28"
  if [ -x "$dir/usr/sbin/dockerd" ]; then echo "$dir"; return; fi
  mkdir -p "$CACHE"
  # unstable first, then testing: when unstable moves on to 29, testing keeps 28 a while.
  local file="" suite index
  for suite in unstable testing; do
    index="$CACHE/$suite-Packages.xz"
    log "reading $MIRROR $suite's package index"
    curl -sf --max-time 120 "$MIRROR/dists/$suite/main/binary-amd64/Packages.xz" -o "$index" || continue
    # awk stops at the first match: xz's SIGPIPE is no failure.
    file=$(xz -dc "$index" | awk '/^Package: docker.io$/{p=1} p&&/^Filename:/{print $2; exit}' || true)
    case "$file" in *docker.io_28.*) break ;; *) log "$suite's docker.io is not 28.x: ${file:-none}"; file="" ;; esac
  done
  [ -n "$file" ] || { log "error: neither unstable nor testing has a docker.io 28.x"; exit 1; }
  log "downloading $file"
  curl -sf --max-time 600 "$MIRROR/$file" -o "$CACHE/docker.io-28.deb"
  rm -rf "$dir.tmp" && dpkg-deb -x "$CACHE/docker.io-28.deb" "$dir.tmp" && mv "$dir.tmp" "$dir"
  echo "$dir"
}

case "${1:-status}" in
  28)
    dir=$(fetch_28)
    stop_running
    # The machine's daemon.json (storage driver, MTU, log options) with our own data root.
    conf="$CACHE/daemon-28.json"
    python3 - /etc/docker/daemon.json "$conf" <<'PY'
import json, os, sys
src, dst = sys.argv[1:]
conf = json.load(open(src)) if os.path.exists(src) else {}
conf["data-root"] = "/var/lib/docker-28"
# CDI (tests/it/cdi.rs): before Docker 28.3 only with the `cdi` feature on; its spec
# folders are /etc/cdi and /var/run/cdi.
conf.setdefault("features", {})["cdi"] = True
json.dump(conf, open(dst, "w"))
PY
    log "starting $("$dir/usr/sbin/dockerd" --version) (log: /var/log/dockerd-28.log)"
    setsid nohup "$dir/usr/sbin/dockerd" --config-file "$conf" --exec-root /var/run/docker-28 \
      --pidfile /var/run/docker-28.pid --userland-proxy-path "$dir/usr/sbin/docker-proxy" \
      -H "unix://$SOCK" >/var/log/dockerd-28.log 2>&1 </dev/null &
    wait_answer /var/log/dockerd-28.log
    ;;
  system)
    stop_running
    log "starting /usr/sbin/dockerd (log: /var/log/imgctl-dockerd.log)"
    setsid nohup /usr/sbin/dockerd >/var/log/imgctl-dockerd.log 2>&1 </dev/null &
    wait_answer /var/log/imgctl-dockerd.log
    ;;
  status)
    if answers; then version; else echo "no engine answers on $SOCK"; exit 1; fi
    ;;
  *)
    echo "usage: scripts/dev-engine.sh 28|system|status" >&2
    exit 2
    ;;
esac
