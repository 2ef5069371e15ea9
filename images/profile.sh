# /etc/profile.d/imgctl.sh: the image's environment for login shells (ssh
# sessions do not inherit the container's ENV, and /etc/profile resets PATH).
export VIRTUAL_ENV=/opt/venv
case ":$PATH:" in
    *:/opt/venv/bin:*) ;;
    *) export PATH="/opt/venv/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:$PATH" ;;
esac
