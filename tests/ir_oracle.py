"""Derivatives checked without numba: a model's graph with derivatives appended (as differentiated,
before any optimization), evaluated by the numpy interpreter, and central differences of any
interpreted graph. Interpreting a graph costs milliseconds where compiling it costs seconds, so
tests that try many expressions use these and compile only a few representative cases."""
from __future__ import annotations

import numpy as np

from adgrad.engine.compile import _derive, compile_model
from adgrad.engine.spec import as_request
from adgrad.engine.ir.core import Builder, Graph
from adgrad.engine.ir.interp import interpret


def derivative_graph(model, requests, mode):
    """The model's graph with outputs the model's own plus each (of, wrt) of `requests` (wrt a name
    or a pair for a second derivative), named as compile_model names them (dE_dx, d2E_dx_dy)."""
    base = model.graph
    b = Builder(Graph(dict(base.inputs), dict(base.params), list(base.eqns), {}))
    outputs = dict(base.outputs)
    for of, wrt in requests:
        d, var = _derive(b, model, as_request((of, wrt), mode))
        outputs[d.name] = var
    b.graph.outputs = outputs
    return b.graph


def central_differences(graph, point, params, wrt, outs, rel=1e-6):
    """d out / d point[wrt] of the interpreted graph by central differences with step
    rel * max(1, |x|): {out: array of shape (*out_shape, *wrt_shape)}."""
    x0 = np.asarray(point[wrt], dtype=float)
    cols = {o: [] for o in outs}
    for j in range(x0.size):
        h = rel * max(1.0, abs(x0.flat[j]))
        sides = []
        for step in (h, -h):
            x = x0.copy()
            x.flat[j] += step
            sides.append(interpret(graph, {**point, wrt: x}, params, want=outs))
        for o in outs:
            cols[o].append((sides[0][o] - sides[1][o]) / (2 * h))
    return {o: np.moveaxis(np.array(c), 0, -1).reshape(graph.outputs[o].shape + x0.shape) for o, c in cols.items()}


def assert_close_to_fd(got, fd, values=(), msg=""):
    """A derivative against central differences: rtol 1e-5, atol 1e-6 of the largest magnitude
    among the derivative and the `values` differenced (whose rounding the differences inherit)."""
    scale = max([1.0] + [float(np.max(np.abs(a), initial=0.0)) for a in (fd, *values)])
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6 * scale, err_msg=msg)


def assert_compiled_matches(model, requests, mode, points):
    """compile_model(model, requests, mode) evaluated at `points` ({name: (M, *shape)}) equals the
    interpreted derivative graph point by point (rtol 1e-11), values and derivatives."""
    out = compile_model(model, requests, mode=mode).evaluate(points)
    g = derivative_graph(model, requests, mode)
    m = next(iter(points.values())).shape[0]
    for i in range(m):
        want = interpret(g, {n: v[i] for n, v in points.items()}, model.param_values)
        for name, w in want.items():
            np.testing.assert_allclose(out[name][i], w, rtol=1e-11, atol=1e-13 * max(1.0, np.abs(w).max()),
                                       err_msg=f"{model.name}: {name} at point {i}: compiled != interpreted")
