"""A loaded model: the spec, its param values and its typed IR graph (values and hand-written rules)."""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from . import potentials
from .errors import SpecError
from .limits import MAX_ELEMENTS
from .ir.builtins.tables import ConstantTable, TableFunction, TableSet
from .ir.core import Builder, Graph, Var
from .ir.interp import interpret
from .ir.lower import Lowerer
from .numeric.tables import MIN_NODES, TableData
from .solve import solve
from .spec import Expr, H5Ref, Model, ParamDecl, PotentialRef, SolveDecl, TableRef, derivative_name


@dataclass
class LoadedModel:
    spec: Model
    graph: Graph                # inputs, params, outputs; lets and manual derivatives lowered too
    custom: dict                # Var -> CustomRule (function-level derivative rules)
    manual: dict                # "d{of}_d{wrt}" -> Var (model-level hand-written derivatives)
    param_values: dict          # graph param name -> float64 array (a table's: its spline coefficients)
    tables: dict                # param name -> TableData | Potential (their grids are compiled in)
    species_guard: Var | None = None    # scalar bool: every runtime species index is valid (lower.py)

    @property
    def name(self):
        return self.spec.name

    def with_params(self, overrides: dict):
        """A copy whose params take `overrides` (name -> ParamDecl); shapes and grids must not change."""
        values = dict(self.param_values)
        for name, decl in overrides.items():
            val = param_value(decl, values)
            if name in self.tables:
                values.update(_override_tables(decl, self.tables[name], val))
                continue
            if not isinstance(val, np.ndarray):
                raise decl.loc.error(f"params.{name}: the model's param is an array; a table or potential "
                                     f"cannot replace it")
            old = values[name]
            if val.shape != old.shape:
                raise decl.loc.error(f"params.{name}: the override has shape {val.shape} but the model's "
                                     f"param has shape {old.shape}")
            values[name] = val
        new = copy.copy(self)
        new.param_values = values
        return new


def table_params(name, val):
    """{graph param name: TableData} of a table or potential param (a potential's phi shares z2r's)."""
    if isinstance(val, TableData):
        return {name: val}
    out, seen = {}, {}
    for attr, data in val.tables.items():
        key = seen.setdefault(id(data.values), f"{name}__{attr}")
        out.setdefault(key, data)
    return out


def _override_tables(decl, old, new):
    if type(new) is not type(old):
        raise decl.loc.error(f"params.{decl.name}: the override must be a {'table' if isinstance(old, TableData) else 'potential'}"
                             f", like the model's param")
    olds, news = table_params(decl.name, old), table_params(decl.name, new)
    for key, a in olds.items():
        b = news.get(key)
        if b is None or (a.values.shape, a.x0, a.dx, a.xlin, a.over_x) != (b.values.shape, b.x0, b.dx, b.xlin, b.over_x):
            raise decl.loc.error(f"params.{decl.name}: the override's grid or species differ from the model's "
                                 f"(compiled in); change the model instead")
    out = {key: data.coefficients() for key, data in news.items()}
    if isinstance(old, potentials.Potential):
        for attr, a in old.constants.items():
            a, b = np.asarray(a, dtype=np.float64), np.asarray(new.constants.get(attr, np.nan), dtype=np.float64)
            if a.shape != b.shape or (a.size == 1 and not np.array_equal(a, b)):
                raise decl.loc.error(f"params.{decl.name}: the override's '{attr}' differs from the model's in shape, "
                                     f"or is a single value compiled in; change the model instead")
            if a.size > 1:
                out[f"{decl.name}__{attr}"] = b.ravel()
    return out


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
    if isinstance(v, TableRef):
        return _table(decl, v, earlier)
    if isinstance(v, PotentialRef):
        try:
            return potentials.read(v.files, v.format, v.elements)
        except ValueError as exc:
            raise decl.loc.error(f"params.{decl.name}: {exc}") from None
    if isinstance(v, H5Ref):
        return _h5(decl, v)
    try:
        arr = np.asarray(v, dtype=float)
    except ValueError:
        raise decl.loc.error(f"params.{decl.name}: nested lists must be rectangular") from None
    return arr


def _table(decl, ref, earlier):
    values = _h5(decl, ref.values) if isinstance(ref.values, H5Ref) else \
        param_value(ParamDecl(decl.name, ref.values, decl.loc), earlier)
    if values.ndim < 1 or values.shape[-1] < MIN_NODES:
        raise decl.loc.error(f"params.{decl.name}: a table needs at least {MIN_NODES} values, got {values.shape[-1:]}")
    if not np.all(np.isfinite(values)):
        raise decl.loc.error(f"params.{decl.name}: the table holds a NaN or an infinity")
    end = ref.x0 + (values.shape[-1] - 1) * ref.dx
    if not math.isfinite(end):
        raise decl.loc.error(f"params.{decl.name}: the table's grid ends at x = {end} (x0 + (n - 1) dx), beyond "
                             f"float64's range")
    xlin = end if ref.beyond == "linear" else math.inf
    return TableData(values, ref.x0, ref.dx, xlin)


def _h5(decl, v):
    import h5py
    try:
        with h5py.File(v.file, "r") as f:
            if v.dataset not in f:
                raise decl.loc.error(f"params.{decl.name}: dataset '{v.dataset}' not found in {v.file}")
            if f[v.dataset].size > MAX_ELEMENTS:
                raise decl.loc.error(f"params.{decl.name}: dataset '{v.dataset}' in {v.file} has "
                                     f"{f[v.dataset].size:,} elements, more than the limit of {MAX_ELEMENTS:,}")
            arr = np.asarray(f[v.dataset][()], dtype=float)
    except OSError as exc:
        raise decl.loc.error(f"params.{decl.name}: cannot open {v.file}: {exc}") from None
    if v.shape is not None and arr.shape != v.shape:
        raise decl.loc.error(f"params.{decl.name}: dataset '{v.dataset}' in {v.file} has shape {arr.shape}, "
                             f"but the param declares shape {list(v.shape)}")
    return arr


def build(spec: Model) -> LoadedModel:
    """Lower every expression of the model into one graph, checking names and shapes."""
    values, tables = {}, {}
    for name, decl in spec.params.items():
        val = param_value(decl, values)
        if isinstance(val, np.ndarray):
            values[name] = val
        else:
            tables[name] = val
    b = Builder()
    g = b.graph
    for name, decl in spec.inputs.items():
        g.inputs[name] = Var(decl.shape)
    for name in values:
        g.params[name] = Var(values[name].shape)
    named = dict(g.params)
    for name, val in tables.items():
        named[name] = _table_env(name, val, g, values)
    custom = {}
    lw = Lowerer(b, spec.functions, custom, named)
    env = {**g.inputs, **named}
    for name, expr in spec.lets.items():
        env[name] = solve(b, lw.lower, custom, expr, env) if isinstance(expr, SolveDecl) else lw.lower(expr, env)
    for name, expr in spec.outputs.items():
        g.outputs[name] = lw.lower(expr, env)
    manual = {}
    for name, expr in spec.derivatives.items():
        of, wrt = _split_derivative_name(expr, name, spec)
        v = lw.lower(expr, env)
        want = g.outputs[of].shape + env[wrt].shape
        if v.shape != want:
            if not _broadcasts_to(v.shape, want):
                raise expr.error(f"the derivative of {of} (shape {g.outputs[of].shape}) with respect to {wrt} "
                                 f"(shape {env[wrt].shape}) has shape {want}, but this expression has shape {v.shape}")
            with b.active():
                v = b.emit("broadcast_to", v, shape=want)
        manual[name] = v
    return LoadedModel(spec, g, custom, manual, values, tables, lw.species_guard())


def _table_env(name, val, g, values):
    """A table param's TableFunction (a potential's TableSet) over new graph params of coefficients."""
    funcs, params = {}, table_params(name, val)
    for key, data in params.items():
        values[key] = data.coefficients()
        g.params[key] = Var(values[key].shape)
    for attr, data in (val.tables.items() if isinstance(val, potentials.Potential) else [(None, val)]):
        key = next(k for k, d in params.items() if d.values is data.values)
        label = f"{name}.{attr}" if attr else name
        funcs[attr] = TableFunction(label, g.params[key], data.lead, data.x0, data.dx, data.n, data.xlin,
                                    data.over_x)
    if not isinstance(val, potentials.Potential):
        return funcs[None]
    constants = {}
    for attr, c in val.constants.items():
        c = np.asarray(c, dtype=np.float64)
        if c.size == 1:             # one species (or a scalar): a compile-time constant
            constants[attr] = float(c.ravel()[0])
            continue
        key = f"{name}__{attr}"
        values[key] = c.ravel()
        g.params[key] = Var(values[key].shape)
        constants[attr] = ConstantTable(f"{name}.{attr}", g.params[key], c.shape)
    return TableSet(name, funcs, constants)


def _split_derivative_name(expr, name, spec):
    for of in spec.outputs:
        for wrt in list(spec.inputs) + list(spec.params):
            if name == derivative_name(of, (wrt,)):
                return of, wrt
    raise SpecError(f"derivatives: '{name}' must be named d<output>_d<input or param>, "
                    f"e.g. d{next(iter(spec.outputs))}_d{next(iter(spec.inputs), 'x')}",
                    expr.path, expr.line, max(1, expr.col - len(name) - 2))


def _broadcasts_to(shape, target):
    """Whether numpy broadcasts `shape` to `target` (np.broadcast_shapes raises where neither fits)."""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False
