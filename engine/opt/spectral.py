"""Spectral functions after differentiation: each matrix's eigenvalue functions computed once, and linear
combinations of matrix functions and of their derivatives merged.

- f(lam) shared: trfun(A, E, p) becomes the sum of T = f(lam) (lam = eigvalsh(A, E)), matfun(A, E, p) becomes
  U diag(T) U^T (eigvalsh_d's adjoint), and the divided differences read T and the log1p of the eigenvalue
  gaps (divdiff(A, E, p, T, G)), so a matrix function, its trace and its derivatives share their pow, log or
  exp calls, and all functions of a matrix their log1p calls. Of x**p and x**(p - 1) (a trace
  and its gradient, trfun's rules), the first is the second times lam, and the divided differences divide the
  second by lam: an Ogden term computes 3 pows where it computed 9 (each power one rounding from pow's).
- matfun_d1(A, E, p, B) becomes eig_d1(A, E, divdiff(A, E, p, T, G), B): the divided differences one value,
  computed once for all the derivatives of a matrix function (Hencky's three took three helper calls).
- sum_t s_t matfun_d1(A, E, p_t, B) with scalars s_t (the tangent of a sum of gradients of traces of matrix
  functions of one matrix, as the terms of an Ogden law give) becomes one eig_d1(A, E, g, B) with the divided
  differences g = sum_t s_t f_t[lam_i, lam_j]: each direction B is rotated into the eigenbasis and back once,
  not once per term. Exact where eigenvalues coincide as the terms are: g combines the same divided
  differences matfun_d1 uses (engine/numeric/spectral.py) before they multiply B. Likewise sum_t s_t
  U diag(T_t) U^T becomes U diag(sum_t s_t T_t) U^T (the gradient of such a sum: one rotation, not one a term).
"""
from __future__ import annotations

from ..ir.core import Builder, Graph
from ..ir.ops.spectral import KINDS
from .dce import dce

POW = KINDS["pow"]
SHIFTS = (1.0, 2.0)          # x**p = x**(p - k) lam**k for these k


def merge_matfun_derivatives(graph: Graph) -> Graph:
    if not any(e.op in ("matfun_d1", "matfun", "trfun") for e in graph.eqns):
        return graph
    b = Builder(Graph(dict(graph.inputs), dict(graph.params), [], {}))
    env, terms = {}, {}          # terms: Var -> ((A, E, B), g), the Var being eig_d1(A, E, g, B) (or, B None,
    values = _Values(b, graph)   # eigvalsh_d(A, E, g, adjoint=True))
    with b.active():
        for e in graph.eqns:
            args = [env.get(a, a) for a in e.args]
            t = _terms(b, e, args, terms, values)
            if e.op == "trfun":
                out = b.emit("reduce_sum", values.of(e, args), axes=(0,))
            elif e.op == "matfun":
                out = b.emit("eigvalsh_d", args[0], args[1], values.of(e, args), adjoint=True)
            elif e.op == "matfun_d1":          # its divided differences a value, shared by every direction
                (a, ev, direction), g = t
                out = b.emit("eig_d1", a, ev, g, direction)
            else:
                out = b.emit(e.op, *args, **dict(e.attrs))
            if t is not None:
                if e.op in ("add", "sub"):
                    a, ev, direction = t[0]
                    out = b.emit("eig_d1", a, ev, t[1], direction) if direction is not None else \
                        b.emit("eigvalsh_d", a, ev, t[1], adjoint=True)
                terms[out] = t
            env[e.out] = out
    outputs = {name: env.get(v, v) for name, v in graph.outputs.items()}
    return dce(Graph(b.graph.inputs, b.graph.params, b.graph.eqns, outputs))


class _Values:
    """T = f(lam) of each (A, E, p, kind) the graph's spectral equations name, built once in the new graph:
    a power x**p whose exponent minus k (k in SHIFTS) is another exponent q of the same matrix is x**q lam**k.
    (Multiplied up, not divided down: where lam = 0, x**q lam is 0 where x**q is finite, and where x**q is
    not, the gradient x**q is not finite either.)"""

    def __init__(self, b, graph):
        self.b, self.memo = b, {}
        prod = graph.producers()
        exponents = {}               # (A, E) -> the exponents of x**p the graph uses on it
        for e in graph.eqns:
            if e.op in ("trfun", "matfun", "matfun_d1") and e.attr("kind") == POW:
                exponents.setdefault(e.args[:2], set()).add(e.args[2])
        self.lower = {}              # exponent Var p -> (k, q): x**p = x**q lam**k, q = p - k also used
        for ps in exponents.values():
            for p in ps:
                low = next(((k, q) for k in SHIFTS for q in ps if _shifted(prod, q, p, k)), None)
                if low is not None:
                    self.lower[p] = low

    def of(self, e, args):
        """T of equation e (trfun, matfun, matfun_d1) whose arguments in the new graph are args."""
        return self._values(e.args[2], e.attr("kind"), args[0], args[1], args[2])

    def gaps(self, a, ev):
        """log1p((lam_i - lam_j)/lam_j) for ij = 01, 02, 12: what the divided differences of every power and
        log of the matrix take where lam_i and lam_j are close (elsewhere unused, NaN as may be)."""
        if (a, ev) not in self.memo:
            b = self.b
            lam = b.emit("eigvalsh", a, ev)
            x = [b.emit("getitem", lam, index=(k,)) for k in range(3)]
            lo, hi = b.emit("pack", x[0], x[0], x[1], shape=(3,)), b.emit("pack", x[1], x[2], x[2], shape=(3,))
            self.memo[(a, ev)] = b.emit("log1p", (lo - hi) / hi)
        return self.memo[(a, ev)]

    def _values(self, p0, kind, a, ev, p):
        key = (a, ev, p, kind)
        if key not in self.memo:
            b = self.b
            lam = b.emit("eigvalsh", a, ev)
            if kind != POW:
                t = b.emit("log", lam) if kind == KINDS["log"] else b.emit("exp", lam)
            elif p0 in self.lower:
                k, q0 = self.lower[p0]
                q = b.emit("sub", p, k)          # q0's own equation in the new graph (the Builder's memo)
                t = self._values(q0, kind, a, ev, q) * lam
                t = t * lam if k == 2.0 else t
            else:
                t = b.emit("pow", lam, p)
            self.memo[key] = t
        return self.memo[key]


def _shifted(prod, q, p, k):
    """Whether the exponent q is p - k."""
    e = prod.get(q)
    if e is not None and e.op == "sub" and e.args[0] is p and _const(prod, e.args[1]) == k:
        return True
    cq, cp = _const(prod, q), _const(prod, p)
    return cq is not None and cp is not None and cp - k == cq


def _const(prod, v):
    e = prod.get(v)
    return e.attr("value") if e is not None and e.op == "const" and not v.shape else None


def _terms(b, e, args, terms, values):
    """((A, E, B), g) when e's result is a linear combination of derivatives of matrix functions of A
    (decomposed as E) in the directions B, with the combined divided differences g, or ((A, E, None), w) when
    it is one of matrix functions U diag(w) U^T; else None."""
    if e.op == "matfun_d1":
        a, ev, p, direction = args
        return (a, ev, direction), b.emit("divdiff", a, ev, p, values.of(e, args), values.gaps(a, ev),
                                          **dict(e.attrs))
    if e.op == "matfun":
        return (args[0], args[1], None), values.of(e, args)
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
