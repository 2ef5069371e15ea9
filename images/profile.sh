# /etc/profile.d/imgctl.sh: the image's environment for login shells (ssh
# sessions do not inherit the container's ENV, and /etc/profile resets PATH).
# The user's venv (~/.venv, made by the entrypoint over /opt/venv) comes
# first when it exists; else the image's.
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    :
elif [ -x "$HOME/.venv/bin/python" ]; then
    export VIRTUAL_ENV="$HOME/.venv"
else
    export VIRTUAL_ENV=/opt/venv
fi
case ":$PATH:" in
    *:/opt/venv/bin:*) ;;
    *) export PATH="/opt/venv/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:$PATH" ;;
esac
case ":$PATH:" in
    *:"$VIRTUAL_ENV/bin":*) ;;
    *) export PATH="$VIRTUAL_ENV/bin:$PATH" ;;
esac
