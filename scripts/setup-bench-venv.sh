#!/usr/bin/env bash
# Idempotent set-up for the side-by-side vector search benchmark (`make bench-compare`,
# benches/compare/others.py): a Python venv holding pinned ChromaDB, Python LanceDB, numpy and
# pyarrow. Only explicit embeddings are used, so nothing here (or in others.py) downloads a model.
# Re-running is cheap: a venv whose stamp matches the pinned requirements below is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_BENCH_VENV:-$HOME/.cache/scopemem/bench-venv}"
# The pins. Changing this list (or anything in it) changes the stamp, so the next run reinstalls.
REQUIREMENTS="chromadb==1.5.9
lancedb==0.40.0
numpy==2.4.6
pyarrow==26.0.1"
STAMP="$VENV/.scopemem-bench-stamp"

log() { printf '[setup-bench-venv] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

want="$(printf '%s\n' "$REQUIREMENTS" | sha256sum | cut -d' ' -f1)"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  log "pinned benchmark packages present in $VENV"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is missing: run scripts/setup.sh first"
log "using $(python3 --version 2>&1) at $(command -v python3)"

. "$(dirname "$0")/venv.sh"
ensure_venv "$VENV"
rm -f "$STAMP"

req="$probe/requirements.txt"
printf '%s\n' "$REQUIREMENTS" > "$req"
log "installing into $VENV (chromadb pulls many dependencies; this takes a few minutes):"
sed 's/^/[setup-bench-venv]   /' "$req" >&2
# nice: this usually runs beside a Rust build on a small machine.
NICE=(); command -v nice >/dev/null 2>&1 && NICE=(nice -n 10)
"${NICE[@]}" "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --only-binary=:all: -r "$req" \
  || die "pip install failed (see the output above); the venv at $VENV is left unstamped"

log "checking the pinned versions import"
"$VENV/bin/python" - "$req" <<'PY' || die "the installed packages do not match the pins or do not import"
import sys
from importlib.metadata import version

bad = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    name, pinned = line.split("==")
    got = version(name)
    if got != pinned:
        bad.append(f"{name}: pinned {pinned}, installed {got}")
if bad:
    sys.exit("\n".join(bad))

import chromadb, lancedb, numpy, pyarrow  # noqa: E401,F401  (import check only)
print(f"chromadb {chromadb.__version__}, lancedb {lancedb.__version__}, "
      f"numpy {numpy.__version__}, pyarrow {pyarrow.__version__}", file=sys.stderr)
PY

printf '%s\n' "$want" > "$STAMP"
log "benchmark venv ready: $VENV"
