#!/usr/bin/env bash
# `make bench-compare`: scopemem's search against ChromaDB and Python LanceDB on identical
# vectors, filters and queries, one system after the other in this run. Each workload is built
# once as a neutral directory (benches/common/workload.rs) and reused by every system:
#   realistic: model embeddings of memory-like EN/ZH sentences, held-out queries;
#   uniform:   random unit vectors.
# Both have 50 scopes + 30% public and 10 tiny private scopes (20% of the queries).
# Env: COMPARE_N (default 100000; comma-separated for several sizes), COMPARE_KINDS
# (default "realistic uniform"), COMPARE_SYSTEMS (others.py --systems).
set -euo pipefail

: "${CARGO_TARGET_DIR:?run through make}"
VENV="${SCOPEMEM_BENCH_VENV:-$HOME/.cache/scopemem/bench-venv}"
ROOT="$CARGO_TARGET_DIR/scopemem-bench/workloads"
OUT="$CARGO_TARGET_DIR/scopemem-bench/compare-$(date +%Y%m%d-%H%M%S).jsonl"
mkdir -p "$ROOT"
: > "$OUT"

for n in ${COMPARE_N//,/ }; do
  for kind in ${COMPARE_KINDS:-realistic uniform}; do
    dir="$ROOT/$kind-$n"
    echo "== $kind, $n rows: scopemem (cargo bench --bench workload)" >&2
    SCOPEMEM_WORKLOAD="$dir" SCOPEMEM_WORKLOAD_GENERATE="$kind" SCOPEMEM_WORKLOAD_N="$n" \
      cargo bench --bench workload | tee -a "$OUT" | grep '^RESULT' >&2
    echo "== $kind, $n rows: other systems (benches/compare/others.py)" >&2
    "$VENV/bin/python" benches/compare/others.py "$dir" \
      ${COMPARE_SYSTEMS:+--systems "$COMPARE_SYSTEMS"} | tee -a "$OUT"
  done
done

echo "results: $OUT" >&2
python3 benches/compare/table.py "$OUT"
