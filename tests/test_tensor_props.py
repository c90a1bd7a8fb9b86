"""Hypothesis-generated expressions over the tensor language, at random shapes (rank 0 to 3, size-1
and broadcast axes, non-square matrices): forward mode == reverse mode == central differences for
first derivatives, and the Hessian of a scalar reduction (forward over reverse) == central
differences of the gradient, symmetric. Graphs are evaluated by the numpy interpreter (the oracle;
no numba compilation), and a few representative expressions are compiled to check the kernels
agree with the interpreted derivative graphs.

The generator works top-down: `expr(shape)` draws an operation that can produce `shape` and then
the operands' shapes that operation needs, so every expression is well-formed by construction.
Leaves are inputs, one per distinct shape, so inputs recur and their cotangents accumulate.
Divisions, logs and square roots are kept off zero, and `inv` gets a diagonally dominant matrix,
so finite differences are meaningful anywhere in the sampled box."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adgrad.engine.ir.interp import interpret
from ir_oracle import assert_close_to_fd, assert_compiled_matches, central_differences, derivative_graph

SMOOTH = ["sin", "cos", "tanh", "arctan", "sigmoid", "softplus", "erf", "square", "abs", "exp(tanh({}))",
          "sqrt(1 + square({}))", "log(1 + square({}))", "cbrt(2 + tanh({}))", "expm1(sin({}))",
          "log1p(sigmoid({}))", "sinh(tanh({}))", "cosh(tanh({}))", "tan(tanh({}))", "arcsin(tanh({}) / 2)",
          "arccos(tanh({}) / 2)", "-{}"]
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "norm", "logsumexp"]
LETTERS = "abcdefgh"


def _with(shape, axis, d):
    return shape[:axis] + (d,) + shape[axis:]


def _axis_text(axis, rank, draw):
    return str(axis - rank if draw(st.booleans()) else axis)


class Expressions:
    """Draws expression texts of a requested shape; `inputs` collects the leaves' shapes."""

    def __init__(self, draw, max_depth):
        self.draw = draw
        self.max_depth = max_depth
        self.inputs = {}                # shape -> input name

    def dim(self):
        return self.draw(st.integers(1, 3))

    def shape(self, rank_max=3):
        return tuple(self.dim() for _ in range(self.draw(st.integers(0, rank_max))))

    def broadcastable(self, shape):
        """A shape that broadcasts to `shape`: leading axes dropped, some axes of size 1."""
        lead = self.draw(st.integers(0, len(shape)))
        return tuple(1 if self.draw(st.integers(0, 3)) == 0 else d for d in shape[lead:])

    def leaf(self, shape):
        if self.draw(st.integers(0, 9)) == 0:       # a constant now and then
            if len(shape) == 2 and shape[0] == shape[1] and self.draw(st.booleans()):
                return f"eye({shape[0]})"
            if len(shape) == 1:
                return f"linspace(0.5, 1.5, {shape[0]})"
            return f"ones({list(shape)})" if shape else "0.7"
        return self.inputs.setdefault(shape, f"x{len(self.inputs)}")

    def expr(self, shape, depth=None):
        depth = self.max_depth if depth is None else depth
        if depth == 0 or (depth < self.max_depth and self.draw(st.integers(0, 5)) == 0):
            return self.leaf(shape)
        ops = ["unary", "binary", "binary", "minmax", "where", "index"]
        rank = len(shape)
        if rank < 3:
            ops += ["reduce", "matmul", "einsum", "reshape"]
        if rank >= 1:
            ops += ["softmax", "stack", "concatenate", "transpose"]
        if rank == 0:
            ops += ["trace", "det"]
        if rank == 2:
            ops += ["outer"]
        if rank == 2 and shape[0] == shape[1]:
            ops += ["inv", "inv"]
        op = self.draw(st.sampled_from(ops))
        return getattr(self, "_" + op)(shape, depth - 1)

    def sub(self, shape, depth):
        """An operand: an expression `depth` or one less deep."""
        return self.expr(shape, self.draw(st.integers(max(0, depth - 1), depth)))

    # ---- elementwise ------------------------------------------------------------------------------
    def _unary(self, shape, depth):
        f = self.draw(st.sampled_from(SMOOTH))
        return f.format(self.sub(shape, depth)) if "{}" in f else f"{f}({self.sub(shape, depth)})"

    def _operands(self, shape, depth):
        a, b = self.sub(shape, depth), self.sub(self.broadcastable(shape), depth)
        return (a, b) if self.draw(st.booleans()) else (b, a)

    def _binary(self, shape, depth):
        a, b = self._operands(shape, depth)
        form = self.draw(st.sampled_from(["({} + {})", "({} - {})", "({} * {})", "({} / (1.5 + tanh({})))",
                                          "arctan2({}, 2 + square({}))", "(0.5 + sigmoid({})) ** {}"]))
        return form.format(a, b)

    def _minmax(self, shape, depth):
        a, b = self._operands(shape, depth)
        return f"{self.draw(st.sampled_from(['minimum', 'maximum']))}({a}, {b})"

    def _condition(self, shape, depth):
        def compare():
            a, b = self._operands(shape, depth) if self.draw(st.booleans()) else (self.sub(shape, depth), "0.3")
            return f"({a} {self.draw(st.sampled_from(['<', '<=', '>', '>=']))} {b})"
        form = self.draw(st.sampled_from(["{}", "~{}", "({} & {})", "({} | ~{})"]))
        return form.format(*(compare() for _ in range(form.count("{}"))))

    def _where(self, shape, depth):
        a, b = self._operands(shape, depth)
        return f"where({self._condition(self.broadcastable(shape), depth)}, {a}, {b})"

    # ---- reductions --------------------------------------------------------------------------------
    def _reduce(self, shape, depth):
        f = self.draw(st.sampled_from(REDUCTIONS))
        arg = "0.5 + sigmoid({})" if f == "norm" else "{}"      # a norm's derivative needs a nonzero vector
        if not shape and self.draw(st.booleans()):     # over every axis
            inner = self.shape(2) or (2,)
            return f"{f}({arg.format(self.sub(inner, depth))})"
        extra = self.draw(st.integers(1, min(2, 3 - len(shape))))
        inner, axes = shape, []
        for _ in range(extra):
            axis = self.draw(st.integers(0, len(inner)))
            axes = [a + (a >= axis) for a in axes] + [axis]
            inner = _with(inner, axis, self.dim())
        texts = [_axis_text(a, len(inner), self.draw) for a in axes]
        axis = texts[0] if len(texts) == 1 else f"({', '.join(texts)})"
        return f"{f}({arg.format(self.sub(inner, depth))}, axis={axis})"

    def _softmax(self, shape, depth):
        axis = _axis_text(self.draw(st.integers(0, len(shape) - 1)), len(shape), self.draw)
        return f"softmax({self.sub(shape, depth)}, axis={axis})"

    # ---- linear algebra ---------------------------------------------------------------------------
    def _matmul(self, shape, depth):
        k = self.dim()
        if not shape:
            a_shape, b_shape = (k,), (k,)
        elif len(shape) == 1:
            a_shape, b_shape = ((shape[0], k), (k,)) if self.draw(st.booleans()) else ((k,), (k, shape[0]))
        else:
            a_shape, b_shape = (shape[0], k), (k, shape[1])
            if self.draw(st.integers(0, 2)) == 0:       # batched: (2, m, k) @ (k, n) -> (2, m, n) is rank 3
                return self._batched_matmul(shape, depth)
        a, b = self.sub(a_shape, depth), self.sub(b_shape, depth)
        return self.draw(st.sampled_from(["({} @ {})", "matmul({}, {})", "dot({}, {})"])).format(a, b)

    def _batched_matmul(self, shape, depth):
        """A rank-2 result out of a batch: sum over the batch axis of (b, m, k) @ (1 or b, k, n)."""
        b, k = self.dim(), self.dim()
        a = self.sub((b, shape[0], k), depth)
        c = self.sub((self.draw(st.sampled_from([1, b])), k, shape[1]), depth)
        return f"sum({a} @ {c}, axis=0)"

    def _einsum(self, shape, depth):
        """Output letters for `shape`, 0 to 2 contracted letters, one or two operands of at most three
        axes that together use every letter; now and then a letter twice in one operand (a diagonal)."""
        out = LETTERS[:len(shape)]
        sizes = dict(zip(out, shape))
        for ch in LETTERS[len(shape):len(shape) + self.draw(st.integers(0 if shape else 1, 2))]:
            sizes[ch] = self.dim()
        letters = list(sizes)
        first = self.draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True))
        terms = [first]
        missing = [ch for ch in letters if ch not in first]
        if missing or self.draw(st.booleans()):
            extra = [ch for ch in letters if ch not in missing]
            more = self.draw(st.lists(st.sampled_from(extra), max_size=3 - len(missing), unique=True)) if extra else []
            terms.append(self.draw(st.permutations(missing + more)))
        if len(first) < 3 and self.draw(st.integers(0, 3)) == 0:
            terms[0] = first + [self.draw(st.sampled_from(first))]
        operands = [self.sub(tuple(sizes[ch] for ch in t), depth) for t in terms]
        spec = ",".join("".join(t) for t in terms) + "->" + out
        return f"einsum('{spec}', {', '.join(operands)})"

    def _transpose(self, shape, depth):
        rank = len(shape)
        perm = self.draw(st.permutations(range(rank)))
        inner = tuple(shape[perm.index(j)] for j in range(rank))     # out[i] = inner[perm[i]]
        if rank >= 2 and self.draw(st.booleans()):
            return f"({self.sub(shape[::-1], depth)}).T"
        return f"transpose({self.sub(inner, depth)}, {list(perm)})"

    def _outer(self, shape, depth):
        m, n = shape
        first = (m,) if m == 1 or self.draw(st.booleans()) else (1, m)      # outer flattens its operands
        return f"outer({self.sub(first, depth)}, {self.sub((n,), depth)})"

    def _trace(self, shape, depth):
        return f"trace({self.sub((self.dim(), self.dim()), depth)})"

    def _det(self, shape, depth):
        n = self.draw(st.sampled_from([1, 2, 3, 3, 5]))         # 5: the elimination path
        return f"det({self.sub((n, n), depth)})"

    def _inv(self, shape, depth):
        n = shape[0]
        return f"inv({n} * eye({n}) + tanh({self.sub(shape, depth)}))"     # diagonally dominant

    # ---- views and constructors ------------------------------------------------------------------
    def _index(self, shape, depth):
        """Integer indices (negative ones too) and slices with steps (negative ones too)."""
        inner, items = [], []
        for d in shape:
            step = self.draw(st.sampled_from([1, 1, 2, -1, -2]))
            n = d * abs(step) - abs(step) + 1 + self.draw(st.integers(0, 1))
            inner.append(n)
            span = (d - 1) * abs(step)
            if step > 0:
                start = self.draw(st.integers(0, n - 1 - span))
                lo, hi = start, start + span + 1
            else:
                start = self.draw(st.integers(span, n - 1))
                lo, hi = start, start - span - 1
            text = f"{lo - n if self.draw(st.booleans()) else lo}:{'' if hi < 0 else hi}:{step}"
            items.append(":" if (lo, hi, step) == (0, n, 1) else text)
            assert len(range(*slice(lo, None if hi < 0 else hi, step).indices(n))) == d
        if len(shape) < 3 and self.draw(st.booleans()):     # an integer index on an extra axis
            axis, n = self.draw(st.integers(0, len(shape))), self.dim()
            k = self.draw(st.integers(-n, n - 1))
            inner.insert(axis, n)
            items.insert(axis, str(k))
        if not items:
            n = self.dim()
            inner, items = [n], [str(self.draw(st.integers(-n, n - 1)))]
        return f"({self.sub(tuple(inner), depth)})[{', '.join(items)}]"

    def _stack(self, shape, depth):
        axis = self.draw(st.integers(0, len(shape) - 1))
        parts = [self.sub(shape[:axis] + shape[axis + 1:], depth) for _ in range(shape[axis])]
        return f"stack([{', '.join(parts)}], axis={_axis_text(axis, len(shape), self.draw)})"

    def _concatenate(self, shape, depth):
        axis = self.draw(st.integers(0, len(shape) - 1))
        sizes, left = [], shape[axis]
        while left:
            sizes.append(self.draw(st.integers(1, left)))
            left -= sizes[-1]
        parts = [self.sub(shape[:axis] + (d,) + shape[axis + 1:], depth) for d in sizes]
        return f"concatenate([{', '.join(parts)}], axis={_axis_text(axis, len(shape), self.draw)})"

    def _reshape(self, shape, depth):
        size = math.prod(shape)
        factors = [p for p in (2, 3) for _ in range(_multiplicity(size, p))]
        factors = self.draw(st.permutations(factors)) if factors else []
        cuts = sorted(self.draw(st.lists(st.integers(0, len(factors)), min_size=0, max_size=2)))
        groups = [factors[a:b] for a, b in zip([0] + cuts, cuts + [len(factors)])]
        inner = tuple(math.prod(g) for g in groups)[:3]
        inner = inner if math.prod(inner) == size else (size,)
        target = list(shape)
        if shape and self.draw(st.integers(0, 2)) == 0:
            target[self.draw(st.integers(0, len(shape) - 1))] = -1
        return f"reshape({self.sub(inner, depth)}, {target})"


def _multiplicity(n, p):
    k = 0
    while n % p == 0:
        n //= p
        k += 1
    return k


@st.composite
def models(draw, max_depth=3, rank_max=3):
    """(model YAML text, input shapes, output shape): outputs E (the expression) and S = sum(E)."""
    gen = Expressions(draw, max_depth)
    shape = gen.shape(rank_max)
    expr = gen.expr(shape)
    if not gen.inputs:                  # an all-constant expression: make it depend on an input
        expr = f"({expr}) * x0"
        gen.inputs[()] = "x0"
    inputs = {name: s for s, name in gen.inputs.items()}
    text = "adgrad: 1\ninputs:\n" + "".join(f"  {n}: {{shape: {list(s)}}}\n" for n, s in inputs.items())
    text += f"let:\n  T: {expr}\noutputs:\n  E: T\n  S: sum(T)\n"
    return text, inputs, shape


def _point(inputs, seed):
    """Uniform in [-1, 1]: continuous values, so no input sits on a kink or a tie by chance."""
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-1.0, 1.0, s) for n, s in inputs.items()}


# ADGRAD_PROPS_EXAMPLES=N runs a longer, randomized search; by default the examples are fixed.
EXAMPLES = int(os.environ.get("ADGRAD_PROPS_EXAMPLES", "0"))
PROPS = settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.filter_too_much, HealthCheck.data_too_large])


@PROPS
@given(case=models(max_depth=4), seed=st.integers(0, 2**32 - 1))
def test_first_derivatives(model_from_text, case, seed):
    text, inputs, shape = case
    m = model_from_text(text, "tensor_props")
    assert m.graph.outputs["E"].shape == shape, text
    point = _point(inputs, seed)
    requests = [("E", n) for n in inputs]
    fwd = interpret(derivative_graph(m, requests, "forward"), point, {})
    rev = interpret(derivative_graph(m, requests, "reverse"), point, {})
    value = fwd["E"]
    for n in inputs:
        name = f"dE_d{n}"
        assert rev[name].shape == shape + inputs[n]
        scale = max(1.0, float(np.max(np.abs(rev[name]), initial=0.0)))
        np.testing.assert_allclose(fwd[name], rev[name], rtol=1e-9, atol=1e-12 * scale,
                                   err_msg=f"forward != reverse for {name} of\n{text}")
        fd = central_differences(m.graph, point, {}, n, ["E"])["E"]
        assert_close_to_fd(rev[name], fd, [value], msg=f"{name} differs from finite differences for\n{text}")


@PROPS
@given(case=models(max_depth=3, rank_max=2), seed=st.integers(0, 2**32 - 1))
def test_hessians(model_from_text, case, seed):
    """d2S/dx dy (forward over reverse) == central differences of the reverse gradient dS/dx along y,
    symmetric in (x, y)."""
    text, inputs, _ = case
    m = model_from_text(text, "tensor_props_second")
    point = _point(inputs, seed)
    names = list(inputs)[:2]
    pairs = [(a, b) for a in names for b in names]
    g = derivative_graph(m, [("S", n) for n in names] + [("S", list(p)) for p in pairs], "reverse")
    out = interpret(g, point, {})
    for a, b in pairs:
        hess = out[f"d2S_d{a}_d{b}"]
        fd = central_differences(g, point, {}, b, [f"dS_d{a}"])[f"dS_d{a}"]
        assert_close_to_fd(hess, fd, [out[f"dS_d{a}"]], msg=f"d2S_d{a}_d{b} of\n{text}")
        na, nb = math.prod(inputs[a]), math.prod(inputs[b])
        other = out[f"d2S_d{b}_d{a}"].reshape(nb, na).T
        scale = max(1.0, float(np.max(np.abs(hess), initial=0.0)))
        np.testing.assert_allclose(hess.reshape(na, nb), other, rtol=1e-9, atol=1e-12 * scale,
                                   err_msg=f"d2S_d{a}_d{b} is not symmetric for\n{text}")


# ---- a few representative expressions, compiled ------------------------------------------------------
COMPILED = """\
adgrad: 1
inputs:
  x0: {shape: [2, 3]}
  x1: {shape: [3]}
  x2: {shape: [2, 1, 3]}
outputs:
  E: einsum('ab,b->a', softmax(x0, axis=-1), x1[::-1]) * logsumexp(x2, axis=(0, 2))
  F: stack([x0[-1, ::2], concatenate([x1[1:], x1[:1]], axis=0)[-2:]], axis=-1)
  G: reshape(transpose(x2, [2, 0, 1]), [3, 2]).T @ outer(x1, x1[:2]) + maximum(x0[:, :2], 0.1)
  H: norm(where((x0 > 0.2) | ~(x1 < 0.0), minimum(x0, x1) * x2[:, 0], x0 ** 2), axis=1) + trace(x0 @ x0.T)
"""


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_compiled_kernels_match_the_interpreted_derivative_graph(model_from_text, mode):
    m = model_from_text(COMPILED, "tensor_props_compiled")
    requests = [(o, n) for o in ("E", "F", "G", "H") for n in m.graph.inputs]
    pts = {n: np.random.default_rng(13).uniform(-1, 1, (3,) + v.shape) for n, v in m.graph.inputs.items()}
    assert_compiled_matches(m, requests, mode, pts)
