#!/bin/sh
# imgctl-entrypoint: the entrypoint of images built by imgctl.
#
# PID 1 is tini (ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/imgctl-entrypoint"]),
# which reaps zombies and forwards signals to this script.
#
#   docker run IMAGE                  start the services named by IMGCTL_MODE
#   docker run IMAGE python train.py  run that command as the image's user, nothing else
#
# Environment:
#   IMGCTL_MODE           jupyter | ssh | both | none (default both)
#   JUPYTER_TOKEN         JupyterLab's token; generated and printed once when unset.
#                         Set but empty, or shorter than 16 characters, is refused:
#                         JupyterLab never runs without a token that resists guessing.
#   JUPYTER_PASSWORD      optional password (in addition to the token); never empty.
#   SSH_AUTHORIZED_KEYS   public keys for the user, one per line. Also read:
#                         /etc/imgctl/authorized_keys and ~USER/.ssh/authorized_keys
#                         (mount either). No key: sshd is not started, and the log says why.
#   IMGCTL_USER           the user services and commands run as (the image sets it);
#                         read only when the container starts as root (said once otherwise);
#                         as root, a name that is no user of the image is refused.
#   IMGCTL_JUPYTER_PORT   JupyterLab's port (default 8888).
#   IMGCTL_TENSORBOARD    1: also serve TensorBoard over the workspace (--logdir
#                         /workspace; default 0). It has no login of its own:
#                         publish its port on 127.0.0.1 only (imgctl up does).
#   IMGCTL_TENSORBOARD_PORT  TensorBoard's port (default 6006).
#   IMGCTL_IDLE_STOP      a duration (30m, 1h; at least 5s): stop the container once
#                         it has been idle that long: no notebook kernel busy and no
#                         JupyterLab activity, no SSH session, every GPU below 5 %
#                         (`imgctl idle-watch` looks; imgctl up --idle-stop sets it).
#                         The container exits 0 and stays, for imgctl up to start again.
#   IMGCTL_SSH_PORT       sshd's port (default 22; Docker lets a non-root process
#                         bind it, Kubernetes may not: use 2222 there).
#   IMGCTL_HOME_DIR       the user's home (default: from the user database).
#   IMGCTL_USER_VENV      the user's venv (default ~/.venv; empty: none), made at start
#                         over the image's /opt/venv: pip installs there without root.
#   IMGCTL_SSH_HOST_KEY   sshd's host key (default /etc/imgctl/ssh_host_ed25519_key,
#                         where imgctl up places the one it keeps per workstation
#                         name); absent: a new one is made at the container's first start.
#   IMGCTL_ENTRYPOINT_CHECK_ONLY=1  validate the settings, print the plan, start nothing.
#
# Everything is validated before anything starts; bad settings exit 2 with one
# line naming the problem. `docker stop` (SIGTERM) stops every service within a
# few seconds (they get SIGTERM, then SIGKILL after STOP_GRACE seconds).
set -eu

PROG=imgctl-entrypoint
IMGCTL_USER="${IMGCTL_USER:-dev}"
# The entrypoint's state (the services list the healthcheck probes, the keys
# sshd reads). /run/imgctl is root's and only root writes there: a folder the
# image's user could write would let them point a symlink at any file root
# then writes (that was a path to root). A non-root container (--user, or
# Kubernetes' runAsNonRoot) keeps its state in a folder of its own uid under
# /tmp instead; imgctl-healthcheck computes the same path.
if [ -n "${IMGCTL_RUN_DIR:-}" ]; then
    RUN_DIR=$IMGCTL_RUN_DIR
elif [ "$(id -u)" = 0 ]; then
    RUN_DIR=/run/imgctl
else
    RUN_DIR="${TMPDIR:-/tmp}/imgctl-$(id -u)"
fi
SSHD_CONFIG="${IMGCTL_SSHD_CONFIG:-/etc/imgctl/sshd_config}"
HOST_KEY="${IMGCTL_SSH_HOST_KEY:-/etc/imgctl/ssh_host_ed25519_key}"
MOUNTED_KEYS="${IMGCTL_AUTHORIZED_KEYS_FILE:-/etc/imgctl/authorized_keys}"
JUPYTER_PORT="${IMGCTL_JUPYTER_PORT:-8888}"
SSH_PORT="${IMGCTL_SSH_PORT:-22}"
WORKSPACE="${IMGCTL_WORKSPACE:-/workspace}"
# The shortest JUPYTER_TOKEN accepted (a generated one has 48 hex characters).
MIN_TOKEN_LENGTH=16
# docker stop waits 10 s before SIGKILL (its default --time); stop ours well before.
STOP_GRACE=5

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    code=$1
    shift
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit "$code"
}

# ---------------------------------------------------------------- validation
if [ "${IMGCTL_MODE+set}" = set ]; then mode=$IMGCTL_MODE; else mode=both; fi
case "$mode" in
    jupyter | ssh | both | none) ;;
    *) die 2 "IMGCTL_MODE='$mode' is not a mode; use one of: jupyter, ssh, both, none" ;;
esac

# As root, everything runs as IMGCTL_USER: a name that is not a user of the
# image must not quietly leave the workload running as root.
if [ "$(id -u)" = 0 ]; then
    case "$IMGCTL_USER" in
        -* | *[!A-Za-z0-9._-]*) false ;;
        *) id "$IMGCTL_USER" >/dev/null 2>&1 ;;
    esac || die 2 "IMGCTL_USER='$(printf '%s' "$IMGCTL_USER" | tr -c 'A-Za-z0-9._-' '?')' is not a user of this image, and the workload would run as root; name an existing user, or leave IMGCTL_USER as the image sets it"
fi

TENSORBOARD_PORT="${IMGCTL_TENSORBOARD_PORT:-6006}"
case "${IMGCTL_TENSORBOARD:-0}" in
    0 | 1) ;;
    *) die 2 "IMGCTL_TENSORBOARD='${IMGCTL_TENSORBOARD}' is not 0 or 1; set 1 to serve TensorBoard, 0 (or unset) not to" ;;
esac
case "$TENSORBOARD_PORT" in
    '' | *[!0-9]*) die 2 "IMGCTL_TENSORBOARD_PORT='$TENSORBOARD_PORT' is not a port number (1-65535)" ;;
esac
[ "$TENSORBOARD_PORT" -ge 1 ] && [ "$TENSORBOARD_PORT" -le 65535 ] ||
    die 2 "IMGCTL_TENSORBOARD_PORT=$TENSORBOARD_PORT is not a port number (1-65535)"

case "$SSH_PORT" in
    '' | *[!0-9]*) die 2 "IMGCTL_SSH_PORT='$SSH_PORT' is not a port number (1-65535)" ;;
esac
[ "$SSH_PORT" -ge 1 ] && [ "$SSH_PORT" -le 65535 ] ||
    die 2 "IMGCTL_SSH_PORT=$SSH_PORT is not a port number (1-65535)"

want_jupyter=no
want_ssh=no
want_tensorboard=no
if [ $# -eq 0 ]; then
    case "$mode" in
        jupyter) want_jupyter=yes ;;
        ssh) want_ssh=yes ;;
        both) want_jupyter=yes want_ssh=yes ;;
    esac
    [ "${IMGCTL_TENSORBOARD:-0}" = 0 ] || want_tensorboard=yes
fi
want_idle=no
if [ $# -eq 0 ] && [ -n "${IMGCTL_IDLE_STOP:-}" ]; then
    command -v imgctl >/dev/null 2>&1 ||
        die 2 "IMGCTL_IDLE_STOP is set but this image has no imgctl to watch for idleness; unset it, or rebuild the image with imgctl build"
    imgctl idle-watch --after "$IMGCTL_IDLE_STOP" --check >/dev/null 2>&1 ||
        die 2 "IMGCTL_IDLE_STOP='$(printf '%s' "$IMGCTL_IDLE_STOP" | tr -c 'A-Za-z0-9 ' '?')' is not a duration of at least 5s; use e.g. 90s, 30m or 1h, or unset it"
    want_idle=yes
fi
if [ "$want_tensorboard" = yes ]; then
    command -v tensorboard >/dev/null 2>&1 ||
        die 2 "IMGCTL_TENSORBOARD=1 but this image has no tensorboard; install it in the image, or unset IMGCTL_TENSORBOARD"
fi

user_home() {
    h=""
    if command -v getent >/dev/null 2>&1; then
        h=$(getent passwd "$IMGCTL_USER" 2>/dev/null | cut -d: -f6) || h=""
    fi
    [ -n "$h" ] || h="/home/$IMGCTL_USER"
    printf '%s\n' "$h"
}
HOME_DIR=${IMGCTL_HOME_DIR:-$(user_home)}

# Not root: everything runs as the uid the container started with, whatever
# IMGCTL_USER says; say so once rather than ignore it silently.
if [ "$(id -u)" != 0 ] && [ "$IMGCTL_USER" != "$(id -un 2>/dev/null)" ]; then
    log "IMGCTL_USER=$(printf '%s' "$IMGCTL_USER" | tr -c 'A-Za-z0-9._-' '?') is ignored: the container runs as uid $(id -u), not root, so everything runs as uid $(id -u) (start it as root, --user 0, to switch users)"
fi

# Whether the image's user may write FOLDER (as root: with the user's rights).
user_can_write() {
    if [ "$(id -u)" = 0 ] && id "$IMGCTL_USER" >/dev/null 2>&1; then
        setpriv --reuid="$(id -u "$IMGCTL_USER")" --regid="$(id -g "$IMGCTL_USER")" --init-groups test -w "$1"
    else
        test -w "$1"
    fi
}

token=""
token_generated=no
if [ "$want_jupyter" = yes ]; then
    if [ "${JUPYTER_TOKEN+set}" = set ]; then
        [ -n "$JUPYTER_TOKEN" ] ||
            die 2 "JUPYTER_TOKEN is set but empty, which would open JupyterLab to anyone; unset it to get a generated token, or set a non-empty one"
        case "$JUPYTER_TOKEN" in
            *[!A-Za-z0-9._~-]*) die 2 "JUPYTER_TOKEN may only hold letters, digits and . _ ~ - (it goes into URLs)" ;;
        esac
        # JupyterLab listens on 0.0.0.0: a short token is guessed in a few requests.
        [ "${#JUPYTER_TOKEN}" -ge "$MIN_TOKEN_LENGTH" ] ||
            die 2 "JUPYTER_TOKEN has ${#JUPYTER_TOKEN} characters, too few to resist guessing; use at least $MIN_TOKEN_LENGTH (e.g. openssl rand -hex 24), or unset it to get a generated 48-character token"
        token=$JUPYTER_TOKEN
    else
        # 24 random bytes, hex: 192 bits.
        token=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
        token_generated=yes
    fi
    # JupyterLab writes its runtime files under HOME: a read-only root file
    # system with a root-owned tmpfs there (what a plain --tmpfs /home/dev
    # gives) would end it in a Python traceback.
    if [ -d "$HOME_DIR" ] && ! user_can_write "$HOME_DIR"; then
        owner=$(stat -c %u "$HOME_DIR" 2>/dev/null || echo '?')
        run_uid=$(id -u)
        [ "$run_uid" != 0 ] || run_uid=$(id -u "$IMGCTL_USER")
        die 2 "HOME $HOME_DIR (owned by uid $owner) is not writable by uid $run_uid, and JupyterLab writes its runtime files there; mount a writable one: --tmpfs $HOME_DIR:uid=$run_uid,gid=$(id -g "$IMGCTL_USER" 2>/dev/null || echo "$run_uid") (Kubernetes: an emptyDir with securityContext.fsGroup)"
    fi
    if [ "${JUPYTER_PASSWORD+set}" = set ] && [ -z "$JUPYTER_PASSWORD" ]; then
        die 2 "JUPYTER_PASSWORD is set but empty; unset it (the token is enough) or set a real password"
    fi
fi

# Collects the authorized keys into $keys, validating every line with ssh-keygen.
keys=""
key_sources=""
add_keys() { # $1: source name, stdin: the keys
    n=0
    tmp=$(mktemp)
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        line=$(printf '%s' "$line" | tr -d '\r')
        case "$line" in
            '' | '#'*) continue ;;
            *'PRIVATE KEY'*)
                rm -f "$tmp"
                die 2 "$1 line $n is a PRIVATE key; give the public key (the .pub file) instead"
                ;;
        esac
        printf '%s\n' "$line" >"$tmp"
        if ! ssh-keygen -l -f "$tmp" >/dev/null 2>&1; then
            rm -f "$tmp"
            shown=$(printf '%s' "$line" | cut -c1-40)
            die 2 "$1 line $n is not a valid SSH public key: '$shown…' (check it with: ssh-keygen -l -f FILE)"
        fi
        keys="$keys$line
"
    done
    rm -f "$tmp"
    key_sources="$key_sources $1"
}

# Prints FILE as the image's user sees it (with the user's rights when we are root).
read_as_user() {
    if [ "$(id -u)" = 0 ] && id "$IMGCTL_USER" >/dev/null 2>&1; then
        setpriv --reuid="$(id -u "$IMGCTL_USER")" --regid="$(id -g "$IMGCTL_USER")" --init-groups cat -- "$1"
    else
        cat -- "$1"
    fi
}

ssh_skip_reason=""
if [ "$want_ssh" = yes ]; then
    command -v ssh-keygen >/dev/null 2>&1 || die 2 "IMGCTL_MODE=$mode needs ssh-keygen, which this image lacks"
    if [ -n "${SSH_AUTHORIZED_KEYS:-}" ]; then
        # A here-document, not a pipe: add_keys must run in this shell.
        add_keys SSH_AUTHORIZED_KEYS <<KEYS
$SSH_AUTHORIZED_KEYS
KEYS
    fi
    if [ -e "$MOUNTED_KEYS" ]; then
        [ -r "$MOUNTED_KEYS" ] || die 2 "$MOUNTED_KEYS exists but is not readable"
        add_keys "$MOUNTED_KEYS" <"$MOUNTED_KEYS"
    fi
    # The user's own file is read with the user's rights, never root's: a
    # symlink there to /etc/shadow must not put root's secrets into the log.
    user_keys="$HOME_DIR/.ssh/authorized_keys"
    if user_keys_text=$(read_as_user "$user_keys" 2>/dev/null); then
        add_keys "$user_keys" <<KEYS
$user_keys_text
KEYS
    elif [ -e "$user_keys" ] || [ -L "$user_keys" ]; then
        die 2 "$user_keys exists but $IMGCTL_USER cannot read it"
    fi
    if [ -z "$keys" ]; then
        ssh_skip_reason="no authorized key given (set SSH_AUTHORIZED_KEYS, or mount a key file at $MOUNTED_KEYS or $HOME_DIR/.ssh/authorized_keys)"
    elif [ "$(id -u)" != 0 ] && ! id -un >/dev/null 2>&1; then
        ssh_skip_reason="uid $(id -u) has no account in this image, so sshd cannot log anyone in (run as the image's user, e.g. --user 1000)"
    fi
    if [ -n "$ssh_skip_reason" ]; then
        [ "$mode" != ssh ] || die 2 "IMGCTL_MODE=ssh but sshd cannot start: $ssh_skip_reason"
        want_ssh=no
    fi
fi

if [ "${IMGCTL_ENTRYPOINT_CHECK_ONLY:-}" = 1 ]; then
    if [ $# -gt 0 ]; then
        log "ok: would run: $*"
    else
        tb=""
        [ "$want_tensorboard" = no ] || tb=" tensorboard=yes"
        [ "$want_idle" = no ] || tb="$tb idle_stop=$IMGCTL_IDLE_STOP"
        log "ok: mode=$mode jupyter=$want_jupyter$tb ssh=$want_ssh${ssh_skip_reason:+ (sshd not started: $ssh_skip_reason)}"
    fi
    exit 0
fi

# ------------------------------------------------------------------- helpers
# Runs "$@" as the image's user (when we are root and the user exists).
as_user() {
    if [ "$(id -u)" = 0 ] && id "$IMGCTL_USER" >/dev/null 2>&1; then
        exec_uid=$(id -u "$IMGCTL_USER")
        exec_gid=$(id -g "$IMGCTL_USER")
        exec setpriv --reuid="$exec_uid" --regid="$exec_gid" --init-groups \
            env HOME="$HOME_DIR" USER="$IMGCTL_USER" LOGNAME="$IMGCTL_USER" "$@"
    fi
    exec "$@"
}

# ------------------------------------------------------------- the user's venv
# ~/.venv over the image's venv (#45 F6): the image's /opt/venv is root's, so
# the user installs into a venv of their own, first on PATH (the image's ENV).
# It has no pip of its own: its `pip` runs the image's pip module with this
# venv's Python, so it installs here; a .pth adds the image's site-packages
# after its own, so the image's packages are there and the user's come first.
# Made where missing (a new home, a fresh volume); one that no longer runs,
# or that another Python made (an image upgrade: its packages would no
# longer import, silently), is moved aside and made anew; `imgctl up` then
# names what the old one held and the command that installs it again.
USER_VENV="${IMGCTL_USER_VENV-$HOME_DIR/.venv}"
# X.Y of the Python that made the venv $1 (its pyvenv.cfg), empty if unknown.
venv_python() {
    sed -n 's/^version\(_info\)\{0,1\} *= *\([0-9]*\.[0-9]*\).*/\2/p' "$1/pyvenv.cfg" 2>/dev/null | head -n 1
}
make_user_venv() {
    [ -n "$USER_VENV" ] || return 0
    [ -x /opt/venv/bin/python ] || return 0
    if [ -e "$USER_VENV" ]; then
        made_by="$(venv_python "$USER_VENV")"
        image_python="$(/opt/venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
        if [ -z "$made_by" ] || [ "$made_by" = "$image_python" ]; then
            (as_user "$USER_VENV/bin/python" -c '' ) >/dev/null 2>&1 && return 0
        fi
        old="$USER_VENV.old-$(date +%s)"
        if (as_user mv "$USER_VENV" "$old") 2>/dev/null; then
            log "$USER_VENV does not run with this image's Python ${image_python:-?} (made by ${made_by:-?}): moved to $old, and made anew"
        else
            log "$USER_VENV does not run with this image's Python and cannot be moved; move it away to get a new one"
            return 0
        fi
    fi
    [ -d "$HOME_DIR" ] && user_can_write "$HOME_DIR" || {
        log "no user venv: $HOME_DIR is not writable (pip installs need one)"
        return 0
    }
    (as_user /opt/venv/bin/python -I -c '
import os, sys, sysconfig, venv
target = sys.argv[1]
venv.create(target, with_pip=False, symlinks=True)
image_site = sysconfig.get_paths()["purelib"]
site = os.path.join(target, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
with open(os.path.join(site, "_imgctl_image_venv.pth"), "w") as f:
    f.write("import site; site.addsitedir(%r)\n" % image_site)
for name in ("pip", "pip3"):
    path = os.path.join(target, "bin", name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# This venv'"'"'s pip: the image'"'"'s pip module run by this venv'"'"'s Python.\n"
                "exec \"$(dirname \"$0\")/python\" -m pip \"$@\"\n")
    os.chmod(path, 0o755)
' "$USER_VENV") || log "could not make the user venv $USER_VENV"
}
make_user_venv

# ------------------------------------------------------------- pass-through
if [ $# -gt 0 ]; then
    rm -f "$RUN_DIR/services" 2>/dev/null || true
    as_user "$@"
fi

# The container's environment for SSH sessions (#45 F2), which sshd starts
# afresh: the image's pins (so `imgctl verify` over SSH checks what the image
# promises), the CA bundle a proxy needs (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
# PIP_CERT), the locale, NVIDIA_*/CUDA_*/NCCL_* and the like, as one sshd
# SetEnv value (only the first SetEnv counts, so PATH and VIRTUAL_ENV from
# the config file are carried here too). Nothing whose name says token,
# password, secret or key; no value with a newline (sshd reads one line).
# Each NAME=VALUE is double-quoted with \ and " escaped, as sshd splits it.
ssh_environment() {
    env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | sort -u | while read -r name; do
        # Secrets never reach sshd's argv, which every local user can read:
        # any name that looks like one, in any case (HF_Token, NCCL_AUTH).
        case "$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')" in
            *TOKEN* | *PASS* | *SECRET* | *KEY* | *AUTH* | *CRED* | *PWD*) continue ;;
        esac
        # The variables SSH sessions get, as the notebook does. The IMGCTL_
        # ones `imgctl up` sets are src/workstation/contract.rs's SSH list.
        case "$name" in
            PATH | VIRTUAL_ENV | LANG | LANGUAGE | LC_* | TZ | SSL_CERT_FILE | SSL_CERT_DIR | \
                REQUESTS_CA_BUNDLE | CURL_CA_BUNDLE | PIP_CERT | NODE_EXTRA_CA_CERTS | \
                NVIDIA_* | CUDA_* | NCCL_* | OMP_NUM_THREADS | HF_* | TORCH_* | \
                LD_LIBRARY_PATH | IMGCTL_VERIFY_PINS | IMGCTL_USER | IMGCTL_WORKSPACE | \
                IMGCTL_EXPECT_GPUS) ;;
            *) continue ;;
        esac
        value=$(printenv "$name") || continue
        case "$value" in *"
"*) continue ;; esac
        # Nor a URL with credentials in it (https://user:pass@host).
        case "$value" in *://*:*@*) continue ;; esac
        printf '"%s=%s" ' "$name" "$(printf '%s' "$value" | sed 's/[\\"]/\\&/g')"
    done
}

# ------------------------------------------------------------------ services
started=""
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$RUN_DIR"
else
    mkdir -p -m 0700 "$RUN_DIR" 2>/dev/null || true
    [ -d "$RUN_DIR" ] && [ -O "$RUN_DIR" ] && [ ! -L "$RUN_DIR" ] ||
        die 1 "cannot use $RUN_DIR for the container's state (it must be a folder of uid $(id -u)); mount a writable /tmp (e.g. --tmpfs /tmp)"
fi
# The healthcheck probes exactly the services listed here.
: >"$RUN_DIR/services"
[ "$want_ssh" = no ] || echo sshd >>"$RUN_DIR/services"
[ "$want_jupyter" = no ] || echo jupyter >>"$RUN_DIR/services"
[ "$want_tensorboard" = no ] || echo tensorboard >>"$RUN_DIR/services"

pids=""
stop_all() { # $1: why
    trap '' TERM INT
    log "stopping ($1)"
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    # Anything still running after STOP_GRACE seconds is killed.
    (
        trap - TERM
        sleep "$STOP_GRACE"
        for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    ) &
    killer=$!
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    kill "$killer" 2>/dev/null || true
}
trap 'stop_all SIGTERM; exit 0' TERM
trap 'stop_all SIGINT; exit 130' INT

if [ "$want_ssh" = yes ]; then
    # Host keys: made at the first start of each container, never in an image
    # layer. As root (the image started with --user 0): the system's, and
    # sshd's privilege separation. As the image's user (the default): an
    # unprivileged sshd that can only log that user in, its host key and the
    # keys in the user's own 0700 state folder. StrictModes would refuse that
    # folder's parent (/tmp is world-writable); the entrypoint checked the
    # folder itself (owned by this uid, not a symlink), and no other account
    # can write into it.
    # A host key given from outside (imgctl up keeps one per workstation
    # name, so a client's known_hosts line holds across containers) is
    # used as it is (root) or copied into the state folder (this uid's).
    umask 077
    given_key=no
    [ -f "$HOST_KEY" ] && [ -r "$HOST_KEY" ] && given_key=yes
    if [ "$(id -u)" = 0 ]; then
        mkdir -p /run/sshd
        chmod 0755 /run/sshd
        ssh_user=$IMGCTL_USER
        set -- -o "PidFile=/run/sshd.pid" -o "AuthorizedKeysFile=$RUN_DIR/authorized_keys"
        if [ "$given_key" = yes ]; then
            set -- "$@" -h "$HOST_KEY"
        else
            ssh-keygen -A >/dev/null
            for k in /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ecdsa_key /etc/ssh/ssh_host_rsa_key; do
                set -- "$@" -h "$k"
            done
        fi
        how="keys only"
    else
        ssh_user=$(id -un)
        if [ "$given_key" = yes ]; then
            cp "$HOST_KEY" "$RUN_DIR/ssh_host_ed25519_key.new" &&
                chmod 0600 "$RUN_DIR/ssh_host_ed25519_key.new" &&
                mv -f "$RUN_DIR/ssh_host_ed25519_key.new" "$RUN_DIR/ssh_host_ed25519_key" ||
                die 1 "could not copy the host key $HOST_KEY into $RUN_DIR"
        fi
        [ -f "$RUN_DIR/ssh_host_ed25519_key" ] ||
            ssh-keygen -q -t ed25519 -N '' -f "$RUN_DIR/ssh_host_ed25519_key" >/dev/null ||
            die 1 "could not make an SSH host key in $RUN_DIR"
        set -- -h "$RUN_DIR/ssh_host_ed25519_key" -o "PidFile=$RUN_DIR/sshd.pid" \
            -o "AuthorizedKeysFile=$RUN_DIR/authorized_keys" -o StrictModes=no
        how="keys only, unprivileged sshd as uid $(id -u)"
    fi
    printf '%s' "$keys" >"$RUN_DIR/authorized_keys"
    chmod 0600 "$RUN_DIR/authorized_keys"
    [ "$(id -u)" != 0 ] || chmod 0644 "$RUN_DIR/authorized_keys"
    set -- "$@" -o "Port=$SSH_PORT" -o "AllowUsers=$ssh_user" -o "SetEnv=$(ssh_environment)"
    /usr/sbin/sshd -t -f "$SSHD_CONFIG" "$@" ||
        die 1 "sshd rejected its configuration $SSHD_CONFIG"
    /usr/sbin/sshd -D -e -f "$SSHD_CONFIG" "$@" &
    pids="$pids $!"
    started="$started sshd"
    set --
    umask 022
    [ "$given_key" = no ] || how="$how, host key $HOST_KEY"
    log "sshd: listening on port $SSH_PORT for user $ssh_user ($how) with keys from:$key_sources"
elif [ "$mode" = both ] || [ "$mode" = ssh ]; then
    log "sshd: not started: $ssh_skip_reason"
fi

if [ "$want_jupyter" = yes ]; then
    set -- --ip=0.0.0.0 --port="$JUPYTER_PORT" --no-browser \
        --ServerApp.root_dir="$WORKSPACE" --ServerApp.allow_remote_access=True
    if [ -n "${JUPYTER_PASSWORD:-}" ]; then
        # As root, Python imports nothing the user can write: isolated mode
        # (no working folder on sys.path, no PYTHON* variables), run from /
        # (this script's working folder is /workspace, the user's).
        hashed=$(cd / && python -I -c 'import os; from jupyter_server.auth import passwd; print(passwd(os.environ["JUPYTER_PASSWORD"]))') ||
            die 1 "could not hash JUPYTER_PASSWORD with jupyter_server.auth.passwd"
        set -- "$@" --PasswordIdentityProvider.hashed_password="$hashed"
    fi
    # jupyter_server reads the token from JUPYTER_TOKEN (kept out of argv and ps).
    (
        unset JUPYTER_PASSWORD
        JUPYTER_TOKEN=$token
        export JUPYTER_TOKEN
        cd "$WORKSPACE"
        # From the image's venv (its share/ and etc/ hold the Lab's assets and
        # the server's extensions); the kernels' `python` is the first on
        # PATH, the user's venv, so a notebook sees what the user installed.
        as_user jupyter lab "$@"
    ) &
    pids="$pids $!"
    started="$started jupyter"
    if [ "$token_generated" = yes ]; then
        log "JupyterLab: http://127.0.0.1:$JUPYTER_PORT/lab?token=$token (generated token, shown only here; set JUPYTER_TOKEN to choose one)"
    else
        log "JupyterLab: port $JUPYTER_PORT, token from JUPYTER_TOKEN"
    fi
fi

if [ "$want_tensorboard" = yes ]; then
    # Over the whole workspace: every run's tb/ folder (train-demo writes its
    # events there) shows up as a run. --bind_all: the container's interfaces,
    # published by the engine on the host's 127.0.0.1 only.
    (
        cd "$WORKSPACE"
        as_user tensorboard --logdir "$WORKSPACE" --port "$TENSORBOARD_PORT" --bind_all \
            --reload_interval 5
    ) &
    pids="$pids $!"
    started="$started tensorboard"
    log "TensorBoard: port $TENSORBOARD_PORT, --logdir $WORKSPACE (no login: keep the port on 127.0.0.1)"
fi

# The idle watch: it exits 0 once everything has been idle for
# IMGCTL_IDLE_STOP, and then the services stop and the container with them.
idle_pid=""
if [ "$want_idle" = yes ]; then
    set -- --after "$IMGCTL_IDLE_STOP"
    [ "$want_jupyter" = no ] || set -- "$@" --jupyter-port "$JUPYTER_PORT"
    [ "$want_ssh" = no ] || set -- "$@" --ssh-port "$SSH_PORT"
    (
        JUPYTER_TOKEN=$token
        export JUPYTER_TOKEN
        as_user imgctl idle-watch "$@"
    ) &
    idle_pid=$!
    pids="$pids $idle_pid"
    set --
fi

if [ -z "$started" ]; then
    log "no services started (IMGCTL_MODE=$mode); waiting for docker stop. Use docker exec, or pass a command"
fi

# Wait; when a service exits, stop the others and exit with its status.
set +e
while :; do
    for p in $pids; do
        if ! kill -0 "$p" 2>/dev/null; then
            wait "$p"
            rc=$?
            pids=$(printf '%s\n' $pids | grep -v "^$p\$" | tr '\n' ' ')
            if [ "$p" = "$idle_pid" ] && [ "$rc" = 0 ]; then
                stop_all "idle-stop: idle for $IMGCTL_IDLE_STOP"
                exit 0
            fi
            stop_all "a service (pid $p) exited with status $rc"
            exit "$rc"
        fi
    done
    sleep 1 &
    wait $! 2>/dev/null
done
