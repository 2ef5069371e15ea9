#!/bin/sh
# imgctl-healthcheck: Docker's HEALTHCHECK for images built by imgctl.
#
# Probes exactly the services the entrypoint started, as listed in
# /run/imgctl/services: `jupyter` (GET /api on port 8888 must answer 200; the
# endpoint needs no token) and `sshd` (port 22 must greet with "SSH-"). No list
# (a passed-through command) or an empty one (IMGCTL_MODE=none) is healthy.
set -eu
list="${IMGCTL_RUN_DIR:-/run/imgctl}/services"
[ -s "$list" ] || exit 0
exec python3 - "$list" <<'PY'
import socket
import sys
import urllib.request

failed = []
for service in open(sys.argv[1]).read().split():
    try:
        if service == "jupyter":
            with urllib.request.urlopen("http://127.0.0.1:8888/api", timeout=3) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}")
        elif service == "sshd":
            with socket.create_connection(("127.0.0.1", 22), timeout=3) as s:
                if not s.recv(64).startswith(b"SSH-"):
                    raise OSError("no SSH greeting")
        else:
            raise OSError("unknown service")
        print(f"{service}: ok")
    except OSError as e:
        failed.append(service)
        print(f"{service}: {e}")
sys.exit(1 if failed else 0)
PY
