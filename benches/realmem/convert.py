"""Converts two personas of RealMem (zhiyuan5986/RealMemBench, Apache-2.0) into the two files
beside this script, for `benches/madial.rs`'s English set (issue 77, item 6).

Why a converted subset rather than the files: the upstream files hold every turn of about 200
sessions per persona (25 MB for ten); the bench needs, per question, only the turns of its
session before it, the question, and the memories of the sessions before it. Two personas keep
the vendored data near 1 MB and the bench's embedding work to minutes on 2 cores.

What it keeps (nothing is rewritten, only selected and renumbered):
- every memory point a session extracted (`extracted_memory[].content`; the one that is a JSON
  object is kept as its JSON text), once per distinct text per persona, numbered in order of
  first appearance, with the index of the session it first appeared in;
- every query turn (`is_query`) that has turns before it in its session: those turns, the query,
  and as relevant the memories whose text is one of the `memory_used` of the assistant's reply
  to it (the upstream label).

Run from a checkout of the upstream repository:
    python3 benches/realmem/convert.py <RealMemBench>/dataset benches/realmem
"""

import json
import sys
from pathlib import Path

PERSONAS = ["Kenta_Tanaka", "Kim_Ji_young"]


def text_of(content):
    return content.strip() if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def main(source: Path, out: Path) -> None:
    memories, questions = [], []
    for persona in PERSONAS:
        sessions = json.loads((source / f"{persona}_dialogues_256k.json").read_text())["dialogues"]
        ids = {}
        for order, session in enumerate(sessions):
            for m in session["extracted_memory"]:
                text = text_of(m["content"])
                if text and text not in ids:
                    ids[text] = len(memories)
                    memories.append({"id": len(memories), "user": persona, "session": order,
                                     "content": text})
        for order, session in enumerate(sessions):
            turns = session["dialogue_turns"]
            for i, turn in enumerate(turns):
                if not turn.get("is_query") or i == 0:
                    continue
                reply = turns[i + 1] if i + 1 < len(turns) else {}
                used = reply.get("memory_used") or turn.get("memory_used") or []
                relevant = sorted({ids[text_of(u["content"])] for u in used
                                   if text_of(u["content"]) in ids
                                   and memories[ids[text_of(u["content"])]]["session"] < order})
                if not relevant:
                    continue
                questions.append({
                    "id": len(questions), "user": persona, "session": order,
                    "query-id": turn.get("query_id"), "category": turn.get("category_name"),
                    "turns": [{"role": t["speaker"].lower(), "content": t["content"]}
                              for t in turns[:i]],
                    "query": turn["content"], "relevant-id": relevant,
                })
    with open(out / "realmem-memory.jsonl", "w") as f:
        for m in memories:
            f.write(json.dumps(m, ensure_ascii=False) + "\n")
    with open(out / "realmem-dialogue.jsonl", "w") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(memories)} memories, {len(questions)} questions")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
