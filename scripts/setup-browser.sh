#!/usr/bin/env bash
# Idempotent set-up for the browser test of the operator page (tests/ui_browser.rs):
# Debian's chromium (and a small CJK font) from apt, and playwright-core (the driver only, never a browser download)
# from the npm registry, installed with `npm ci` from tests/browser/package-lock.json into a
# cached directory. Re-running is cheap: nothing is installed when both are already there.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS_DIR="${SCOPEMEM_BROWSER_DEPS:-$HOME/.cache/scopemem/browser}"
CHROMIUM=/usr/bin/chromium

log() { printf '[setup-browser] %s\n' "$*" >&2; }

need_apt=()
[ -x "$CHROMIUM" ] || need_apt+=(chromium)
# Scope names are often Chinese: without a CJK font the page (and its screenshot) shows boxes.
[ -n "$(fc-list :lang=zh 2>/dev/null)" ] || need_apt+=(fonts-wqy-microhei)
if [ "${#need_apt[@]}" -gt 0 ]; then
  log "installing ${need_apt[*]} with apt"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
log "$("$CHROMIUM" --version 2>/dev/null || echo "chromium at $CHROMIUM")"

if ! command -v npm >/dev/null 2>&1; then
  log "no npm on PATH: install Node.js 20+ and npm first"; exit 1
fi

# The cached install is current when its lockfile is the committed one and the package is there.
mkdir -p "$DEPS_DIR"
if cmp -s "$ROOT/tests/browser/package-lock.json" "$DEPS_DIR/package-lock.json" &&
   [ -f "$DEPS_DIR/node_modules/playwright-core/package.json" ]; then
  log "playwright-core present in $DEPS_DIR"
  exit 0
fi
log "installing playwright-core with npm ci into $DEPS_DIR"
cp "$ROOT/tests/browser/package.json" "$ROOT/tests/browser/package-lock.json" "$DEPS_DIR/"
# No install scripts and no browser download: the test drives /usr/bin/chromium.
(cd "$DEPS_DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
log "playwright-core $(node -p "require('$DEPS_DIR/node_modules/playwright-core/package.json').version") ready"
