#!/usr/bin/env bash
# Idempotent set-up for the AstrBot integration test (tests/astrbot.rs): a Python 3.12 venv
# holding a pinned, real AstrBot, which loads integrations/astrbot through its own plugin
# manager. Re-running is cheap: a venv that already has the pinned version is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_ASTRBOT_VENV:-$HOME/.cache/scopemem/astrbot-venv}"
# 4.29.2 and 4.29.3 need a certifi release the package registry lacks.
ASTRBOT_VERSION=4.29.0

log() { printf '[setup-astrbot] %s\n' "$*" >&2; }
start=$(date +%s)

installed_version() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
print(version("astrbot"))
PY
}

if [ -x "$VENV/bin/python" ] && [ "$(installed_version || true)" = "$ASTRBOT_VERSION" ]; then
  log "astrbot==$ASTRBOT_VERSION present in $VENV"
  exit 0
fi

# AstrBot 4.x needs Python >= 3.10; the test is pinned to 3.12.
PY312=""
for cand in "${SCOPEMEM_PYTHON312:-}" "$HOME/.pyenv/versions/3.12.1/bin/python" \
            /root/.pyenv/versions/3.12.1/bin/python "$(command -v python3.12 || true)"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && \
     "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null; then
    PY312="$cand"; break
  fi
done
if [ -z "$PY312" ]; then
  for cand in "$HOME"/.pyenv/versions/3.12*/bin/python; do
    [ -x "$cand" ] && { PY312="$cand"; break; }
  done
fi
if [ -z "$PY312" ]; then
  log "Python 3.12 not found: install it (e.g. 'pyenv install 3.12' or apt 'python3.12 python3.12-venv')"
  log "or point SCOPEMEM_PYTHON312 at a python3.12 binary, then re-run this script"
  exit 1
fi

if [ -d "$VENV" ] && ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null; then
  log "removing $VENV: not a working Python 3.12 venv"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV with $PY312"
  mkdir -p "$(dirname "$VENV")"
  "$PY312" -m venv "$VENV"
fi
log "installing astrbot==$ASTRBOT_VERSION into $VENV (a few minutes on a cold cache)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "astrbot==$ASTRBOT_VERSION"
got="$(installed_version || true)"
if [ "$got" != "$ASTRBOT_VERSION" ]; then
  log "expected astrbot==$ASTRBOT_VERSION in $VENV, found '${got:-nothing}'"; exit 1
fi
log "astrbot==$ASTRBOT_VERSION installed in $VENV in $(( $(date +%s) - start )) s"
