"""Derivative rules: every IR op has one, and every function of the expression language differentiates
correctly: forward == reverse (rtol 1e-10) and both == central finite differences of the numpy
interpreter (the oracle). Many ops share one model (one output each, a few models per family, each
compiled once per mode), so the number of numba compilations stays small; hypothesis draws the points,
not the models (except for the random-expression-tree test, which compiles a capped number of small
models, derandomized so that the on-disk kernel cache serves reruns).
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from adgrad.engine import compile_model
from adgrad.engine.ir.interp import interpret
from adgrad.engine.ir.ops import OPS
from ir_oracle import assert_close_to_fd, central_differences, derivative_graph

# ---- every op has a rule ------------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_has_a_rule(op):
    rule = OPS[op].rule
    assert callable(rule.jvp) and callable(rule.vjp), f"IR op '{op}' has no derivative rule"


# ---- machinery ----------------------------------------------------------------------------------
class Group:
    """Outputs of one family, differentiated w.r.t. the names each one mentions (or `derivs`), in
    both modes. The outputs are split into models of at most CHUNK outputs: numba's compile time
    grows faster than linearly with the size of a kernel, so a few medium kernels are cheapest."""

    def __init__(self, name, inputs, outputs, wrt, params=None, functions="", valid=None, derivs=None,
                 chunk=6):
        self.name = name
        self.chunk = chunk
        self.inputs = inputs            # name -> (shape, low, high)
        self.outputs = outputs          # output name -> expression
        self.wrt = wrt
        self.params = params or {}
        self.functions = functions      # YAML text of the functions: block (already indented)
        self.valid = valid or (lambda pt: True)
        self.derivs = derivs or [(o, w) for o, e in outputs.items() for w in wrt
                                 if re.search(rf"\b{w}\b", e)]

    def text(self):
        lines = ["adgrad: 1", f"name: {self.name}", "inputs:"]
        lines += [f"  {n}: {{shape: {list(s)}}}" for n, (s, lo, hi) in self.inputs.items()]
        if self.params:
            lines += ["params:"] + [f"  {n}: {json.dumps(v)}" for n, v in self.params.items()]
        if self.functions:
            lines += ["functions:", self.functions.rstrip("\n")]
        lines += ["outputs:"] + [f"  {n}: {json.dumps(e)}" for n, e in self.outputs.items()]
        return "\n".join(lines) + "\n"

    def chunks(self):
        names = list(self.outputs)
        out = []
        for i in range(0, len(names), self.chunk):
            part = names[i:i + self.chunk]
            out.append(Group(f"{self.name}_{i // self.chunk}", self.inputs, {o: self.outputs[o] for o in part},
                             self.wrt, self.params, self.functions, self.valid,
                             [(o, w) for o, w in self.derivs if o in part], self.chunk))
        return out

    def chunk_of(self, out):
        return next(c for c in self.chunks() if out in c.outputs)


class Kernels:
    """A chunk's model compiled in forward and in reverse mode."""

    def __init__(self, group, model):
        self.group, self.model = group, model
        self.fwd = compile_model(model, group.derivs, mode="forward")
        self.rev = compile_model(model, group.derivs, mode="reverse")


_CACHE = {}


@pytest.fixture(scope="module")
def kernels(model_from_text):
    """kernels(chunk) -> Kernels, compiled once per session."""
    def get(group):
        if group.name not in _CACHE:
            _CACHE[group.name] = Kernels(group, model_from_text(group.text(), group.name))
        return _CACHE[group.name]
    return get


def check_group(kernels, group, pts):
    for c in group.chunks():
        check(kernels(c), pts)


def random_points(group, m, seed):
    """m valid points drawn uniformly in each input's box: {name: (m, *shape)}."""
    rng = np.random.default_rng(seed)
    pts = []
    while len(pts) < m:
        pt = {n: rng.uniform(lo, hi, size=s) for n, (s, lo, hi) in group.inputs.items()}
        if group.valid(pt):
            pts.append(pt)
    return {n: np.stack([p[n] for p in pts]) for n in group.inputs}


def points_strategy(group):
    return st.fixed_dictionaries({
        n: hnp.arrays(np.float64, tuple(s), unique=True,
                      elements=st.floats(lo, hi, allow_nan=False, allow_infinity=False))
        for n, (s, lo, hi) in group.inputs.items()})


def separated(*arrays, gap=1e-3, also=()):
    """No two values (across all arrays, plus the constants `also`) are closer than `gap`."""
    v = np.sort(np.concatenate([np.ravel(a) for a in arrays] + [np.asarray(also, dtype=float)]))
    return bool(np.all(np.diff(v) > gap))


def away_from(x, points, gap=1e-2):
    return all(np.all(np.abs(np.asarray(x) - p) > gap) for p in points)


def fd_jacobian(model, point, wrt, outs, rel=1e-6):
    """Central differences of the numpy interpreter: {out: (*out_shape, *wrt_shape)}."""
    g = model.graph
    params = {n: np.asarray(v, dtype=float) for n, v in model.param_values.items()}
    is_param = wrt in g.params
    x0 = np.asarray(params[wrt] if is_param else point[wrt], dtype=float)
    flat = x0.ravel()
    cols = {o: [] for o in outs}
    for j in range(flat.size):
        h = rel * max(1.0, abs(flat[j]))
        vals = []
        for sgn in (1.0, -1.0):
            xj = flat.copy()
            xj[j] += sgn * h
            xj = xj.reshape(x0.shape)
            if is_param:
                vals.append(interpret(g, point, {**params, wrt: xj}, want=outs))
            else:
                vals.append(interpret(g, {**point, wrt: xj}, params, want=outs))
        for o in outs:
            cols[o].append((vals[0][o] - vals[1][o]) / (2 * h))
    out = {}
    for o in outs:
        arr = np.array(cols[o])                              # (n_wrt, *out_shape)
        out[o] = np.moveaxis(arr, 0, -1).reshape(g.outputs[o].shape + x0.shape)
    return out


def check(k, pts, outs=None, fd=True):
    """forward == reverse (rtol 1e-10) and == finite differences (rtol 1e-5) at every point."""
    g = k.group
    outs = list(g.outputs) if outs is None else outs
    derivs = [(o, w) for o, w in g.derivs if o in outs]
    f = k.fwd.evaluate(pts)
    r = k.rev.evaluate(pts)
    m = next(iter(pts.values())).shape[0]
    for o, w in derivs:
        name = f"d{o}_d{w}"
        scale = max(1.0, float(np.max(np.abs(r[name]), initial=0.0)))
        np.testing.assert_allclose(f[name], r[name], rtol=1e-10, atol=1e-12 * scale,
                                   err_msg=f"{g.name}: forward != reverse for {name} = d/d{w} {g.outputs[o]}")
    if not fd:
        return
    for i in range(m):
        point = {n: pts[n][i] for n in g.inputs}
        for w in sorted({w for _, w in derivs}):
            want = [o for o, ww in derivs if ww == w]
            fdj = fd_jacobian(k.model, point, w, want)
            vals = interpret(k.model.graph, point, k.model.param_values, want=want)
            for o in want:
                name = f"d{o}_d{w}"
                scale = max(1.0, float(np.max(np.abs(fdj[o]), initial=0.0)),
                            float(np.max(np.abs(vals[o]), initial=0.0)))
                msg = (f"{g.name}: {name} = d/d{w} {g.outputs[o]} differs from finite differences "
                       f"at point {point}")
                np.testing.assert_allclose(r[name][i], fdj[o], rtol=1e-5, atol=1e-6 * scale, err_msg=msg + " (reverse)")
                np.testing.assert_allclose(f[name][i], fdj[o], rtol=1e-5, atol=1e-6 * scale, err_msg=msg + " (forward)")


HYP = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                      HealthCheck.too_slow])

# ---- elementwise unary functions ----------------------------------------------------------------
# p: a positive scalar for domain-restricted functions; z: a signed scalar; v: a vector. Scalars keep
# the kernels small (numba's compile time grows with the code); elementwise ops on arrays go through the
# same rule (from_partials) and are checked on vectors and broadcasts below.
UNARY = Group(
    "unary",
    inputs={"p": ([], 0.15, 0.85), "z": ([], -2.0, 2.0), "v": ([3], 0.15, 0.85)},
    outputs={
        "u_neg": "-z", "u_exp": "exp(z)", "u_log": "log(p)", "u_log1p": "log1p(0.4*z)",
        "u_expm1": "expm1(z)", "u_sqrt": "sqrt(p)", "u_cbrt": "cbrt(z)", "u_sin": "sin(z)",
        "u_cos": "cos(z)", "u_tan": "tan(0.7*z)", "u_arcsin": "arcsin(p)", "u_arccos": "arccos(p)",
        "u_arctan": "arctan(z)", "u_sinh": "sinh(z)", "u_cosh": "cosh(z)",
        "u_tanh": "tanh(z)", "u_abs": "abs(z)", "u_sign": "sign(z)", "u_square": "square(z)",
        "u_sigmoid": "sigmoid(5*z)", "u_softplus": "softplus(5*z)", "u_erf": "erf(z)",
        "u_arcsinh": "arcsinh(3*z)", "u_arccosh": "arccosh(1 + 3*p)", "u_arctanh": "arctanh(0.45*z)",
        "u_exp2": "exp2(z)", "u_log2": "log2(p)", "u_log10": "log10(p)",
        "u_both": "sum(log(v)) * exp(z)",
        "u_vec": "exp(sin(v)) * sqrt(1 + square(v)) * tanh(v) / cbrt(v)",
    },
    wrt=["p", "z", "v"],
    chunk=12,
    valid=lambda pt: away_from(pt["z"], [0.0], 0.05),
)


@pytest.mark.parametrize("out", list(UNARY.outputs))
def test_unary(kernels, out):
    check(kernels(UNARY.chunk_of(out)), random_points(UNARY, 3, seed=1), outs=[out])


@HYP
@given(pt=points_strategy(UNARY))
def test_unary_hypothesis(kernels, pt):
    assume(UNARY.valid(pt))
    check_group(kernels, UNARY, {n: v[None] for n, v in pt.items()})


# ---- binary arithmetic, min/max, arctan2, where with comparisons and & | ~ ----------------------------
BINARY = Group(
    "binary",
    inputs={"a": ([], 0.5, 2.0), "b": ([], 0.5, 2.0), "s": ([], 0.5, 2.0)},
    outputs={
        "b_add": "a + b", "b_sub": "a - s", "b_rsub": "s - b", "b_mul": "a * b", "b_div": "a / b",
        "b_rdiv": "s / a", "b_pow": "a ** b", "b_pow3": "a ** 3", "b_pow_frac": "a ** 2.5",
        "b_pow_neg": "a ** -2", "b_pow_half": "b ** 0.5", "b_pow_sa": "s ** a", "b_pow_as": "a ** s",
        "b_min": "minimum(a, b)", "b_max": "maximum(a, s)", "b_min_s": "minimum(s, b)",
        "b_atan2": "arctan2(a - 1.2, b - 1.1)", "b_hypot": "hypot(a - 1.2, b)", "b_hypot_s": "hypot(3.0, s)",
        "b_where": "where(a < b, a * b, a / b)",
        "b_where_logic": "where((a < b) & (b > s) | ~(a >= 1.0), exp(a), s * b)",
        "b_where_cmp": "where((a <= s) | (b == s), a, b * s)",
        "b_where_ne": "where(a != b, a ** 2, s)",
        "b_where_const": "where(a > 1.3, 0.0, a)",
        "b_pi": "pi * a * s",
    },
    wrt=["a", "b", "s"],
    chunk=8,
    valid=lambda pt: separated(pt["a"], pt["b"], pt["s"], gap=1e-2, also=[1.0, 1.3])
    and away_from(pt["a"], [1.2]) and away_from(pt["b"], [1.1]),
)


@pytest.mark.parametrize("out", list(BINARY.outputs))
def test_binary(kernels, out):
    check(kernels(BINARY.chunk_of(out)), random_points(BINARY, 3, seed=2), outs=[out])


@HYP
@given(pt=points_strategy(BINARY))
def test_binary_hypothesis(kernels, pt):
    assume(BINARY.valid(pt))
    check_group(kernels, BINARY, {n: v[None] for n, v in pt.items()})


# ---- broadcasting: [2,1] against [3] against a scalar -----------------------------------------------
BROADCAST = Group(
    "broadcast",
    inputs={"u": ([2, 1], -2.0, 2.0), "v": ([3], -2.0, 2.0), "s": ([], 0.5, 1.5)},
    outputs={
        "c_mul": "u * v", "c_add": "u + v * s", "c_max": "maximum(u, v)",
        "c_where": "where(u < v, u, v ** 2)", "c_atan2": "arctan2(u, v)", "c_div": "u / v - s",
        "c_sum0": "sum(u * v, axis=0)", "c_sum1": "sum(u * v, axis=1)", "c_u": "exp(u) * s",
        "c_sv": "s * v", "c_scalar": "sum(u) * sum(v) + s",
    },
    wrt=["u", "v", "s"],
    valid=lambda pt: separated(pt["u"], pt["v"], pt["s"], gap=1e-2, also=[0.0]),
)


@pytest.mark.parametrize("out", list(BROADCAST.outputs))
def test_broadcast(kernels, out):
    check(kernels(BROADCAST.chunk_of(out)), random_points(BROADCAST, 3, seed=3), outs=[out])


@HYP
@given(pt=points_strategy(BROADCAST))
def test_broadcast_hypothesis(kernels, pt):
    assume(BROADCAST.valid(pt))
    check_group(kernels, BROADCAST, {n: v[None] for n, v in pt.items()})


# ---- reductions, dot, norm ----------------------------------------------------------------------------
REDUCE = Group(
    "reduce",
    inputs={"X": ([2, 3], -1.5, 1.5), "y": ([3], -1.5, 1.5), "w": ([2], 0.5, 1.5)},
    outputs={
        "r_sum": "sum(X, axis=(0, 1))", "r_sum0": "sum(X, axis=0)", "r_sum1": "sum(X, axis=-1)",
        "r_prod": "prod(X)", "r_prod0": "prod(X, axis=0)", "r_prod1": "prod(X, axis=1)",
        "r_mean0": "mean(X, axis=0)", "r_mean1": "mean(X, axis=1)", "r_max": "max(X)", "r_max0": "max(X, axis=0)",
        "r_max1": "max(X, axis=1)", "r_min": "min(X)", "r_min1": "min(X, axis=-1)",
        "r_norm": "norm(X)", "r_dot": "dot(y, X[1])", "r_dotw": "dot(w, X[:, 2])",
        "r_matmul": "y @ y", "r_bcast": "sum(X * y, axis=0)", "r_T": "sum(X.T * w, axis=1)",
        "r_maxprod": "max(X * y, axis=0) * prod(w) / mean(w)",
    },
    wrt=["X", "y", "w"],
    chunk=7,
    valid=lambda pt: separated(pt["X"], gap=1e-4) and away_from(pt["y"], [0.0], 1e-3),   # no max/min ties
)


@pytest.mark.parametrize("out", list(REDUCE.outputs))
def test_reduce(kernels, out):
    check(kernels(REDUCE.chunk_of(out)), random_points(REDUCE, 3, seed=4), outs=[out])


@HYP
@given(pt=points_strategy(REDUCE))
def test_reduce_hypothesis(kernels, pt):
    assume(REDUCE.valid(pt))
    check_group(kernels, REDUCE, {n: v[None] for n, v in pt.items()})


def test_prod_gradient_with_a_zero(kernels):
    """prod's partials are the products of the other elements: finite where an element is 0."""
    X = np.array([[1.5, -0.5, 2.0], [0.0, 1.25, -1.3]])
    pts = {"X": X[None], "y": np.ones((1, 3)), "w": np.ones((1, 2))}
    for out in ("r_prod", "r_prod0", "r_prod1"):
        check(kernels(REDUCE.chunk_of(out)), pts, outs=[out])
    want = np.zeros_like(X)
    want[1, 0] = np.prod(np.delete(X.ravel(), 3))
    k = kernels(REDUCE.chunk_of("r_prod"))
    for kern in (k.fwd, k.rev):
        np.testing.assert_allclose(kern.evaluate(pts)["dr_prod_dX"][0], want, rtol=1e-12, atol=0)


def test_max_tie_shares_equally(kernels):
    """At a max/min tie the derivative is shared equally among the tied elements (SPEC: as in JAX)."""
    X = np.array([[0.5, 1.0, 1.0], [-0.2, -0.3, -0.3]])
    pts = {"X": X[None], "y": np.ones((1, 3)), "w": np.ones((1, 2))}
    want = {"r_max": np.zeros_like(X), "r_min": np.zeros_like(X)}
    want["r_max"][0, 1] = want["r_max"][0, 2] = 0.5
    want["r_min"][1, 1] = want["r_min"][1, 2] = 0.5
    for out, w in want.items():
        k = kernels(REDUCE.chunk_of(out))
        for kern in (k.fwd, k.rev):
            np.testing.assert_allclose(kern.evaluate(pts)[f"d{out}_dX"][0], w, rtol=1e-12, atol=0)


# ---- indexing and slicing -----------------------------------------------------------------------------
INDEX = Group(
    "index",
    inputs={"x": ([6], -1.5, 1.5), "Y": ([2, 3], -1.5, 1.5)},
    outputs={
        "i_0": "x[0]", "i_slice": "x[1:5]", "i_last": "x[-1]", "i_step": "x[::2]", "i_rev": "x[::-1]",
        "i_revstep": "x[-2:0:-2]", "i_col": "Y[:, 0]", "i_row": "Y[1]", "i_elem": "Y[-1, 1]",
        "i_T": "Y.T", "i_block": "Y[1:, ::2]", "i_block2": "Y[::-1, 1:3]",
        "i_overlap": "x[0] * x[-1] + sum(x[1:5] ** 2) + x[2] * x[::2][1]",
        "i_pairs": "x[::2] * x[1::2]", "i_rows": "Y[0] * Y[-1]", "i_mix": "Y[:, 1] * x[:2]",
        "i_Tslice": "sum(Y.T[1:3] ** 2, axis=0)", "i_nested": "exp(x[1:5][::-1][1:])",
    },
    wrt=["x", "Y"],
)


@pytest.mark.parametrize("out", list(INDEX.outputs))
def test_index(kernels, out):
    check(kernels(INDEX.chunk_of(out)), random_points(INDEX, 2, seed=5), outs=[out])


@HYP
@given(pt=points_strategy(INDEX))
def test_index_hypothesis(kernels, pt):
    check_group(kernels, INDEX, {n: v[None] for n, v in pt.items()})


# ---- user functions, with and without hand-written rules ------------------------------------------------
FUNCTIONS_YAML = """\
  rho:
    args: [r]
    expr: exp(-alpha*r)
    derivative: [-alpha*rho(r)]
  phi:
    args: [r]
    expr: r**2 * sin(r)
  g2:
    args: [a, b]
    expr: a*b + sin(a)/b
    derivative:
      - b + cos(a)/b
      - a - sin(a)/b**2
  h2:
    args: [a, b]
    expr: exp(a - b) * b
  nest:
    args: [r]
    expr: rho(phi(r)) + phi(r)
  nestr:
    args: [r]
    expr: g2(r, 2.0) * phi(r)
    derivative:
      - g2(r, 2.0) * (2*r*sin(r) + r**2*cos(r)) + (2.0 + cos(r)/2.0) * phi(r)
  vf:
    args: {v: [3]}
    expr: dot(v, c) + norm(v)
"""
FUNCS = Group(
    "funcs",
    inputs={"x": ([3], 0.2, 1.5), "s": ([], 0.5, 1.5)},
    params={"alpha": 1.5, "c": [1.0, -2.0, 0.5]},
    functions=FUNCTIONS_YAML,
    outputs={
        "f_rho": "rho(x)", "f_rho_arg": "rho(2*x + s)", "f_phi": "phi(x)", "f_g2": "g2(x, s)",
        "f_g2_swap": "g2(s, x)", "f_h2": "h2(x, s)", "f_nest": "nest(x)", "f_nestr": "nestr(x)",
        "f_vf": "vf(x) * s", "f_E": "sum(rho(x)) * phi(s) + g2(s, s + 1)",
    },
    wrt=["x", "s"],
    chunk=10,
)


@pytest.mark.parametrize("out", list(FUNCS.outputs))
def test_functions(kernels, out):
    check(kernels(FUNCS.chunk_of(out)), random_points(FUNCS, 3, seed=6), outs=[out])


@HYP
@given(pt=points_strategy(FUNCS))
def test_functions_hypothesis(kernels, pt):
    check_group(kernels, FUNCS, {n: v[None] for n, v in pt.items()})


# ---- derivatives with respect to params ------------------------------------------------------------------
PARAMS = Group(
    "params",
    inputs={"x": ([3], 0.2, 1.5)},
    params={"alpha": 1.5, "c": [1.0, -2.0, 0.5]},
    functions="""\
  rho:
    args: [r]
    expr: exp(-alpha*r)
    derivative: [-alpha*rho(r)]
  q:
    args: [r]
    expr: exp(-alpha*r*r) * r
  q2:
    args: [r]
    expr: exp(-alpha*r) * r
""",
    outputs={"q_plain": "sum(exp(-(alpha*x))) * dot(c, x)", "q_vec": "c * x ** 2 / alpha",
             "q_fn": "sum(q(x))", "q_rule": "sum(rho(x))", "q_shared": "sum(exp(-alpha*x))",
             "q_fn_shared": "sum(q2(x))"},
    wrt=["alpha", "c", "x"],
    derivs=[(o, w) for o in ("q_plain", "q_vec", "q_fn", "q_rule", "q_shared", "q_fn_shared")
            for w in ("alpha", "c", "x")],
)


@pytest.mark.parametrize("out", [
    "q_plain", "q_vec", "q_fn", "q_rule", "q_shared", "q_fn_shared"])
def test_param_derivatives(kernels, out):
    check(kernels(PARAMS.chunk_of(out)), random_points(PARAMS, 2, seed=7), outs=[out])


# ---- derivatives that are identically zero ----------------------------------------------------------------
ZERO = """\
adgrad: 1
name: zero
inputs:
  y: {shape: [2]}
  w: {shape: [3]}
outputs:
  A: sum(y)
  B: exp(w) * y[0]
  S: sign(w)
"""


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_zero_derivatives(model_from_text, mode):
    """An output that does not depend on an input (or only through sign) has an exact zero derivative
    of the right shape."""
    m = model_from_text(ZERO, "zero")
    k = compile_model(m, [("A", "w"), ("B", "y"), ("S", "w"), ("B", "w")], mode=mode)
    rng = np.random.default_rng(10)
    pts = {"y": rng.uniform(0.5, 1.5, (3, 2)), "w": rng.uniform(-1, 1, (3, 3))}
    out = k.evaluate(pts)
    assert out["dA_dw"].shape == (3, 3) and not out["dA_dw"].any()
    assert out["dS_dw"].shape == (3, 3, 3) and not out["dS_dw"].any()
    want_by = np.zeros((3, 3, 2))
    want_by[:, :, 0] = np.exp(pts["w"])
    np.testing.assert_allclose(out["dB_dy"], want_by, rtol=1e-14)
    np.testing.assert_allclose(out["dB_dw"], np.einsum("mi,ij->mij", np.exp(pts["w"]) * pts["y"][:, :1], np.eye(3)),
                               rtol=1e-14)


def test_forward_zero_derivatives_next_to_prod(model_from_text):
    m = model_from_text("""\
        adgrad: 1
        name: zero_prod
        inputs:
          y: {shape: [2]}
          w: {shape: [3]}
        outputs:
          A: sum(y)
          B: sum(y**2)
          C: prod(w)
        """, "zero_prod")
    k = compile_model(m, [("A", "w"), ("B", "w")], mode="forward")
    out = k.evaluate({"y": np.ones((2, 2)), "w": np.ones((2, 3))})
    assert not out["dA_dw"].any() and not out["dB_dw"].any()


# ---- model-level hand-written derivatives (mode: manual) -------------------------------------------------
EAM = """\
adgrad: 1
name: eam_small
inputs:
  x: {shape: [5]}
params:
  alpha: 3.0
functions:
  rho:
    args: [r]
    expr: exp(-alpha*(r + 1))
    derivative: [-alpha*rho(r)]
let:
  density: sum(rho(x))
outputs:
  E: density**2 + density**3 + 0.25*density**4
derivatives:
  dE_dx: (2*density + 3*density**2 + density**3) * (-alpha) * rho(x)
"""


def test_manual_matches_forward_reverse_and_fd(model_from_text):
    m = model_from_text(EAM, "eam_small")
    X = np.random.default_rng(8).uniform(0.0, 1.0, size=(4, 5))
    outs = {mode: compile_model(m, [("E", "x")], mode=mode).evaluate({"x": X})["dE_dx"]
            for mode in ("manual", "forward", "reverse")}
    np.testing.assert_allclose(outs["forward"], outs["reverse"], rtol=1e-10)
    np.testing.assert_allclose(outs["manual"], outs["reverse"], rtol=1e-10)
    for i in range(len(X)):
        fd = fd_jacobian(m, {"x": X[i]}, "x", ["E"])["E"]
        np.testing.assert_allclose(outs["reverse"][i], fd, rtol=1e-5, atol=1e-8)


# ---- second derivatives ---------------------------------------------------------------------------------
SECOND = {
    "smooth": ("""\
        adgrad: 1
        name: second_smooth
        inputs:
          x: {shape: [3]}
          y: {shape: [2]}
        outputs:
          E: sum(exp(x) * sin(x[::-1])) + log(1 + sum(x**2)) * dot(y, y) + sum(x[1:]) * y[0] / (2 + y[1])
        """, {"x": (0.1, 1.0), "y": (0.2, 1.2)}, ["x", "y"]),
    "functions": ("""\
        adgrad: 1
        name: second_functions
        inputs:
          x: {shape: [4]}
        params:
          alpha: 1.5
        functions:
          rho:
            args: [r]
            expr: exp(-alpha*r)
            derivative: [-alpha*rho(r)]
          phi:
            args: [r]
            expr: r**3 * cos(r)
        outputs:
          E: sum(rho(x))**2 + sum(phi(x) * rho(x))
        """, {"x": (0.2, 1.5)}, ["x"]),
    "kinks": ("""\
        adgrad: 1
        name: second_kinks
        inputs:
          x: {shape: [4]}
        outputs:
          E: sum(maximum(x, 0.1)**3) + sum(abs(x) * x**2) + max(x)**2 + sum(where(x > 0.3, x**4, sin(x)))
        """, {"x": (-1.0, 1.0)}, ["x"]),
    "prod": ("""\
        adgrad: 1
        name: second_prod
        inputs:
          x: {shape: [4]}
        outputs:
          E: prod(x) + sum(x**2)
        """, {"x": (0.5, 1.5)}, ["x"]),
}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_second_derivative_of_a_long_product_with_zeros(model_from_text, mode):
    """Products of more than SMALL_PROD factors keep the reduction; their partial prod_others has a
    rule of its own, so the Hessian exists, also where factors are exactly zero."""
    m = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [3, 18]}\noutputs:\n"
                        "  E: sum(prod(x, axis=1) * arange(1, 4)) + prod(x[1:, ::2])\n", "long_prod")
    grad = derivative_graph(m, [("E", "x")], mode)
    hess = derivative_graph(m, [("E", ["x", "x"])], mode)
    x = np.random.default_rng(3).uniform(0.7, 1.3, (3, 18))
    for zeros in ([], [(1, 4)], [(2, 6), (2, 8)]):
        pt = x.copy()
        for z in zeros:
            pt[z] = 0.0
        got = interpret(hess, {"x": pt}, {})["d2E_dx_dx"]
        fd = central_differences(grad, {"x": pt}, {}, "x", ["dE_dx"])["dE_dx"]
        assert_close_to_fd(got, fd, msg=f"zeros at {zeros}")
        flat = got.reshape(54, 54)
        np.testing.assert_allclose(flat, flat.T, atol=1e-14)


def _second_params():
    out = []
    for case in SECOND:     # forward-over-forward for two cases only: each kernel costs a numba compile
        for mode in (("forward", "reverse") if case in ("smooth", "prod") else ("reverse",)):
            out.append(pytest.param(case, mode, id=f"{case}-{mode}"))
    return out


@pytest.mark.parametrize("case,mode", _second_params())
def test_second_derivative(model_from_text, case, mode):
    text, boxes, names = SECOND[case]
    m = model_from_text(text, f"second_{case}")
    pairs = [(a, b) for a in names for b in names]
    k = compile_model(m, [("E", n) for n in names] + [("E", [a, b]) for a, b in pairs], mode=mode)
    rng = np.random.default_rng(9)
    for _ in range(2):
        pt = {n: rng.uniform(lo, hi, size=m.graph.inputs[n].shape) for n, (lo, hi) in boxes.items()}
        if case == "kinks":          # keep away from the kinks at 0, 0.1, 0.3 and max ties
            pt["x"] = np.array([-0.7, 0.2, 0.55, 0.9]) + 0.02 * rng.uniform(-1, 1, 4)
        base = k.evaluate({n: v[None] for n, v in pt.items()})
        for a, b in pairs:
            hess = base[f"d2E_d{a}_d{b}"][0]
            assert hess.shape == m.graph.inputs[a].shape + m.graph.inputs[b].shape
            # finite differences of the gradient dE/da along b, evaluated by the same kernel
            xb = pt[b].ravel()
            cols = []
            for j in range(xb.size):
                h = 1e-6 * max(1.0, abs(xb[j]))
                batch = {n: np.stack([v, v]) for n, v in pt.items()}
                flat = batch[b].reshape(2, -1)
                flat[0, j] += h
                flat[1, j] -= h
                grads = k.evaluate(batch)[f"dE_d{a}"]
                cols.append((grads[0] - grads[1]) / (2 * h))
            fd = np.moveaxis(np.array(cols), 0, -1).reshape(hess.shape)
            np.testing.assert_allclose(hess, fd, rtol=1e-5, atol=1e-6 * max(1.0, np.max(np.abs(fd))),
                                       err_msg=f"{case}/{mode}: d2E_d{a}_d{b} at {pt}")
            if a == b:
                n = pt[a].size
                np.testing.assert_allclose(hess.reshape(n, n), hess.reshape(n, n).T, rtol=1e-10, atol=1e-12)
            else:
                other = base[f"d2E_d{b}_d{a}"][0]
                na, nb = pt[a].size, pt[b].size
                np.testing.assert_allclose(hess.reshape(na, nb), other.reshape(nb, na).T, rtol=1e-10, atol=1e-12)


# ---- random expression trees --------------------------------------------------------------------------
# Smooth everywhere on the sampled box (no kinks), so finite differences are meaningful at any point.
_UNARY_T = ["sin({})", "cos({})", "tanh({})", "arctan({})", "sigmoid({})", "softplus({})", "erf({})",
            "square({})", "exp(tanh({}))", "sqrt(1 + square({}))", "log(1 + square({}))", "-({})"]
_BINARY_T = ["({} + {})", "({} - {})", "({} * {})", "({} / (2 + sin({})))"]
_VEC2SCALAR = ["sum({})", "mean({})", "prod({})", "({})[0]", "({})[-1]", "dot({0}, {0})"]


@st.composite
def expr_trees(draw, depth=4):
    """(expression text, rank) over x: [3] and s: []; the top two levels are never leaves."""
    if depth == 0 or (depth < 3 and draw(st.integers(0, 2)) == 0):
        return draw(st.sampled_from([("x", 1), ("s", 0), ("x", 1), ("0.7", 0), ("x[::-1]", 1)]))
    kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce"]))
    if kind == "unary":
        e, r = draw(expr_trees(depth - 1))
        return draw(st.sampled_from(_UNARY_T)).format(e), r
    if kind == "binary":
        (a, ra), (b, rb) = draw(expr_trees(depth - 1)), draw(expr_trees(depth - 1))
        return draw(st.sampled_from(_BINARY_T)).format(a, b), max(ra, rb)
    e, r = draw(expr_trees(depth - 1))
    if r == 0:
        return f"({e}) * x[1]", 0
    return draw(st.sampled_from(_VEC2SCALAR)).format(e), 0


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(tree=expr_trees(), data=st.data())
def test_random_expression_trees(model_from_text, tree, data):
    expr, _ = tree
    group = Group("tree", inputs={"x": ([3], -1.0, 1.0), "s": ([], -1.0, 1.0)},
                  outputs={"E": expr}, wrt=["x", "s"])
    m = model_from_text(group.text(), "tree")
    pt = data.draw(points_strategy(group))
    check(Kernels(group, m), {n: v[None] for n, v in pt.items()})
