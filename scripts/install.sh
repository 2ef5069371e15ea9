#!/bin/sh
# Installs imgctl from this unpacked release folder, without root:
#
#   ./install.sh                      # into ~/.local (bin/, share/man/, completions)
#   PREFIX=/usr/local ./install.sh    # elsewhere (run it as a user who may write there)
#   ./install.sh --dry-run            # say what would be installed, change nothing
#
# It first checks every file against SHA256SUMS beside it and installs nothing
# when one differs or is missing. It downloads nothing and runs nothing it did
# not find in this folder.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-$HOME/.local}
dry=0
for a in "$@"; do
  case "$a" in
    --dry-run|-n) dry=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$a' (--dry-run, or PREFIX=DIR in the environment)" >&2; exit 2 ;;
  esac
done
say() { printf 'install.sh: %s\n' "$*" >&2; }

# 1. The sums: every file listed must be here and match.
[ -f "$here/SHA256SUMS" ] || { say "error: no SHA256SUMS beside install.sh in $here: unpack the whole tarball and run it again"; exit 1; }
if ! (cd "$here" && sha256sum --check --quiet --strict SHA256SUMS) >&2; then
  say "error: a file differs from SHA256SUMS (above): the download is damaged or was changed; download the tarball again"
  exit 1
fi
say "every file matches SHA256SUMS"

# 2. What goes where.
plan() {
  echo "$here/imgctl $prefix/bin/imgctl 755"
  [ -f "$here/imgctl-torch" ] && echo "$here/imgctl-torch $prefix/bin/imgctl-torch 755"
  for page in "$here"/man/*.1; do [ -f "$page" ] && echo "$page $prefix/share/man/man1/$(basename "$page") 644"; done
  [ -f "$here/completions/imgctl.bash" ] && echo "$here/completions/imgctl.bash $prefix/share/bash-completion/completions/imgctl 644"
  [ -f "$here/completions/_imgctl" ] && echo "$here/completions/_imgctl $prefix/share/zsh/site-functions/_imgctl 644"
  [ -f "$here/completions/imgctl.fish" ] && echo "$here/completions/imgctl.fish $prefix/share/fish/vendor_completions.d/imgctl.fish 644"
  return 0
}
if [ "$dry" = 1 ]; then
  plan | while read -r from to mode; do echo "would install $to (mode $mode)"; done
  exit 0
fi
plan | while read -r from to mode; do
  mkdir -p "$(dirname "$to")"
  # Into a temporary name beside the target, then renamed: a running imgctl
  # keeps its old file, and an interrupted install leaves no half binary.
  tmp="$to.install-$$"
  cp "$from" "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$to"
done
say "installed imgctl $("$prefix/bin/imgctl" --version 2>/dev/null | sed 's/^imgctl //') into $prefix/bin"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) say "note: $prefix/bin is not on your PATH; add it: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
if [ -f "$prefix/bin/imgctl-torch" ]; then
  say "imgctl-torch (the full build, for torch 2.7.0) is beside it: imgctl build puts it into the images it makes"
fi
