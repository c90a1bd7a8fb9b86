"""Selects decided by the select around them: where a value is read only under select(c, ., .), a
select on the same condition c inside it takes the same branch. Exact (the same bits in every element,
NaN and signed zeros included), as the rewritten value is read only where c says:

    select(c, f(select(c, a, z1), y), z2)  ->  select(c, f(a, y), z2)     (and in the false branch alike)

`where`'s derivative makes these: the cotangent of a branch is select(c, ct, 0), and each elementwise
rule under the mask guards its product again (engine/ir/rules.py), so the gradient of an EAM pair
term carried ten selects of one mask where one decides. An equation is rewritten only if the select
(or an equation being rewritten) is its one reader, so nothing is computed twice, and only elementwise
equations of the select's shape (element i reads element i of c).
"""
from __future__ import annotations

from ..ir.core import Builder, Graph
from ..ir.op import OPS
from .dce import dce

MAX_DEPTH = 64          # equations followed down from a select


def simplify_selects(graph: Graph) -> Graph:
    if not any(e.op == "select" for e in graph.eqns):
        return graph
    return _Decider(graph).run()


class _Decider:
    def __init__(self, graph):
        self.g = graph
        self.prod = graph.producers()
        self.uses = {}
        for e in graph.eqns:
            for a in e.args:
                self.uses[a] = self.uses.get(a, 0) + 1
        for v in graph.outputs.values():
            self.uses[v] = self.uses.get(v, 0) + 1
        self.b = Builder(Graph(dict(graph.inputs), dict(graph.params), [], {}))
        self.env = {}           # old Var -> its Var in the new graph
        self.memo = {}

    def run(self):
        with self.b.active():
            for e in self.g.eqns:
                if e.op == "select":
                    c = self.env.get(e.args[0], e.args[0])
                    out = self.b.emit("select", c, self.decide(e.args[1], e.args[0], True, e.out.shape, 0),
                                      self.decide(e.args[2], e.args[0], False, e.out.shape, 0))
                else:
                    out = self.b.emit(e.op, *[self.env.get(a, a) for a in e.args], **dict(e.attrs))
                self.env[e.out] = out
        outputs = {n: self.env.get(v, v) for n, v in self.g.outputs.items()}
        return dce(Graph(self.b.graph.inputs, self.b.graph.params, self.b.graph.eqns, outputs))

    def decide(self, v, c, taken, shape, depth):
        """v (of the old graph) where it is read only under select(c, ...) taking branch `taken`: its Var
        in the new graph, with the selects on c inside it decided."""
        same = self.env.get(v, v)
        e = self.prod.get(v)
        if e is None or v.shape != shape or depth > MAX_DEPTH:
            return same
        if e.op == "select" and e.args[0] is c:
            return self.decide(e.args[1] if taken else e.args[2], c, taken, shape, depth + 1)
        op = OPS[e.op]
        if op.kind != "elementwise" or self.uses.get(v, 0) != 1:
            return same
        key = (v, c, taken)
        if key not in self.memo:
            args = [self.decide(a, c, taken, shape, depth + 1) if k not in op.whole else self.env.get(a, a)
                    for k, a in enumerate(e.args)]
            changed = any(n is not self.env.get(a, a) for n, a in zip(args, e.args))
            self.memo[key] = self.b.emit(e.op, *args, **dict(e.attrs)) if changed else same
        return self.memo[key]
