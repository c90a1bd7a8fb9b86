"""Dead-code elimination: keep only the equations the graph's outputs need (order preserved)."""
from __future__ import annotations

from ..ir.core import Graph


def dce(graph: Graph) -> Graph:
    needed = set(graph.outputs.values())
    kept = []
    for e in reversed(graph.eqns):
        if e.out in needed:
            kept.append(e)
            needed.update(e.args)
    return Graph(dict(graph.inputs), dict(graph.params), kept[::-1], dict(graph.outputs))
