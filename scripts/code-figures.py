#!/usr/bin/env python3
"""Function-length figures of the workspace's production Rust code, as the 2026-11 code review
took them: comments, strings and chars stripped; every `fn NAME` scanned to its first `{` (or
`;`) and brace-matched to its end; a function's length is the lines from its `fn` line to its
closing brace. "Production" leaves out tests/, benches/, examples/, `#[cfg(test)]` modules and
`#[test]` functions. Prints count, median, p90, max and the functions over 80 lines.

Usage: python3 scripts/code-figures.py [ROOT]   (ROOT: a checkout; default: this one)
"""
import os
import re
import statistics
import sys


def strip(src):
    """Blanks comments, strings and char literals, keeping newlines."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = '"' + hashes
            j = src.find(end, i + len(hashes) + 2)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", src[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", src[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_spans(code):
    """Line ranges of `#[cfg(test)]` items and `#[test]` functions."""
    spans = []
    for m in re.finditer(r"#\[(cfg\(test\)|test)\]", code):
        start = code.count("\n", 0, m.start())
        k = code.find("{", m.end())
        semi = code.find(";", m.end())
        if k < 0 or (0 <= semi < k):
            continue
        end = match_brace(code, k)
        spans.append((start, code.count("\n", 0, end)))
    return spans


def match_brace(code, k):
    depth = 0
    for j in range(k, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def functions(path):
    code = strip(open(path, encoding="utf-8").read())
    tests = test_spans(code)
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", code):
        k = code.find("{", m.end())
        semi = code.find(";", m.end())
        if k < 0 or (0 <= semi < k):
            continue
        first = code.count("\n", 0, m.start())
        last = code.count("\n", 0, match_brace(code, k))
        if any(a <= first <= b for a, b in tests):
            continue
        yield m.group(1), first + 1, last - first + 1


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    lengths = []
    for d, dirs, files in os.walk(os.path.join(root, "crates")):
        dirs[:] = [x for x in dirs if x not in ("tests", "benches", "examples", "target")]
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                for name, line, n in functions(p):
                    lengths.append((n, os.path.relpath(p, root), line, name))
    ns = sorted(n for n, *_ in lengths)
    p90 = ns[int(0.9 * (len(ns) - 1))]
    print(f"production fns: {len(ns)}, median {statistics.median(ns):.0f}, p90 {p90}, max {ns[-1]}, "
          f"over 50: {sum(n > 50 for n in ns)}, over 80: {sum(n > 80 for n in ns)}")
    for n, p, line, name in sorted(lengths, reverse=True):
        if n > 80:
            print(f"  {n:4d}  {p}:{line} {name}")


if __name__ == "__main__":
    main()
