#!/usr/bin/env python3
"""The import graph of one crate's modules (a file is a module; `mod.rs` is its folder), and
every circle in it. Edges are the `crate::…` and `super::…` paths a file names outside its
`#[cfg(test)]` code. Exits 1 when there is a circle, so CI or a reviewer can use it.

Usage: python3 scripts/import-graph.py crates/engine/src [--modules]
  --modules  fold files into their top-level module (`drivers`, `harness`, …) first
"""
import os
import re
import sys


def module_of(root, path):
    rel = os.path.relpath(path, root)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts) or "crate"


def strip_tests(src):
    """Removes every `#[cfg(test)]` item (brace-matched)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\][^{;]*\{", src)
        if not m:
            return src
        depth, j = 0, m.end() - 1
        while j < len(src):
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            if depth == 0:
                break
            j += 1
        src = src[: m.start()] + src[j + 1 :]


def edges(root):
    mods = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                mods[module_of(root, p)] = p
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        src = strip_tests(open(p, encoding="utf-8").read())
        src = re.sub(r"//[^\n]*", "", src)
        here = m.split("::") if m != "crate" else []
        for path in re.findall(r"\b((?:crate|super)(?:::\w+)+)", src):
            segs = path.split("::")
            if segs[0] == "super":
                base = here[:-1] if not p.endswith("mod.rs") else here[:-1]
                if p.endswith("mod.rs"):
                    base = here[:-1]
                segs = base + segs[1:]
            else:
                segs = segs[1:]
            # the longest prefix that is a module
            for k in range(len(segs), 0, -1):
                cand = "::".join(segs[:k])
                if cand in mods and cand != m:
                    graph[m].add(cand)
                    break
    return graph


def fold(graph):
    top = lambda m: m.split("::")[0]
    out = {}
    for a, bs in graph.items():
        out.setdefault(top(a), set())
        for b in bs:
            if top(b) != top(a):
                out[top(a)].add(top(b))
    return out


def circles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1]
    graph = edges(root)
    if "--modules" in sys.argv:
        graph = fold(graph)
    found = circles(graph)
    print(f"{len(graph)} modules, {sum(len(b) for b in graph.values())} import arrows, {len(found)} circles")
    for c in found:
        print("  circle:", " ↔ ".join(c))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
