#!/usr/bin/env python3
"""Markdown tables for the side-by-side vector search benchmark (`make bench-compare`).

Usage: table.py [FILE ...]     (no FILE, or `-`: read standard input)

Reads JSON lines: the ones benches/compare/others.py prints and the one the Rust side prints with
"system": "scopemem" (same fields: workload, n, queries, p50_ms, p95_ms, p99_ms, recall_at_10,
build_s, config). Lines that are not JSON objects with a "system" key are ignored, so whole logs
can be fed in. Prints one markdown table per workload; "scopemem speed-up" is the other
system's p50 / scopemem's p50 and its p99 / scopemem's p99 (above 1× means scopemem is faster).
Standard library only.
"""

import json
import sys


def read_rows(paths):
    rows = []
    streams = paths or ["-"]
    for path in streams:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
        try:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and "system" in obj:
                    rows.append(obj)
        finally:
            if f is not sys.stdin:
                f.close()
    return rows


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def fmt(v, digits):
    v = num(v)
    return "n/a" if v is None else f"{v:.{digits}f}"


def ratio(other, base):
    other, base = num(other), num(base)
    if other is None or base is None or base <= 0:
        return "n/a"
    return f"{other / base:.1f}×"


def table(workload, rows):
    # The last line per system wins (a re-run appended to the same log replaces the earlier one).
    by_system = {}
    for r in rows:
        by_system[r["system"]] = r
    scope = by_system.get("scopemem")
    ordered = ([scope] if scope else []) + [r for s, r in by_system.items() if s != "scopemem"]

    sizes = sorted({(r.get("n"), r.get("queries")) for r in ordered}, key=str)
    size_note = "; ".join(f"n = {n}, {q} queries" for n, q in sizes)
    out = [f"### {workload} ({size_note})", ""]
    out.append(
        "| system | p50 ms | p95 ms | p99 ms | recall@10 | build s | scopemem speed-up (p50 / p99) |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for r in ordered:
        if r is scope:
            speedup = "—"
        elif scope is None:
            speedup = "n/a (no scopemem line)"
        else:
            speedup = (
                f"{ratio(r.get('p50_ms'), scope.get('p50_ms'))} / "
                f"{ratio(r.get('p99_ms'), scope.get('p99_ms'))}"
            )
        out.append(
            f"| {r['system']} | {fmt(r.get('p50_ms'), 2)} | {fmt(r.get('p95_ms'), 2)} "
            f"| {fmt(r.get('p99_ms'), 2)} | {fmt(r.get('recall_at_10'), 3)} "
            f"| {fmt(r.get('build_s'), 2)} | {speedup} |"
        )
    configs = [(r["system"], r.get("config")) for r in ordered if r.get("config")]
    if configs:
        out.append("")
        for system, config in configs:
            out.append(f"- {system}: {config}")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    rows = read_rows(args)
    if not rows:
        print("table.py: no result lines (JSON objects with a \"system\" key) found", file=sys.stderr)
        return 1
    workloads = {}
    for r in rows:
        workloads.setdefault(str(r.get("workload", "?")), []).append(r)
    print("\n\n".join(table(w, rs) for w, rs in workloads.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
