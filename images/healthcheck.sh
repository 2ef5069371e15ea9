#!/bin/sh
# imgctl-healthcheck: Docker's HEALTHCHECK for images built by imgctl.
#
# Probes exactly the services the entrypoint started, as listed in
# /run/imgctl/services (/tmp/imgctl-UID/services in a non-root container): `jupyter` (GET /api on port 8888 must answer 200; the
# endpoint needs no token), `tensorboard` (GET /data/environment on port 6006,
# IMGCTL_TENSORBOARD_PORT) and `sshd` (a socket must LISTEN on port 22, read
# from /proc/net/tcp{,6}: connecting would make sshd log an aborted handshake
# every few seconds). No list (a passed-through command) or an empty one
# (IMGCTL_MODE=none) is healthy. IMGCTL_JUPYTER_PORT and IMGCTL_SSH_PORT
# override the ports.
set -eu
# The entrypoint's state folder, chosen by the same rule as imgctl-entrypoint's.
if [ -n "${IMGCTL_RUN_DIR:-}" ]; then
    run_dir=$IMGCTL_RUN_DIR
elif [ "$(id -u)" = 0 ]; then
    run_dir=/run/imgctl
else
    run_dir="${TMPDIR:-/tmp}/imgctl-$(id -u)"
fi
list="$run_dir/services"
[ -s "$list" ] || exit 0
# Docker runs this as the container's user in the WORKDIR, /workspace, which
# the image's user owns. Started as root (--user 0), Python must import
# nothing from there: `-I` (isolated: no script or working folder on
# sys.path, no PYTHON* variables, no user site) from /, root's own folder.
cd /
exec python3 -I - "$list" <<'PY'
import os
import sys
import urllib.request


def listening(port):
    """Whether a TCP socket listens on `port` (state 0A is TCP_LISTEN)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for row in f:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


failed = []
for service in open(sys.argv[1]).read().split():
    try:
        if service == "jupyter":
            port = os.environ.get("IMGCTL_JUPYTER_PORT", "8888")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=3) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}")
        elif service == "tensorboard":
            port = os.environ.get("IMGCTL_TENSORBOARD_PORT", "6006")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/environment", timeout=3) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}")
        elif service == "sshd":
            port = int(os.environ.get("IMGCTL_SSH_PORT", "22"))
            if not listening(port):
                raise OSError(f"nothing listens on port {port}")
        else:
            raise OSError("unknown service")
        print(f"{service}: ok")
    except OSError as e:
        failed.append(service)
        print(f"{service}: {e}")
sys.exit(1 if failed else 0)
PY
