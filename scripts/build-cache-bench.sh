#!/usr/bin/env bash
# On-demand benchmark of `imgctl build`'s cache, per builder, on the Debian
# test base (scripts/test-bases.sh): a cold build, a rebuild after one small
# pip pin changed (diffusers; the spec's lock regenerated with `imgctl lock`,
# timed apart), and a rebuild after nothing changed. The goals
# (build issue): one-pin rebuild within 60 s with BuildKit (torch's wheels not
# fetched again: its layer is cached and pip's cache mount holds the rest),
# unchanged rebuild within 10 s with both builders.
#
# The BuildKit builds take the proxy CA as a build secret
# (--ca-cert-secret); afterwards the script checks that no layer and no
# `docker history` line holds it.
#
# Usage: scripts/build-cache-bench.sh [classic|buildkit ...]   (default: both)
# Env: IMGCTL (default target/debug/imgctl), CA (default: the host bundle).
# Cold BuildKit builds prune the engine's BuildKit cache (`docker builder
# prune -af`: cache only, no image is removed). Needs network for apt and pip.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
imgctl="${IMGCTL:-$repo/target/debug/imgctl}"
# A copy: a rebuilt imgctl meanwhile would change the image's last layer.
bin_copy="$(mktemp -d)"
cp "$imgctl" "$bin_copy/imgctl"
imgctl="$bin_copy/imgctl"
ca="${CA:-/etc/ssl/certs/ca-certificates.crt}"
builders=("$@")
[ ${#builders[@]} -gt 0 ] || builders=(classic buildkit)
base=imgctl-test/debian:bookworm
bash "$repo/scripts/test-bases.sh" >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work" "$bin_copy"' EXIT
# The bundled cu124 spec, locked next to itself (spec.lock), as a user would.
sed -e 's/^name: cu124$/name: cache-bench/' "$repo/images/cu124.yaml" > "$work/spec.yaml"
export IMGCTL_VENV="${IMGCTL_VENV:-$repo/.venv}"   # where `imgctl lock` finds uv
relock() {
  local t0 t1
  t0=$(date +%s.%N)
  "$imgctl" -q lock --spec "$work/spec.yaml" >/dev/null 2>"$work/lock.log" || { cat "$work/lock.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  printf '%-9s %-22s %7.1f s\n' "$builder" "imgctl lock" "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1")"
}
# The proxy's own CAs, for the no-trace check (the system bundle's other CAs
# are in the image anyway, through Debian's ca-certificates).
proxy_ca="$work/proxy-ca.crt"
cat /usr/local/share/ca-certificates/*.crt > "$proxy_ca" 2>/dev/null || cp "$ca" "$proxy_ca"
marker="$(sed -n 2p "$proxy_ca")"

timed() { # label, then the imgctl build arguments
  local label="$1"; shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$imgctl" -q build --spec "$work/spec.yaml" --base-image "$base" "$@" >"$work/out.json" 2>"$work/err.log"; then
    echo "build failed ($label):" >&2; tail -30 "$work/err.log" >&2; exit 1
  fi
  t1=$(date +%s.%N)
  printf '%-9s %-22s %7.1f s   image %s, %s of %s steps cached\n' "$builder" "$label" \
    "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1")" \
    "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["image_id"][7:19])' "$work/out.json")" \
    "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["steps"]["cached"])' "$work/out.json")" \
    "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["steps"]["total"])' "$work/out.json")"
  # Where a rebuild's time went: each step that ran, with its seconds.
  [ "$label" = "cold (--no-cache)" ] || python3 - "$work/out.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["steps"]["detail"]:
    if not s["cached"] and not s["instruction"].startswith("FROM"):
        print("            step %2d %6.1f s  %s" % (s["n"], s["seconds"], s["instruction"][:70]))
PY
}

echo "engine: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null)"
for builder in "${builders[@]}"; do
  tag="imgctl-bench/cache:$builder"
  sed -i -e 's/diffusers==.*/diffusers==0.33.1/' "$work/spec.yaml"
  relock
  if [ "$builder" = buildkit ]; then
    docker builder prune -af >/dev/null 2>&1   # the CLI without buildx warns on stderr
    cafl=(--ca-cert-secret "$ca")
  else
    cafl=(--ca-cert "$ca")
  fi
  common=(--builder "$builder" "${cafl[@]}" --json -t "$tag")
  timed "cold (--no-cache)" --no-cache "${common[@]}"
  sed -i -e 's/diffusers==.*/diffusers==0.32.2/' "$work/spec.yaml"
  relock
  timed "one pin changed" "${common[@]}"
  timed "nothing changed" "${common[@]}"
  if [ "$builder" = buildkit ]; then
    if docker history --no-trunc "$tag" | grep -qF -- "$marker"; then echo "TRACE: the CA is in docker history" >&2; exit 1; fi
    cid="$(docker create "$tag")"
    hits="$(docker export "$cid" | tar -xO 2>/dev/null | grep -cF -- "$marker" || true)"
    docker rm -f "$cid" >/dev/null
    echo "buildkit  --ca-cert-secret: proxy CA lines found in the image's files: $hits; in docker history: 0"
    [ "$hits" = 0 ] || exit 1
  fi
  docker rmi -f "$tag" >/dev/null
done
