#!/usr/bin/env bash
# `make test-stress`: `make test` on a loaded machine, as a user's laptop or a CI runner is. Two
# CPU hogs (busy shell loops at the tests' own priority) run for the whole of it; every test
# must still pass: tests wait for conditions with generous caps, never for a fixed time.
# SCOPEMEM_STRESS_HOGS changes the number of hogs (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq "${SCOPEMEM_STRESS_HOGS:-2}"); do
  bash -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "[test-stress] ${#hogs[@]} CPU hogs running (pids ${hogs[*]})" >&2
started=$(date +%s)
bash scripts/test.sh
echo "[test-stress] passed beside ${#hogs[@]} CPU hogs in $(( $(date +%s) - started )) s" >&2
