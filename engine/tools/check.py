"""The derivative-check oracle: every requested derivative by every mode that can compute it,
compared with each other and with central finite differences (`adgrad check`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compile import compile_model, default_requests
from ..errors import DataError
from ..spec import derivative_name
from ..store.input import InputReader
from . import labelled, sample

AD_TOL = 1e-9       # modes against each other (relative to the derivative's magnitude)
FD_TOL = 1e-5       # against central differences with step 1e-6 * max(1, |x|)


@dataclass
class Row:
    derivative: str
    a: str
    b: str
    max_abs: float
    max_rel: float
    ok: bool


SMALL_INPUT = 36     # a model file alone: second derivatives (tangents) of scalar outputs wrt inputs this small


def requested(model, config_derivatives=None):
    """(of, wrt) pairs: the config's, else every output against every input, and the second
    derivative of every scalar output with respect to every input of at most SMALL_INPUT entries
    twice (the tangent of an energy)."""
    if config_derivatives:
        return [(d.of, tuple(d.wrt)) for d in config_derivatives]
    g = model.graph
    second = [(o, (i, i)) for o, v in g.outputs.items() if not v.shape
              for i, w in g.inputs.items() if w.size <= SMALL_INPUT]
    return default_requests(model) + second


def sample_points(model, k, seed=0):
    """k points of every input, drawn as `adgrad sample` draws them."""
    return sample.Sampler(sample.columns(model.spec), seed).rows(0, k)


def points(model, config, k, seed=0):
    """The first k points of the config's input file, or k sampled points without one."""
    if config is None or config.input.path is None:
        return sample_points(model, k, seed)
    shapes = {n: d.shape for n, d in model.spec.inputs.items()}
    reader = InputReader(config.input.path, {n: config.input.datasets[n] for n in shapes}, shapes)
    try:
        if reader.points == 0:
            raise DataError(f"{config.input.path}: the input file has no points to check the derivatives at "
                            f"(check the model file instead: it samples its points)")
        return reader.read(0, min(k, reader.points))
    finally:
        reader.close()


def _compare(name, a_name, a, b_name, b, tol):
    """Agreement where both are finite, relative to b's largest finite magnitude; and the same
    places non-finite in both (a NaN where the other is a number is a mismatch)."""
    both = np.isfinite(a) & np.isfinite(b)
    same_pattern = bool(np.array_equal(np.isfinite(a), np.isfinite(b)))
    diff = np.abs(a - b)[both]
    scale = float(np.max(np.abs(b[both]))) if diff.size else 0.0
    max_abs = float(np.max(diff)) if diff.size else 0.0
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
    ok = same_pattern and max_abs <= tol * max(scale, 1e-8)
    return Row(name, a_name, b_name, max_abs, rel, ok)


def finite_difference(model, of, wrt, points, inner_wrt=None, math="vector", log=None):
    """Central differences of `of` (or of d of/d inner_wrt) with respect to `wrt`, per point:
    shape (K, *of_shape[, *inner_shape], *wrt_shape). `log`: compile_model's."""
    derivs = [] if inner_wrt is None else [(of, inner_wrt)]
    target = of if inner_wrt is None else derivative_name(of, (inner_wrt,))
    kern = compile_model(model, derivs, mode="reverse", values=[of], math=math,
                         log=labelled(log, f"{target} for central differences"))
    k = next(iter(points.values())).shape[0]
    if wrt in model.spec.inputs:
        x = points[wrt]
        n = int(np.prod(x.shape[1:]))
        flat = x.reshape(k, n)
        h = 1e-6 * np.maximum(1.0, np.abs(flat))
        # all perturbations in one batch: (k, n, 2) points
        batch = {nm: np.repeat(p[:, None], 2 * n, axis=1).reshape((k * 2 * n,) + p.shape[1:])
                 for nm, p in points.items()}
        pert = np.repeat(flat[:, None, :], 2 * n, axis=1)
        idx = np.arange(n)
        pert[:, 2 * idx, idx] += h
        pert[:, 2 * idx + 1, idx] -= h
        batch[wrt] = pert.reshape((k * 2 * n,) + x.shape[1:])
        f = kern.evaluate(batch)[target].reshape((k, n, 2, -1))
        d = (f[:, :, 0] - f[:, :, 1]) / (2 * h[:, :, None])       # (k, n, out)
        out_shape = kern.output_shapes[target]
        return np.moveaxis(d, 1, -1).reshape((k,) + out_shape + x.shape[1:])
    p0 = model.param_values[wrt]
    cols = []
    for j in range(p0.size):
        h = 1e-6 * max(1.0, abs(p0.flat[j]))
        vals = []
        for s in (1, -1):
            p = p0.copy()
            p.flat[j] += s * h
            vals.append(kern.evaluate(points, params={wrt: p})[target])
        cols.append((vals[0] - vals[1]) / (2 * h))
    d = np.stack(cols, axis=-1)
    return d.reshape(d.shape[:-1] + p0.shape)


def check(model, pairs, points, manual_too=True, math="vector", log=None):
    """Rows comparing every available mode with the others and with finite differences; the kernels
    compiled with `math` (a config's engine.math), as a run of it computes. `log`: compile_model's, each
    line followed by the derivative and mode it compiles."""
    rows = []
    for of, wrt in pairs:
        modes = ["forward", "reverse"]
        name = derivative_name(of, wrt)
        if manual_too and derivative_name(of, wrt[:1]) in model.manual:
            modes.append("manual")
        results = {}
        for mode in modes:
            kern = compile_model(model, [(of, list(wrt))], mode=mode, values=[of], math=math,
                                 log=labelled(log, f"{name} by {mode} mode"))
            results[mode] = kern.evaluate(points)[name]
        if len(wrt) == 1:
            fd = finite_difference(model, of, wrt[0], points, math=math, log=log)
        else:
            fd = finite_difference(model, of, wrt[1], points, inner_wrt=wrt[0], math=math, log=log)
        for i, ma in enumerate(modes):
            for mb in modes[i + 1:]:
                rows.append(_compare(name, ma, results[ma], mb, results[mb], AD_TOL))
            rows.append(_compare(name, ma, results[ma], "central FD", fd, FD_TOL))
    return rows


def format_rows(rows):
    head = f"{'derivative':<18} {'compared':<28} {'max abs err':>12} {'max rel err':>12}  result"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.derivative:<18} {r.a + ' vs ' + r.b:<28} {r.max_abs:>12.3e} {r.max_rel:>12.3e}  "
                     f"{'ok' if r.ok else 'MISMATCH'}")
    return "\n".join(lines)

