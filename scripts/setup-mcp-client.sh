#!/usr/bin/env bash
# Idempotent set-up of the project's test venv: the official `mcp` SDK, so tests/mcp.rs talks to
# `scopemem mcp` through a real, independent MCP client, and `moto[server]`, a real S3 API on
# loopback for tests/s3.rs and benches/s3.rs (it enforces the conditional PUTs Lance commits
# with). Re-running is cheap: a venv with the pinned versions is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_VENV:-$HOME/.cache/scopemem/venv}"
MCP_VERSION=2.3.0
MOTO_VERSION=5.2.5

log() { printf '[setup-mcp-client] %s\n' "$*" >&2; }

. "$(dirname "$0")/venv.sh"

present() {
  [ -x "$VENV/bin/python" ] \
    && [ "$(installed_version "$VENV" mcp || true)" = "$MCP_VERSION" ] \
    && [ "$(installed_version "$VENV" moto || true)" = "$MOTO_VERSION" ] \
    && [ -x "$VENV/bin/moto_server" ]
}

if present; then
  log "mcp==$MCP_VERSION and moto[server]==$MOTO_VERSION present in $VENV"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || { log "python3 is missing: run scripts/setup.sh first"; exit 1; }

ensure_venv "$VENV"

log "installing mcp==$MCP_VERSION and moto[server]==$MOTO_VERSION into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "mcp==$MCP_VERSION" "moto[server]==$MOTO_VERSION"
if ! present; then
  log "expected mcp==$MCP_VERSION and moto[server]==$MOTO_VERSION in $VENV, found" \
      "mcp '$(installed_version "$VENV" mcp || true)', moto '$(installed_version "$VENV" moto || true)'"
  exit 1
fi
log "mcp==$MCP_VERSION and moto[server]==$MOTO_VERSION installed in $VENV"
