#!/usr/bin/env python3
"""The crates' import graphs, from their own source: which module uses which.

Why: the layering rule (the core crate's time words, fact folding and redaction < config <
scope < embed < store < migrate < memory < transfer < host < api; lower layers never import
higher ones) and "no cycles between sibling modules" are easy to break and invisible in review.
Where a layer could become a crate boundary it did: config, scope, redaction, the fact folding
and the time words are crates/core, which cannot import the service crate at all. Inside each
crate (src/ and crates/core/src/), this reads every `crate::`, `super::` and `self::` path (in
`use` lines and inline), resolves it to the deepest module that exists, and prints

  - the edges between top-level modules, with how many files make each;
  - the upward edges (against the layer order), with the files that make them;
  - the cycles: strongly connected groups of top-level modules, and of sibling modules
    inside each module (files that import each other, directly or around a loop).

Usage: python3 scripts/import-graph.py [src-dir ...] [--check]  (default: src crates/core/src)
--check exits 1 when any upward edge or cycle is found.
"""

import os
import re
import sys
from collections import defaultdict

# migrate (backfill, re-embed) works on the store and the embedder only; the memory service
# starts and paces it, so it sits below memory.
LAYERS = ["time_range", "time_words", "fact", "redact", "config", "scope", "embed", "store", "migrate", "memory", "transfer", "host", "api"]
# Crate-wide helpers every layer may use (they import nothing of the crate's layers).
SHARED = {"task", "lib", "main", "test_logs"}

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}\s*;", re.S)
COMMENT = re.compile(r"//[^\n]*")


def module_of(src, path):
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def modules(src):
    found = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(root, f)
                found[module_of(src, p)] = p
    return found


def resolve(base, kind, rest, known):
    """The deepest known module a path names, or None (a path outside the crate's modules)."""
    if kind == "crate":
        parts = []
    elif kind == "self":
        parts = list(base)
    else:
        parts = list(base[:-1])
    for seg in rest:
        if seg == "super":
            parts = parts[:-1]
        else:
            parts.append(seg)
    while parts and tuple(parts) not in known:
        parts.pop()
    return tuple(parts)


def flatten_group(prefix, body):
    """`use crate::a::{b, c::d}`: the paths it names (nested groups one level deep suffice)."""
    out = []
    depth, cur = 0, ""
    for ch in body + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            item = cur.strip()
            cur = ""
            if not item:
                continue
            m = re.match(r"([A-Za-z0-9_:]*?)::\{(.*)\}$", item, re.S)
            if m:
                out += flatten_group(prefix + "::" + m.group(1), m.group(2))
            else:
                out.append(prefix + "::" + item.split(" as ")[0].strip())
        else:
            cur += ch
    return out


def edges(src):
    known = modules(src)
    result = defaultdict(set)  # (from_module, to_module) -> set of files
    for mod, path in known.items():
        text = COMMENT.sub("", open(path, encoding="utf-8").read())
        paths = []
        for m in USE_GROUP.finditer(text):
            for p in flatten_group(m.group(1) + m.group(2), m.group(3)):
                paths.append(p)
        text = USE_GROUP.sub("", text)
        paths += [m.group(0) for m in PATH.finditer(text)]
        for p in paths:
            kind, *rest = p.split("::")
            target = resolve(mod, kind, [r for r in rest if r and r != "self"], known)
            if target and target != mod and not is_ancestor(target, mod):
                result[(mod, target)].add(os.path.relpath(path, os.path.dirname(src)))
    return known, result


def is_ancestor(a, b):
    return len(a) < len(b) and b[: len(a)] == a


def sccs(nodes, adj):
    """Tarjan: the strongly connected groups with more than one member."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "crate"


def report(src):
    """Print one crate's graph; whether it has an upward edge or a cycle."""
    known, result = edges(src)

    top = defaultdict(set)
    for (a, b), files in result.items():
        if a[0] != b[0]:
            top[(a[0], b[0])] |= files
    print(f"== {os.path.relpath(src, ROOT)}")
    print(f"modules: {len(known)} files, {len({m[0] for m in known if m})} top-level")
    print("\ntop-level edges (files):")
    for (a, b), files in sorted(top.items()):
        print(f"  {a} -> {b} ({len(files)})")

    rank = {m: i for i, m in enumerate(LAYERS)}
    upward = [
        (a, b, files)
        for (a, b), files in sorted(top.items())
        if a not in SHARED and b not in SHARED and rank.get(a, -1) < rank.get(b, -1)
    ]
    print(f"\nupward edges (layer order {' < '.join(LAYERS)}): {len(upward)}")
    for a, b, files in upward:
        print(f"  {a} -> {b}: {', '.join(sorted(files))}")

    adj = defaultdict(set)
    for a, b in top:
        adj[a].add(b)
    cycles = sccs({m for e in top for m in e}, adj)
    # Sibling cycles: inside each module, files (or sub-modules) importing each other.
    for parent in sorted({m[:-1] for m in known if len(m) > 1}):
        sib = defaultdict(set)
        for (a, b) in result:
            if len(a) > len(parent) and len(b) > len(parent) and a[: len(parent)] == parent == b[: len(parent)]:
                x, y = a[: len(parent) + 1], b[: len(parent) + 1]
                if x != y:
                    sib[x].add(y)
        for group in sccs({m for v in sib for m in [v, *sib[v]]}, sib):
            cycles.append([name(m) for m in group])
    print(f"\ncycles: {len(cycles)}")
    for group in cycles:
        print("  " + " <-> ".join(group if isinstance(group[0], str) else map(name, group)))
    print()
    return bool(upward or cycles)


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    check = "--check" in sys.argv
    roots = args or [os.path.join(ROOT, "src"), os.path.join(ROOT, "crates", "core", "src")]
    broken = [src for src in roots if report(os.path.normpath(src))]
    if check and broken:
        sys.exit(1)


if __name__ == "__main__":
    main()
