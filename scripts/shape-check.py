#!/usr/bin/env python3
"""CI keeps the shape: fails on a new import circle in any crate, or a new production function
over 80 lines, against the checked-in list `scripts/shape-baseline.txt` of what is still there
— a list that may only shrink.

- A circle (scripts/import-graph.py) or a function over 80 lines (scripts/code-figures.py) that
  the list does not name fails the check: shorten the function, or cut the import that closes
  the circle.
- A listed function that grew fails too: a long function is not a place to add to.
- A listed entry that is gone (the circle broken, the function under 81 lines, renamed or moved)
  fails with "remove it from the list": the list says what is left, never more, so it can only
  shrink.

Functions are named `path name` (no line numbers: they move with every edit); two functions of
one name in one file share the larger length.

Usage: python3 scripts/shape-check.py            check (exit 1 on a difference)
       python3 scripts/shape-check.py --write    write the list from the code as it is (only
                                                 to start the list, or after shrinking it)
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE = os.path.join(HERE, "shape-baseline.txt")
LIMIT = 80


def load(name):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def long_functions():
    """{"path name": lines} for every production function over LIMIT lines."""
    figures = load("code-figures")
    found = {}
    for d, dirs, files in os.walk(os.path.join(ROOT, "crates")):
        dirs[:] = [x for x in dirs if x not in ("tests", "benches", "examples", "target")]
        for f in sorted(files):
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                for name, _line, n in figures.functions(p):
                    if n > LIMIT:
                        key = f"{os.path.relpath(p, ROOT)} {name}"
                        found[key] = max(n, found.get(key, 0))
    return found


def import_circles():
    """{"crate: a ↔ b"} for every circle in every crate."""
    graph = load("import-graph")
    found = set()
    for crate in sorted(os.listdir(os.path.join(ROOT, "crates"))):
        src = os.path.join(ROOT, "crates", crate, "src")
        if os.path.isdir(src):
            for c in graph.circles(graph.edges(src)):
                found.add(f"{crate}: {' ↔ '.join(c)}")
    return found


def read_baseline():
    functions, circles = {}, set()
    if not os.path.exists(BASELINE):
        return functions, circles
    for line in open(BASELINE, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition(" ")
        if kind == "circle":
            circles.add(rest)
        elif kind == "fn":
            n, _, key = rest.partition(" ")
            functions[key] = int(n)
    return functions, circles


def write_baseline(functions, circles):
    with open(BASELINE, "w", encoding="utf-8") as out:
        out.write("# What is left of the shape to fix (scripts/shape-check.py): import circles and production\n"
                  "# functions over 80 lines. This list may only shrink: CI fails on anything not in it, on a\n"
                  "# listed function that grew, and on an entry that is gone (remove it).\n")
        for c in sorted(circles):
            out.write(f"circle {c}\n")
        for key, n in sorted(functions.items(), key=lambda kv: (-kv[1], kv[0])):
            out.write(f"fn {n} {key}\n")


def within(small, large):
    """Whether circle `small` is made of modules of circle `large`, in the same crate."""
    (crate_s, _, mods_s), (crate_l, _, mods_l) = small.partition(": "), large.partition(": ")
    return crate_s == crate_l and set(mods_s.split(" ↔ ")) <= set(mods_l.split(" ↔ "))


def main():
    functions, circles = long_functions(), import_circles()
    if "--write" in sys.argv:
        write_baseline(functions, circles)
        print(f"wrote {BASELINE}: {len(circles)} circles, {len(functions)} functions over {LIMIT} lines")
        return 0
    listed_fns, listed_circles = read_baseline()
    problems = []
    for c in sorted(circles - listed_circles):
        if any(within(c, old) for old in listed_circles):
            problems.append(f"circle {c} is what is left of a listed one: list it in its place")
        else:
            problems.append(f"new import circle in {c}: cut the import that closes it")
    for c in sorted(listed_circles - circles):
        problems.append(f"circle {c} is gone or smaller: update scripts/shape-baseline.txt")
    for key, n in sorted(functions.items()):
        if key not in listed_fns:
            problems.append(f"{key}: {n} lines (over {LIMIT}): split it")
        elif n > listed_fns[key]:
            problems.append(f"{key}: grew from {listed_fns[key]} to {n} lines: split it, do not add to it")
    for key in sorted(set(listed_fns) - set(functions)):
        problems.append(f"{key} is no longer over {LIMIT} lines (or moved): remove it from scripts/shape-baseline.txt")
    print(f"shape: {len(circles)} import circles, {len(functions)} production functions over {LIMIT} lines "
          f"(longest {max(functions.values(), default=0)}); listed: {len(listed_circles)} and {len(listed_fns)}")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
