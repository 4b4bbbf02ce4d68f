#!/usr/bin/env bash
# `make bench-smoke` (and `make lint`): every bench in benches/, run once from this checkout at a
# tiny size (SCOPEMEM_BENCH_SMOKE=1) in the debug profile `make test` shares, so a fresh clone
# cannot break a bench's set-up path (its data directories, datasets, servers, venvs) unnoticed.
# The figures it prints mean nothing; `make bench*` measures. Each bench's output goes to
# $CARGO_TARGET_DIR/bench-smoke/<bench>.log and is shown when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
logs="$target/bench-smoke"
mkdir -p "$logs"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export SCOPEMEM_BENCH_SMOKE=1
# The workload bench reads a workload directory: generate a small one.
export SCOPEMEM_WORKLOAD="$work/workload" SCOPEMEM_WORKLOAD_GENERATE=uniform \
  SCOPEMEM_WORKLOAD_N=2000 SCOPEMEM_WORKLOAD_Q=5

benches=$(sed -n 's/^name = "\(.*\)"$/\1/p' <(awk '/^\[\[bench\]\]/{b=1;next} b&&/^name/{print;b=0}' Cargo.toml))
echo "[bench-smoke] building $(echo $benches | wc -w) benches (dev profile)" >&2
cargo bench --profile dev --no-run >"$logs/build.log" 2>&1 || { cat "$logs/build.log" >&2; exit 1; }
failed=()
for b in $benches; do
  start=$(date +%s)
  if cargo bench --profile dev --bench "$b" >"$logs/$b.log" 2>&1; then
    echo "[bench-smoke] $b ok ($(( $(date +%s) - start )) s)" >&2
  else
    echo "[bench-smoke] $b FAILED ($(( $(date +%s) - start )) s); its log:" >&2
    tail -40 "$logs/$b.log" >&2
    failed+=("$b")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[bench-smoke] failed: ${failed[*]}" >&2
  exit 1
fi
