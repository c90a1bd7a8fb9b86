"""Linear combinations of a matrix function's derivatives, merged after differentiation.

sum_t s_t matfun_d1(A, E, p_t, B) with scalars s_t (the tangent of a sum of gradients of traces of matrix
functions of one matrix, as the terms of an Ogden law give) becomes one eig_d1(A, E, g, B) with the
divided differences g = sum_t s_t f_t[lam_i, lam_j]: each direction B is rotated into the eigenbasis and
back once, not once per term. Exact where eigenvalues coincide as the terms are: g combines the same
divided differences matfun_d1 uses (engine/numeric/spectral.py) before they multiply B.
"""
from __future__ import annotations

from ..ir.core import Builder, Graph
from .dce import dce


def merge_matfun_derivatives(graph: Graph) -> Graph:
    if not any(e.op == "matfun_d1" for e in graph.eqns):
        return graph
    b = Builder(Graph(dict(graph.inputs), dict(graph.params), [], {}))
    env, terms = {}, {}          # terms: Var -> ((A, E, B), g), the Var being eig_d1(A, E, g, B)
    with b.active():
        for e in graph.eqns:
            args = [env.get(a, a) for a in e.args]
            out = b.emit(e.op, *args, **dict(e.attrs))
            t = _terms(b, e, args, terms)
            if t is not None:
                if e.op in ("add", "sub"):
                    out = b.emit("eig_d1", t[0][0], t[0][1], t[1], t[0][2])
                terms[out] = t
            env[e.out] = out
    outputs = {name: env.get(v, v) for name, v in graph.outputs.items()}
    return dce(Graph(b.graph.inputs, b.graph.params, b.graph.eqns, outputs))


def _terms(b, e, args, terms):
    """((A, E, B), g) when e's result is a linear combination of derivatives of matrix functions of A
    (decomposed as E) in the directions B, with the combined divided differences g; else None."""
    if e.op == "matfun_d1":
        a, ev, p, direction = args
        return (a, ev, direction), b.emit("divdiff", a, ev, p, **dict(e.attrs))
    known = [terms.get(x) for x in args]
    if e.op == "mul":
        for t, s in ((known[0], args[1]), (known[-1], args[0])):
            if t is not None and s.shape == ():
                return t[0], t[1] * s
    if e.op == "neg" and known[0] is not None:
        return known[0][0], -known[0][1]
    if e.op in ("add", "sub") and None not in known and args[0].shape == args[1].shape and \
            all(x is y for x, y in zip(*(t[0] for t in known))):
        g0, g1 = known[0][1], known[1][1]
        return known[0][0], g0 + g1 if e.op == "add" else g0 - g1
    return None
