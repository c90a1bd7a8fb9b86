"""Small tensors become straight-line scalar code: loops with few iterations are unrolled, their
constant index arithmetic is folded, and when every workspace access ends up at a constant offset
the workspace slots become local variables (registers), as a hand-written 3x3 kernel would have.

This is a pass over our own generated lines (never user text): `for x in range(N):` headers, four
spaces per level, and index expressions made of integer literals, `+` and `*`.
"""
from __future__ import annotations

import re

MAX_AXIS = 16           # unroll loops over small tensor axes only (a 100-vector keeps its loop)
MAX_TRIPS = 256         # unroll a loop nest of at most this many iterations in all
MAX_LINES = 1500        # ... and at most this many statement lines once unrolled
MAX_KERNEL = 4000       # a kernel longer than this once unrolled keeps its loops: numba's compile
                        # time grows faster than linearly with the length of a function

_FOR = re.compile(r"^( *)for (\w+) in range\((\d+)\):$")
_INDEX = re.compile(r"\b(work|in_\w+|out_\w+|p_\w+|__a\w+)\[([^\[\]]+)\]")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _parse(lines, start, depth):
    """Lines at indentation >= depth from `start` as a tree: str lines and (header, var, n, body)."""
    out, i = [], start
    while i < len(lines) and (_indent(lines[i]) >= depth or not lines[i].strip()):
        m = _FOR.match(lines[i])
        if m and len(m.group(1)) == depth:
            body, i = _parse(lines, i + 1, depth + 4)
            out.append((m.group(0), m.group(2), int(m.group(3)), body))
            continue
        out.append(lines[i])
        i += 1
    return out, i


def _size(tree):
    """(iterations, statement lines) of a subtree once fully unrolled."""
    trips, count = 1, 0
    for node in tree:
        if isinstance(node, tuple):
            t, c = _size(node[3])
            trips = max(trips, node[2] * t)
            count += node[2] * c
        elif not node.lstrip().startswith("#"):
            count += 1
    return trips, count


def _emit(tree, subst, out, first=True):
    for node in tree:
        if isinstance(node, tuple):
            header, var, n, body = node
            trips, count = _size(body)
            if n <= MAX_AXIS and n * trips <= MAX_TRIPS and n * count <= MAX_LINES:
                for k in range(n):
                    _emit(_dedent(body), {**subst, var: str(k)}, out, first and k == 0)
            else:
                out.append(_substitute(header, subst))
                _emit(body, subst, out, first)
        elif node.lstrip().startswith("#"):
            if first:
                out.append(node)
        else:
            out.append(_substitute(node, subst))


def _dedent(tree):
    out = []
    for node in tree:
        if isinstance(node, tuple):
            header, var, n, body = node
            out.append((header[4:], var, n, _dedent(body)))
        else:
            out.append(node[4:] if node.startswith("    ") else node)
    return out


def _substitute(line, subst):
    for var, value in subst.items():
        line = re.sub(rf"\b{var}\b", value, line)
    return line


def _const_index(text):
    """The value of an index made of integer literals, + and *, or None."""
    total = 0
    for term in text.split("+"):
        prod = 1
        for factor in term.split("*"):
            factor = factor.strip()
            if not re.fullmatch(r"-?\d+", factor):
                return None
            prod *= int(factor)
        total += prod
    return total


def unroll(lines):
    """Unrolled, index-folded lines; workspace slots become locals `w<k>` when all are constant."""
    tree, _ = _parse(lines, 0, 4)
    out = []
    _emit(tree, {}, out)
    if len(out) > MAX_KERNEL:
        return lines

    def fold(m):
        k = _const_index(m.group(2))
        return m.group(0) if k is None else f"{m.group(1)}[{k}]"
    out = [_INDEX.sub(fold, line) if not line.lstrip().startswith("#") else line for line in out]
    code = [line for line in out if not line.lstrip().startswith("#")]
    if all(re.fullmatch(r"\d+", m) for line in code for m in re.findall(r"\bwork\[([^\[\]]+)\]", line)):
        out = [re.sub(r"\bwork\[(\d+)\]", r"w\1", line) if not line.lstrip().startswith("#") else line
               for line in out]
    return out
