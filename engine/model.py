"""A loaded model: the spec, its param values and its typed IR graph (values and hand-written rules)."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .errors import SpecError
from .ir.core import Builder, Graph, Var
from .ir.interp import interpret
from .ir.lower import Lowerer
from .spec import Expr, H5Ref, Model, ParamDecl, derivative_name


@dataclass
class LoadedModel:
    spec: Model
    graph: Graph                # inputs, params, outputs; lets and manual derivatives lowered too
    custom: dict                # Var -> CustomRule (function-level derivative rules)
    manual: dict                # "d{of}_d{wrt}" -> Var (model-level hand-written derivatives)
    param_values: dict          # name -> float64 array

    @property
    def name(self):
        return self.spec.name

    def with_params(self, overrides: dict):
        """A copy whose params take `overrides` (name -> ParamDecl); shapes must not change."""
        values = dict(self.param_values)
        for name, decl in overrides.items():
            val = param_value(decl, values)
            old = values[name]
            if val.shape != old.shape:
                raise decl.loc.error(f"params.{name}: the override has shape {val.shape} but the model's "
                                     f"param has shape {old.shape}")
            values[name] = val
        new = copy.copy(self)
        new.param_values = values
        return new


def param_value(decl: ParamDecl, earlier: dict) -> np.ndarray:
    """The numeric value of a param: a number, a nested list, a constant expression or {file, dataset}."""
    v = decl.value
    if isinstance(v, Expr):
        b = Builder()
        env = {}
        with b.active():
            for name, arr in earlier.items():
                env[name] = b.emit("array", data=tuple(arr.ravel().tolist()), shape=arr.shape) if arr.shape \
                    else b.const(float(arr))
        out = Lowerer(b, {}, {}, env).lower(v, env)
        b.graph.outputs["value"] = out
        return interpret(b.graph, {}, {})["value"]
    if isinstance(v, H5Ref):
        import h5py
        try:
            with h5py.File(v.file, "r") as f:
                if v.dataset not in f:
                    raise decl.loc.error(f"params.{decl.name}: dataset '{v.dataset}' not found in {v.file}")
                arr = np.asarray(f[v.dataset][()], dtype=float)
        except OSError as exc:
            raise decl.loc.error(f"params.{decl.name}: cannot open {v.file}: {exc}") from None
        if v.shape is not None and arr.shape != v.shape:
            raise decl.loc.error(f"params.{decl.name}: dataset '{v.dataset}' in {v.file} has shape {arr.shape}, "
                                 f"but the param declares shape {list(v.shape)}")
        return arr
    try:
        arr = np.asarray(v, dtype=float)
    except ValueError:
        raise decl.loc.error(f"params.{decl.name}: nested lists must be rectangular") from None
    return arr


def build(spec: Model) -> LoadedModel:
    """Lower every expression of the model into one graph, checking names and shapes."""
    values = {}
    for name, decl in spec.params.items():
        values[name] = param_value(decl, values)
    b = Builder()
    g = b.graph
    for name, decl in spec.inputs.items():
        g.inputs[name] = Var(decl.shape)
    for name in spec.params:
        g.params[name] = Var(values[name].shape)
    custom = {}
    lw = Lowerer(b, spec.functions, custom, dict(g.params))
    env = {**g.inputs, **g.params}
    for name, expr in spec.lets.items():
        env[name] = lw.lower(expr, env)
    for name, expr in spec.outputs.items():
        g.outputs[name] = lw.lower(expr, env)
    manual = {}
    for name, expr in spec.derivatives.items():
        of, wrt = _split_derivative_name(expr, name, spec)
        v = lw.lower(expr, env)
        want = g.outputs[of].shape + env[wrt].shape
        if v.shape != want:
            if np.broadcast_shapes(v.shape, want) != want:
                raise expr.error(f"the derivative of {of} (shape {g.outputs[of].shape}) with respect to {wrt} "
                                 f"(shape {env[wrt].shape}) has shape {want}, but this expression has shape {v.shape}")
            with b.active():
                v = b.emit("broadcast_to", v, shape=want)
        manual[name] = v
    return LoadedModel(spec, g, custom, manual, values)


def _split_derivative_name(expr, name, spec):
    for of in spec.outputs:
        for wrt in list(spec.inputs) + list(spec.params):
            if name == derivative_name(of, (wrt,)):
                return of, wrt
    raise SpecError(f"derivatives: '{name}' must be named d<output>_d<input or param>, "
                    f"e.g. d{next(iter(spec.outputs))}_d{next(iter(spec.inputs), 'x')}",
                    expr.path, expr.line, max(1, expr.col - len(name) - 2))
