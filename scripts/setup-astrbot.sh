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

. "$(dirname "$0")/venv.sh"

if [ -x "$VENV/bin/python" ] && [ "$(installed_version "$VENV" astrbot || true)" = "$ASTRBOT_VERSION" ]; then
  log "astrbot==$ASTRBOT_VERSION present in $VENV"
  exit 0
fi

# AstrBot 4.x needs Python >= 3.10; the test is pinned to 3.12.
ensure_venv312 "$VENV"
log "installing astrbot==$ASTRBOT_VERSION into $VENV (a few minutes on a cold cache)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "astrbot==$ASTRBOT_VERSION"
got="$(installed_version "$VENV" astrbot || true)"
if [ "$got" != "$ASTRBOT_VERSION" ]; then
  log "expected astrbot==$ASTRBOT_VERSION in $VENV, found '${got:-nothing}'"; exit 1
fi
log "astrbot==$ASTRBOT_VERSION installed in $VENV in $(( $(date +%s) - start )) s"
