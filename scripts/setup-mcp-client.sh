#!/usr/bin/env bash
# Idempotent set-up for the MCP client tests (tests/mcp.rs): a Python venv holding the official
# `mcp` SDK, so the tests talk to `scopemem mcp` through a real, independent MCP client.
# Re-running is cheap: an existing venv with the pinned version is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_VENV:-$HOME/.cache/scopemem/venv}"
MCP_VERSION=2.3.0

log() { printf '[setup-mcp-client] %s\n' "$*" >&2; }

installed_version() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
print(version("mcp"))
PY
}

if [ -x "$VENV/bin/python" ] && [ "$(installed_version || true)" = "$MCP_VERSION" ]; then
  log "mcp==$MCP_VERSION present in $VENV"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || { log "python3 is missing: run scripts/setup.sh first"; exit 1; }

. "$(dirname "$0")/venv.sh"
ensure_venv "$VENV"
log "installing mcp==$MCP_VERSION into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
got="$(installed_version || true)"
if [ "$got" != "$MCP_VERSION" ]; then
  log "expected mcp==$MCP_VERSION in $VENV, found '${got:-nothing}'"; exit 1
fi
log "mcp==$MCP_VERSION installed in $VENV"
