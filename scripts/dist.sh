#!/usr/bin/env bash
# `make dist`: the release tarballs, one per architecture, in dist/:
#
#   imgctl-VERSION-ARCH-unknown-linux-musl.tar.gz  (and dist/SHA256SUMS over them)
#
# Each holds imgctl (the front end, linked statically against musl: no libtorch,
# no glibc), on x86_64 imgctl-torch (the full build for torch 2.7.0, which
# `imgctl build` puts into its images; linked against glibc and, at run time,
# the torch 2.7.0 it finds under RUNPATH), the man pages and shell completions,
# LICENSE, a CycloneDX SBOM of the crates in each binary, install.sh and
# SHA256SUMS.
#
#   scripts/dist.sh [--profile release|dev] [--arch "x86_64 aarch64"] [--out DIR]
#
# The static front end is built with Debian's rustc-web and its std sources
# (rust-web-src: -Zbuild-std), since rustup's musl std is not installable here;
# both architectures link with zig cc (PyPI's ziglang), which brings musl.
# `scripts/setup.sh dist` installs all of them. `--profile dev` makes the same
# tarballs from unoptimised builds, in a fraction of the time (the stranger test
# in `make test` uses it); imgctl-torch then is target/debug/imgctl.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cache="${IMGCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imgctl}"
profile=release arches="x86_64 aarch64" out="$repo/dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --arch) arches=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "dist: unknown argument '$1' (--profile release|dev, --arch LIST, --out DIR)" >&2; exit 2 ;;
  esac
done
case "$profile" in release|dev) ;; *) echo "dist: --profile is release or dev, not '$profile'" >&2; exit 2 ;; esac
log() { printf 'dist: %s\n' "$*" >&2; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
profile_dir=$([ "$profile" = dev ] && echo debug || echo release)

for tool in /usr/bin/rustc /usr/bin/cargo; do
  command -v "$tool" >/dev/null || { log "error: $tool is missing: run scripts/setup.sh dist"; exit 1; }
done
[ -d /usr/lib/rustlib/src/rust/library ] || { log "error: no std sources (rust-web-src): run scripts/setup.sh dist"; exit 1; }

# The static front end for one architecture: target/dist/TRIPLE/PROFILE/imgctl.
# zig cc links both (musl's crt and libc, and LLVM's libunwind, which std's
# unwinder needs: gcc's own libgcc_eh calls glibc's _dl_find_object).
front() {
  local arch=$1 triple="$1-unknown-linux-musl"
  local tools="$repo/target/dist/tools-$arch" zig_py="$cache/venv-dist/bin/python"
  case "$arch" in x86_64|aarch64) ;; *) log "error: no recipe for the architecture '$arch' (x86_64, aarch64)"; exit 2 ;; esac
  [ -x "$zig_py" ] || { log "error: no ziglang in $cache/venv-dist: run scripts/setup.sh dist"; exit 1; }
  mkdir -p "$tools"
  # cc-rs adds --target=<Rust triple>, which zig does not read: dropped.
  cat >"$tools/zig-cc" <<EOS
#!/bin/sh
# zig cc for $arch-linux-musl (scripts/dist.sh)
for a do shift; case "\$a" in --target=*) ;; *) set -- "\$@" "\$a" ;; esac; done
exec "$zig_py" -m ziglang cc -target $arch-linux-musl "\$@"
EOS
  printf '#!/bin/sh\nexec "%s" -m ziglang ar "$@"\n' "$zig_py" >"$tools/zig-ar"
  chmod +x "$tools/zig-cc" "$tools/zig-ar"
  local upper; upper=$(echo "$triple" | tr 'a-z-' 'A-Z_')
  local lower; lower=$(echo "$triple" | tr '-' '_')
  log "building the static front end for $triple ($profile)"
  env "CARGO_TARGET_${upper}_LINKER=$tools/zig-cc" "CC_${lower}=$tools/zig-cc" "AR_${lower}=$tools/zig-ar" \
    RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
    RUSTFLAGS="-C link-self-contained=no" CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=false \
    /usr/bin/cargo build --quiet --profile "$profile" --no-default-features \
    -Zbuild-std=std,panic_abort --target "$triple" --target-dir target/dist
}

# The full build (x86_64): imgctl with the torch feature, as the images get it.
full() {
  if [ "$profile" = release ]; then
    log "building the full imgctl (release)"
    cargo build --quiet --release
  else
    # As `cargo test` builds it (dev-dependencies' features unified): a plain
    # `cargo build` would relink target/debug/imgctl differently, under a
    # test run that put that binary into an image.
    cargo test --quiet --no-run
  fi
}

mkdir -p "$out"
rm -f "$out/SHA256SUMS"
for arch in $arches; do
  triple="$arch-unknown-linux-musl"
  front "$arch"
  name="imgctl-$version-$triple"
  stage="$out/$name"
  rm -rf "$stage" "$out/$name.tar.gz"
  mkdir -p "$stage/man" "$stage/completions"
  cp "target/dist/$triple/$profile_dir/imgctl" "$stage/imgctl"
  cargo metadata --quiet --format-version 1 --no-default-features --filter-platform "$triple" >"$stage/.meta.json"
  python3 scripts/crates_sbom.py "$stage/.meta.json" imgctl "$version" >"$stage/imgctl.cdx.json"
  if [ "$arch" = x86_64 ]; then
    # IMGCTL_DIST_TORCH: a full imgctl already built (a test's own binary), so
    # that no build runs under a test that uses target/debug/imgctl.
    if [ -n "${IMGCTL_DIST_TORCH:-}" ]; then
      cp "$IMGCTL_DIST_TORCH" "$stage/imgctl-torch"
    else
      full
      cp "target/$profile_dir/imgctl" "$stage/imgctl-torch"
    fi
    cargo metadata --quiet --format-version 1 --filter-platform x86_64-unknown-linux-gnu >"$stage/.meta.json"
    python3 scripts/crates_sbom.py "$stage/.meta.json" imgctl-torch "$version" >"$stage/imgctl-torch.cdx.json"
  fi
  rm -f "$stage/.meta.json"
  # Pages and completions: from the x86_64 front end, which runs here (the same text on every arch).
  gen="target/dist/x86_64-unknown-linux-musl/$profile_dir/imgctl"
  [ -x "$gen" ] || front x86_64
  "$gen" man --out-dir "$stage/man" 2>/dev/null
  "$gen" completions bash >"$stage/completions/imgctl.bash"
  "$gen" completions zsh >"$stage/completions/_imgctl"
  "$gen" completions fish >"$stage/completions/imgctl.fish"
  cp LICENSE "$stage/LICENSE"
  cp scripts/install.sh "$stage/install.sh"
  chmod 755 "$stage/install.sh" "$stage/imgctl"
  (cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
  # Reproducible: fixed order, owner and times (SOURCE_DATE_EPOCH, else the last commit's).
  epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$out" -cf - "$name" | gzip -n >"$out/$name.tar.gz"
  (cd "$out" && sha256sum "$name.tar.gz" >>SHA256SUMS)
  log "$out/$name.tar.gz: $(du -h "$out/$name.tar.gz" | cut -f1) (imgctl $(du -h "$stage/imgctl" | cut -f1))"
done
