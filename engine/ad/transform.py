"""Derivatives as IR -> IR transforms: forward (vector) mode and reverse mode, both driven by each
op's derivative rule (its entry in engine/ir/ops/). Each appends equations to the same Builder as
the values, so hash-consing shares work between a value and its derivatives (EAM's exp is computed
once)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Builder, Var
from ..ir.op import OPS
from ..errors import SpecError
from ..ir.rules import IndexContribution, Unsupported, batched_index, from_jacobians, from_partials, hard_zeros


def _custom_rule_as_eqn_rule(rule, b):
    """A user function's hand-written partials as a rule over its arguments: elementwise partials
    for mapped functions, Jacobian blocks (out.shape + arg.shape) for tensor arguments."""
    partials = tuple(rule.partial(b, k) for k in range(len(rule.args)))
    return (from_partials if rule.mapped else from_jacobians)(lambda out, *args: partials)


class _Call:
    """An equation-like view of a custom rule application: out = fn(*args)."""

    attrs = ()                  # a user function has no static attributes

    def __init__(self, out, args):
        self.out, self.args = out, args


def _depends(graph, seeds):
    """Vars whose value depends on any of `seeds` for differentiation (not through a `cut` op)."""
    live = set(seeds)
    for e in graph.eqns:
        if not OPS[e.op].rule.cut and any(a in live for a in e.args):
            live.add(e.out)
    return live


def _ancestors(graph, of):
    """Vars `of` is computed from (itself included): forward mode differentiates only these, so an
    equation another derivative left behind (dead until DCE) is never differentiated."""
    need = {of}
    for e in reversed(graph.eqns):
        if e.out in need:
            need.update(e.args)
    return need


def _usable_rule(custom, v, live):
    """The hand-written rule for v, if it covers every differentiated value its body reads
    (a rule gives partials for the function's arguments only, not for the params it uses)."""
    rule = custom.get(v)
    if rule is None or any(f in live for f in rule.free):
        return None
    return rule


def _seed(b, v):
    """The identity tangent/cotangent of v, with v's own shape as batch axes."""
    if not v.shape:
        return b.const(1.0)
    return b.emit("eye", shape=v.shape)


def jacobian_forward(b: Builder, custom: dict, wrt: Var, of: Var, seed: Var | None = None) -> Var | None:
    """d of / d wrt by forward vector mode, shape of.shape + wrt.shape (None if identically zero).
    With `seed` (a direction shaped like wrt): the Jacobian-vector product, shape of.shape."""
    g = b.graph
    bs = wrt.shape if seed is None else ()
    if of is wrt:
        return _seed(b, of) if seed is None else seed
    tangents = {wrt: _seed(b, wrt) if seed is None else seed}
    live = _depends(g, [wrt])
    if of not in live:
        return None
    live &= _ancestors(g, of)
    with b.active():
        for e in list(g.eqns):
            if e.out not in live or e.out is wrt:
                continue
            rule = _usable_rule(custom, e.out, live)
            if rule is not None:
                eq, r = _Call(e.out, rule.args), _custom_rule_as_eqn_rule(rule, b)
            else:
                eq, r = e, OPS[e.op].rule
            ts = [tangents.get(a) for a in eq.args]
            t = _chained_jvp(b, eq, r, ts) if bs else NotImplemented
            if t is NotImplemented:
                t = r.jvp(eq, [_full(x) for x in ts], bs)
            if t is not None:
                tangents[e.out] = t
            if e.out is of:
                break
        t = _full(tangents.get(of))
        if t is None:
            return None
        # tangents carry the directions first: (*wrt, *of) -> (*of, *wrt)
        nw, no = len(bs), of.rank
        return b.emit("transpose", t, perm=tuple(range(nw, nw + no)) + tuple(range(nw)))


@dataclass(frozen=True)
class _Chained:
    """The tangent of a scalar as coef * base (base: the tangent of a scalar, one entry per direction).
    Along a chain of scalar operations (log J, (log J)**2, 1/J, their products in a Hessian) the
    partials multiply into the scalar coef, and the directions are scaled once, where something other
    than such a chain reads the tangent (statement-level preaccumulation), instead of by every
    operation of the chain."""
    coef: Var
    base: Var


def _full(t):
    return t.base * t.coef if isinstance(t, _Chained) else t


def _chained_jvp(b, eq, r, ts):
    """The tangent of eq as a _Chained if eq is an elementwise op on scalars whose differentiated
    arguments have tangents of one base (None if it is zero); NotImplemented otherwise."""
    if r.partials is None or eq.out.shape or all(t is None for t in ts):
        return NotImplemented
    bases = {t.base if isinstance(t, _Chained) else t for t in ts if t is not None}
    if len(bases) != 1:
        return NotImplemented
    coef = None
    for t, p in zip(ts, r.partials(eq.out, *eq.args, **dict(eq.attrs))):
        if t is None or p is None:
            continue
        p = p if isinstance(p, Var) else b.const(float(p))
        term = t.coef * p if isinstance(t, _Chained) else p
        coef = term if coef is None else coef + term
    return None if coef is None else _Chained(coef, bases.pop())


def jacobian_reverse(b: Builder, custom: dict, wrt: Var, of: Var, seed: Var | None = None) -> Var | None:
    """d of / d wrt by reverse mode (cotangents for every output element at once), shape
    of.shape + wrt.shape (None if identically zero). With `seed` (a cotangent shaped like of):
    the vector-Jacobian product, shape wrt.shape."""
    g = b.graph
    bs = of.shape if seed is None else ()
    if of is wrt:
        return _seed(b, of) if seed is None else seed
    live = _depends(g, [wrt])
    if of not in live:
        return None
    pending = {of: [_seed(b, of) if seed is None else seed]}     # var -> list of Var / IndexContribution
    masks = {}                         # var -> the mask of each pending contribution (see rules.py)
    hard = set()                       # vars whose cotangent may hold exact zeros of a where (rules.hard_zeros)
    with b.active():
        eqns = list(g.eqns)
        stop = next(i for i, e in enumerate(eqns) if e.out is of)
        for e in reversed(eqns[: stop + 1]):
            if e.out not in pending or e.out not in live:
                continue
            contribs = pending.pop(e.out)
            ct = _accumulate(b, contribs, bs + e.out.shape)
            ms = masks.pop(e.out, [])
            mask = ms[0] if len(ms) == len(contribs) and all(m is ms[0] for m in ms) else None
            rule = _usable_rule(custom, e.out, live)
            if rule is not None:
                args = rule.args
                eq, r = _Call(e.out, args), _custom_rule_as_eqn_rule(rule, b)
            else:
                args, eq, r = e.args, e, OPS[e.op].rule
            zeros = e.out in hard or r.zeros
            with hard_zeros(e.out in hard):
                if r.masks is not None:
                    cts, arg_masks = r.vjp(eq, ct, bs, mask), r.masks(eq, mask)
                else:
                    cts, arg_masks = r.vjp(eq, ct, bs), [None] * len(args)
            for a, c, m in zip(args, cts, arg_masks):
                if isinstance(c, Unsupported):
                    if a in live:
                        raise SpecError(c.message)
                elif c is not None and a in live:
                    pending.setdefault(a, []).append(c)
                    masks.setdefault(a, []).append(m)
                    if zeros:
                        hard.add(a)
        contribs = pending.get(wrt)
        return None if not contribs else _accumulate(b, contribs, bs + wrt.shape)


def _accumulate(b, contribs, shape):
    """Sum cotangent contributions; partial ones (slices, indices) update the sum in place."""
    full = [c for c in contribs if isinstance(c, Var)]
    parts = [c for c in contribs if isinstance(c, IndexContribution)]
    total = None
    for c in full:
        total = c if total is None else total + c
    if total is None and len(parts) == 1 and _covers(parts[0].index, shape[len(shape) - len(parts[0].index):]):
        return parts[0].ct
    nb = len(shape) - (len(parts[0].index) if parts else 0)
    for p in parts:
        if total is None:
            total = b.const(0.0, shape)
        total = b.emit("index_add", total, p.ct, index=batched_index(p.index, shape[:nb]))
    return total


def _covers(index, shape):
    return all(isinstance(i, tuple) and i == (0, n, 1) for i, n in zip(index, shape))
