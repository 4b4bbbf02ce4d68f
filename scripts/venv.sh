# Sourced by the setup scripts that need a Python venv: `ensure_venv DIR` creates DIR as a venv
# with python3, installing Debian's python3-venv first if `python3 -m venv` does not work.
# The caller defines `log`.

ensure_venv() {
  local venv="$1" probe pkg ver SUDO
  # Debian splits venv (and its ensurepip) into python3-venv; probe by actually creating one.
  probe="$(mktemp -d)"
  if ! python3 -m venv "$probe/v" >/dev/null 2>&1; then
    pkg="python3-venv"
    ver="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    log "python3 -m venv does not work: installing $pkg (and python$ver-venv if available) with apt"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "python$ver-venv" >/dev/null 2>&1 || true
  fi
  rm -rf "$probe"
  if [ ! -x "$venv/bin/python" ]; then
    log "creating venv $venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" || { log "ERROR: could not create venv $venv"; return 1; }
  fi
}
