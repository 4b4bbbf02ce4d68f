#!/usr/bin/env bash
# Idempotent set-up for the AstrBot integration test (tests/astrbot.rs): a Python 3.12 venv
# holding a pinned, real AstrBot, which loads integrations/astrbot through its own plugin
# manager. Re-running is cheap: a venv that already has the pinned version is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_ASTRBOT_VENV:-$HOME/.cache/scopemem/astrbot-venv}"
# 4.29.2 and 4.29.3 need a certifi release the package registry lacks.
ASTRBOT_VERSION=4.29.0

log() { printf '[setup-astrbot] %s\n' "$*" >&2; }

. "$(dirname "$0")/venv.sh"

# AstrBot 4.x needs Python >= 3.10; the test is pinned to 3.12.
ensure_pinned312 "$VENV" astrbot "$ASTRBOT_VERSION" "a few minutes on a cold cache" \
  "astrbot==$ASTRBOT_VERSION"
