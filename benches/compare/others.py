#!/usr/bin/env python3
"""Side-by-side vector search benchmark: the other systems (`make bench-compare`).

Usage: others.py DIR [--systems chromadb,lancedb-flat,lancedb-index] [--refine-factor N]

DIR is a neutral workload directory written by the Rust side:
  vectors.f32        N x 384 little-endian float32, row-major, unit-normalised
  scopes.txt         N lines, the scope of each row
  queries.f32        Q x 384 little-endian float32
  query_scopes.txt   Q lines, the scope of the conversation asking each query
  name.txt           optional, one line: the workload's name (default: DIR's base name)

The filter for query i is `scope IN (query_scopes[i], 'public')` (just `scope = 'public'` for a
public query); k = 10; search only (vectors are given, nothing is embedded and no model is ever
downloaded). Ground truth is the exact filtered top-10 computed with numpy.

For each system, one after the other, one JSON object is printed on its own line to stdout:
  {"system", "workload", "n", "queries", "p50_ms", "p95_ms", "p99_ms", "recall_at_10",
   "build_s", "config"}
Progress goes to stderr.
"""

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

# Belt and braces: nothing below needs the network. Chroma's product telemetry is also switched
# off in its Settings; the Hugging Face hub (pulled in by chromadb) must never be consulted.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

DIM = 384
K = 10
WARMUP = 10
PUBLIC = "public"
ALL_SYSTEMS = ("chromadb", "lancedb-flat", "lancedb-index")
# IVF_HNSW_SQ re-ranks refine_factor * k candidates exactly; chosen after trying none and 4
# (see `--refine-factor`). scopemem's own LanceSearch uses the same index kind plus a refine step.
DEFAULT_REFINE_FACTOR = 4


def log(msg):
    print(f"[bench-compare] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Workload and ground truth
# ---------------------------------------------------------------------------------------------


class Workload:
    def __init__(self, path):
        self.path = path
        self.scopes = read_lines(os.path.join(path, "scopes.txt"))
        self.query_scopes = read_lines(os.path.join(path, "query_scopes.txt"))
        self.vectors = read_matrix(os.path.join(path, "vectors.f32"), len(self.scopes))
        self.queries = read_matrix(os.path.join(path, "queries.f32"), len(self.query_scopes))
        name_file = os.path.join(path, "name.txt")
        if os.path.exists(name_file):
            with open(name_file, encoding="utf-8") as f:
                self.name = f.readline().strip()
        else:
            self.name = os.path.basename(os.path.normpath(path))
        self.n = len(self.scopes)
        self.q = len(self.query_scopes)
        if self.q == 0:
            raise SystemExit(f"{path}: no queries")

    def allowed(self, i):
        """The scopes query i may see."""
        qs = self.query_scopes[i]
        return [PUBLIC] if qs == PUBLIC else [qs, PUBLIC]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_matrix(path, rows):
    flat = np.fromfile(path, dtype="<f4")
    if flat.size != rows * DIM:
        raise SystemExit(
            f"{path}: {flat.size} floats, expected {rows} rows x {DIM} = {rows * DIM}"
        )
    return np.ascontiguousarray(flat.reshape(rows, DIM).astype(np.float32, copy=False))


def ground_truth(w):
    """Exact filtered top-k ids per query (cosine = dot product on unit vectors)."""
    scope_arr = np.asarray(w.scopes, dtype=object)
    rows_of = {}
    for s in set(w.scopes):
        rows_of[s] = np.flatnonzero(scope_arr == s)
    empty = np.empty(0, dtype=np.int64)
    truth = [None] * w.q
    # Group queries by their allowed set so each admitted sub-matrix is gathered once.
    groups = {}
    for i in range(w.q):
        groups.setdefault(tuple(w.allowed(i)), []).append(i)
    for allowed, qidx in groups.items():
        admitted = np.sort(np.concatenate([rows_of.get(s, empty) for s in allowed]))
        if admitted.size == 0:
            for i in qidx:
                truth[i] = set()
            continue
        scores = w.vectors[admitted] @ w.queries[qidx].T  # (admitted, len(qidx))
        k = min(K, admitted.size)
        for col, i in enumerate(qidx):
            s = scores[:, col]
            top = np.argpartition(-s, k - 1)[:k] if admitted.size > k else np.arange(admitted.size)
            truth[i] = set(admitted[top].tolist())
    return truth


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


def percentile(sorted_ms, p):
    """Nearest rank on the sorted list: index round((len - 1) * p), halves rounded up."""
    return sorted_ms[int(math.floor((len(sorted_ms) - 1) * p + 0.5))]


def measure(w, truth, search, system):
    """Warm up, then time every query individually; `search(i)` returns a list of row ids."""
    for i in range(min(WARMUP, w.q)):
        search(i)
    lat_ms = []
    recall_sum = 0.0
    leaks = 0
    for i in range(w.q):
        t0 = time.perf_counter()
        ids = search(i)
        lat_ms.append((time.perf_counter() - t0) * 1000.0)
        t = truth[i]
        allowed = set(w.allowed(i))
        leaks += sum(1 for r in ids if w.scopes[r] not in allowed)
        if t:
            recall_sum += len(t.intersection(ids[:K])) / len(t)
        else:
            recall_sum += 1.0  # nothing admitted: an empty answer is the right answer
    if leaks:
        log(f"WARNING {system}: {leaks} returned rows were outside the query's scope filter")
    lat_ms.sort()
    return {
        "p50_ms": round(percentile(lat_ms, 0.50), 4),
        "p95_ms": round(percentile(lat_ms, 0.95), 4),
        "p99_ms": round(percentile(lat_ms, 0.99), 4),
        "recall_at_10": round(recall_sum / w.q, 4),
    }


def emit(w, system, stats, build_s, config):
    import json

    line = {
        "system": system,
        "workload": w.name,
        "n": w.n,
        "queries": w.q,
        **stats,
        "build_s": round(build_s, 3),
        "config": config,
    }
    print(json.dumps(line), flush=True)


# ---------------------------------------------------------------------------------------------
# ChromaDB
# ---------------------------------------------------------------------------------------------


def run_chromadb(w, truth, tmp):
    import chromadb
    from chromadb.config import Settings

    path = os.path.join(tmp, "chroma")
    t0 = time.perf_counter()
    client = chromadb.PersistentClient(
        path=path, settings=Settings(anonymized_telemetry=False, allow_reset=False)
    )
    # chromadb 1.x: the HNSW space goes in `configuration` (the old "hnsw:space" metadata key is
    # the legacy spelling). embedding_function=None: explicit embeddings only, so the default
    # ONNX model is never fetched.
    coll = client.create_collection(
        name="bench",
        configuration={"hnsw": {"space": "cosine"}},
        embedding_function=None,
    )
    batch = client.get_max_batch_size()
    for start in range(0, w.n, batch):
        end = min(start + batch, w.n)
        coll.add(
            ids=[str(i) for i in range(start, end)],
            embeddings=w.vectors[start:end],
            metadatas=[{"scope": s} for s in w.scopes[start:end]],
        )
    if coll.count() != w.n:
        raise SystemExit(f"chromadb holds {coll.count()} rows, expected {w.n}")
    build_s = time.perf_counter() - t0
    space = (coll.configuration or {}).get("hnsw", {}) or {}
    log(f"chromadb: ingested {w.n} rows in {build_s:.2f}s (batch {batch}, hnsw {space})")

    wheres = []
    for i in range(w.q):
        allowed = w.allowed(i)
        wheres.append({"scope": allowed[0]} if len(allowed) == 1 else {"scope": {"$in": allowed}})
    queries = w.queries

    def search(i):
        res = coll.query(
            query_embeddings=queries[i : i + 1],
            n_results=K,
            where=wheres[i],
            include=["distances"],
        )
        return [int(x) for x in res["ids"][0]]

    stats = measure(w, truth, search, "chromadb")
    config = (
        f"chromadb {chromadb.__version__} PersistentClient, HNSW cosine (default M/ef), "
        f"where scope $in, include=distances"
    )
    emit(w, "chromadb", stats, build_s, config)
    del coll, client


# ---------------------------------------------------------------------------------------------
# Python LanceDB
# ---------------------------------------------------------------------------------------------


def lance_table(w, tmp, sub):
    import lancedb
    import pyarrow as pa
    from lancedb.index import Bitmap

    db = lancedb.connect(os.path.join(tmp, sub))
    vec = pa.FixedSizeListArray.from_arrays(pa.array(w.vectors.reshape(-1), pa.float32()), DIM)
    data = pa.table(
        {
            "id": pa.array(np.arange(w.n, dtype=np.int64)),
            "scope": pa.array(w.scopes, pa.string()),
            "vector": vec,
        }
    )
    tbl = db.create_table("bench", data=data)
    tbl.create_index("scope", config=Bitmap())
    return tbl


def sql_in(allowed):
    quoted = ", ".join("'" + s.replace("'", "''") + "'" for s in allowed)
    return f"scope = {quoted}" if len(allowed) == 1 else f"scope IN ({quoted})"


def lance_search_fn(w, tbl, refine_factor):
    filters = [sql_in(w.allowed(i)) for i in range(w.q)]
    queries = w.queries

    def search(i):
        q = (
            tbl.search(queries[i], vector_column_name="vector")
            .distance_type("cosine")
            .where(filters[i], prefilter=True)
            .select(["id", "_distance"])
            .limit(K)
        )
        if refine_factor:
            q = q.refine_factor(refine_factor)
        return q.to_arrow().column("id").to_pylist()

    return search


def lance_plan(w, tbl, refine_factor):
    q = (
        tbl.search(w.queries[0], vector_column_name="vector")
        .distance_type("cosine")
        .where(sql_in(w.allowed(0)), prefilter=True)
        .select(["id", "_distance"])
        .limit(K)
    )
    if refine_factor:
        q = q.refine_factor(refine_factor)
    return q.explain_plan(verbose=True)


def run_lancedb_flat(w, truth, tmp):
    import lancedb

    t0 = time.perf_counter()
    tbl = lance_table(w, tmp, "lance-flat")
    build_s = time.perf_counter() - t0
    log(f"lancedb-flat: ingested {w.n} rows + bitmap index in {build_s:.2f}s")
    plan = lance_plan(w, tbl, None)
    if "ANN" in plan:
        raise SystemExit(f"lancedb-flat: expected a flat scan, the plan uses an index:\n{plan}")
    stats = measure(w, truth, lance_search_fn(w, tbl, None), "lancedb-flat")
    config = (
        f"lancedb {lancedb.__version__}, no vector index (flat), BITMAP on scope, "
        f"cosine, prefilter"
    )
    emit(w, "lancedb-flat", stats, build_s, config)


def run_lancedb_index(w, truth, tmp, refine_factor):
    import lancedb
    from lancedb.index import HnswSq

    t0 = time.perf_counter()
    tbl = lance_table(w, tmp, "lance-index")
    t1 = time.perf_counter()
    # The index metric must be the query's distance type, else Lance silently searches flat.
    # Default parameters, like scopemem's IvfHnswSqIndexBuilder::default().
    tbl.create_index("vector", config=HnswSq(distance_type="cosine"))
    build_s = time.perf_counter() - t0
    log(
        f"lancedb-index: ingested {w.n} rows + bitmap in {t1 - t0:.2f}s, "
        f"IVF_HNSW_SQ in {time.perf_counter() - t1:.2f}s"
    )
    plan = lance_plan(w, tbl, refine_factor)
    if "ANN" not in plan:
        raise SystemExit(f"lancedb-index: the plan does not use the vector index:\n{plan}")
    stats = measure(w, truth, lance_search_fn(w, tbl, refine_factor), "lancedb-index")
    config = (
        f"lancedb {lancedb.__version__}, IVF_HNSW_SQ cosine (default params), BITMAP on scope, "
        f"prefilter, refine_factor={refine_factor or 'none'}"
    )
    emit(w, "lancedb-index", stats, build_s, config)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="neutral workload directory")
    ap.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated subset of {','.join(ALL_SYSTEMS)} (default: all)",
    )
    ap.add_argument(
        "--refine-factor",
        type=int,
        default=DEFAULT_REFINE_FACTOR,
        help=f"refine factor for lancedb-index, 0 = none (default {DEFAULT_REFINE_FACTOR})",
    )
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {unknown}; known: {', '.join(ALL_SYSTEMS)}")

    t0 = time.perf_counter()
    w = Workload(args.dir)
    log(f"workload {w.name}: {w.n} rows, {len(set(w.scopes))} scopes, {w.q} queries")
    truth = ground_truth(w)
    sizes = sorted(len(t) for t in truth)
    log(
        f"ground truth (numpy, exact) in {time.perf_counter() - t0:.2f}s; "
        f"truth sizes min {sizes[0]} max {sizes[-1]}"
    )

    for system in systems:
        tmp = tempfile.mkdtemp(prefix=f"scopemem-bench-{system}-")
        try:
            log(f"{system}: building in {tmp}")
            if system == "chromadb":
                run_chromadb(w, truth, tmp)
            elif system == "lancedb-flat":
                run_lancedb_flat(w, truth, tmp)
            else:
                run_lancedb_index(w, truth, tmp, args.refine_factor)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
