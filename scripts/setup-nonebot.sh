#!/usr/bin/env bash
# Idempotent set-up for the NoneBot2 integration test (tests/nonebot.rs, tests/nonebot/): a venv
# with the machine's python3 holding pinned NoneBot2 (FastAPI driver), its test framework
# nonebug, the real OneBot v11 adapter, pytest, and integrations/nonebot installed editable, so
# the tests always run the plugin files in this repo. Re-running is cheap: a venv whose stamp
# (the pins and the plugin's pyproject.toml) matches and whose plugin import resolves to this
# repo is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

VENV="${SCOPEMEM_NONEBOT_VENV:-$HOME/.cache/scopemem/nonebot-venv}"
PINS=(
  "nonebot2[fastapi]==2.5.0"
  "nonebug==0.4.4"
  "nonebot-adapter-onebot==2.4.6"
  "pytest==9.2.0"
  "pytest-asyncio==1.5.0"
  "httpx==0.28.1"
)
PLUGIN="$repo/integrations/nonebot"
STAMP="$VENV/.scopemem-nonebot-stamp"

log() { printf '[setup-nonebot] %s\n' "$*" >&2; }
start=$(date +%s)

want_stamp="$( { printf '%s\n' "${PINS[@]}"; cat "$PLUGIN/pyproject.toml"; } | sha256sum | cut -d' ' -f1)"

plugin_path() {
  # Where the import resolves, without importing it (a NoneBot plugin needs nonebot.init()).
  "$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("nonebot_plugin_scopemem").origin)' 2>/dev/null
}

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null || true)" = "$want_stamp" ] && \
   [ "$(plugin_path || true)" = "$PLUGIN/nonebot_plugin_scopemem/__init__.py" ]; then
  log "NoneBot2 venv ready in $VENV ($(( $(date +%s) - start )) s)"
  exit 0
fi

PY="${SCOPEMEM_PYTHON3:-$(command -v python3 || true)}"
if [ -z "$PY" ] || ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null; then
  log "python3 >= 3.9 not found (NoneBot2 2.5 needs it): install python3 and python3-venv,"
  log "or point SCOPEMEM_PYTHON3 at one, then re-run this script"
  exit 1
fi
if [ -d "$VENV" ] && ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null; then
  log "removing $VENV: not a working Python venv"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV with $PY ($("$PY" --version 2>&1))"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
log "installing ${PINS[*]} and -e integrations/nonebot into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$PLUGIN"
got="$(plugin_path || true)"
if [ "$got" != "$PLUGIN/nonebot_plugin_scopemem/__init__.py" ]; then
  log "nonebot_plugin_scopemem resolves to '${got:-nothing}', not $PLUGIN"; exit 1
fi
printf '%s\n' "$want_stamp" >"$STAMP"
log "NoneBot2 venv set up in $VENV in $(( $(date +%s) - start )) s"
