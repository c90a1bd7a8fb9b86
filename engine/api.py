"""The public surface: load_model, compile_model and the compiled kernel's evaluate."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numba
import numpy as np

from .ad import select
from .ad.transform import jacobian_forward, jacobian_reverse
from .codegen.emit import Emitter
from .codegen.load import load, module_source
from .errors import SpecError
from .ir.core import Builder, Graph, Var
from .model import LoadedModel, build
from .opt.dce import dce
from .opt.scalarize import pays_off, scalarize
from .numeric.exactsum import ExactSum
from .spec import load_model_file


def load_model(path, input_shapes=None) -> LoadedModel:
    """Parse and check a model file; `input_shapes` overrides declared input shapes (name -> shape)."""
    return build(load_model_file(os.fspath(path), input_shapes))


@dataclass(frozen=True)
class Derivative:
    """One requested derivative, its output name and how it is computed."""
    of: str
    wrt: tuple
    mode: str                   # forward | reverse | manual (second order: the inner mode, then forward)
    choice: select.Choice | None
    kind: str = ""              # "" per point, "sum" summed over points, "jvp" or "vjp" a product

    @property
    def name(self):
        base = f"d{self.of}_d{self.wrt[0]}" if len(self.wrt) == 1 else f"d2{self.of}_d{self.wrt[0]}_d{self.wrt[1]}"
        return base + (f"_{self.kind}" if self.kind else "")


@dataclass
class CompiledKernel:
    model: LoadedModel
    graph: Graph                # the optimized graph: values and derivatives as outputs
    derivatives: list
    source: str
    module: object
    workspace_size: int
    output_shapes: dict = field(default_factory=dict)   # per point
    reduced: frozenset = frozenset()                      # results summed over all points
    scalarized: bool = False    # emitted as straight-line scalar code (engine/opt/scalarize.py)
    code_graph: Graph | None = None   # the graph the source was emitted from (scalarized or not)

    @property
    def point_kernel(self):
        return self.module.point

    @property
    def modes(self):
        return {d.name: d.mode for d in self.derivatives}

    def evaluate(self, inputs: dict, out: dict | None = None, params: dict | None = None, threads=None,
                 nonfinite: np.ndarray | None = None):
        """Evaluate at every point. `inputs`: name -> array (M, *shape). `out`: optional preallocated
        arrays (M, *shape), float64 C-contiguous ones are filled in place; for a reduced (summed)
        result an array (*shape) gets the correctly rounded sum, an ExactSum gets the rows added, and
        an array (M, *shape) gets the per-point rows. `nonfinite`: an optional bool array (M,), set
        to whether each point's inputs or float64 results hold a NaN or an infinity.
        Returns {name: array or that ExactSum}."""
        g = self.graph
        m = None
        rows = []
        for name, v in g.inputs.items():
            if name not in inputs:
                raise KeyError(f"missing input '{name}'")
            x = np.asarray(inputs[name], dtype=np.float64)
            if x.shape[1:] != v.shape:
                raise ValueError(f"input '{name}' must have shape (M, *{v.shape}), got {x.shape}")
            if m is None:
                m = x.shape[0]
            elif x.shape[0] != m:
                raise ValueError(f"input '{name}' has {x.shape[0]} points, others have {m}")
            row = np.ascontiguousarray(x.reshape(m, v.size))
            if row.flags.writeable:     # inputs mapped from a file are read-only: numba compiles one
                row = row.view()        # driver for read-only arrays, so make every input one
                row.flags.writeable = False
            rows.append(row)
        pvals = {**self.model.param_values, **(params or {})}
        prms = [np.ascontiguousarray(np.asarray(pvals[n], dtype=np.float64).reshape(v.size))
                for n, v in g.params.items()]
        out = {} if out is None else out
        results, targets, copies = {}, [], []
        for name, shape in self.output_shapes.items():
            full, size = (m,) + shape, max(1, int(np.prod(shape)))
            dst = out.get(name)
            if name in self.reduced and (dst is None or isinstance(dst, ExactSum) or dst.shape == shape):
                targets.append(np.empty((m, size)))     # per-point rows, summed exactly below
                results[name] = np.empty(shape) if dst is None else dst
                copies.append((results[name], targets[-1].reshape(full), True))
                continue
            if dst is None:
                dst = np.empty(full)
            elif dst.shape != full:
                raise ValueError(f"out['{name}'] must have shape {full}, got {dst.shape}")
            results[name] = dst
            if dst.dtype == np.float64 and dst.flags.c_contiguous:
                targets.append(dst.reshape(m, size))
            else:                       # compute in float64, then cast/copy into the caller's array
                targets.append(np.empty((m, size)))
                copies.append((dst, targets[-1], False))
        if threads:
            numba.set_num_threads(threads)
        n_workers = max(1, min(numba.get_num_threads(), m or 1))
        ws = np.zeros((n_workers, max(1, self.workspace_size)))
        if nonfinite is None:
            self.module.batch(*rows, *prms, *targets, ws)
        else:
            self.module.batch_checked(*rows, *prms, *targets, ws, nonfinite)
        for dst, t, reduce in copies:
            if not reduce:
                dst[...] = t.reshape(dst.shape)
            elif isinstance(dst, ExactSum):     # the caller accumulates across calls (chunks, shards)
                dst.add(t)
            else:                   # exact, so the same bits whatever the order or thread count
                acc = ExactSum(dst.shape)
                acc.add(t)
                dst[...] = acc.value()
        return results


def compile_model(model: LoadedModel, derivatives=(), mode="auto", values=None) -> CompiledKernel:
    """Compile values and derivatives into one point kernel and a parallel batch driver.

    derivatives: (of, wrt) pairs; wrt is a name or a list of two names (second derivative), or
    DerivativeRequest objects (which may carry their own mode). values: output names (default all).
    """
    base = model.graph
    b = Builder(Graph(dict(base.inputs), dict(base.params), list(base.eqns), {}))
    names = {**base.inputs, **base.params}
    outs = {}
    for v in (list(base.outputs) if values is None else values):
        if v not in base.outputs:
            raise SpecError(f"'{v}' is not an output of model '{model.name}'")
        outs[v] = base.outputs[v]
    derivs = []
    for req in derivatives:
        of, wrt, item_mode, kind, extra = _unpack(req, mode)
        loc = getattr(req, "loc", None)
        if of not in base.outputs:
            raise SpecError(f"'{of}' is not an output of model '{model.name}'")
        for w in wrt:
            if w not in names:
                raise SpecError(f"'{w}' is not an input or param of model '{model.name}'")
        seed = None
        if extra is not None:           # direction / cotangent: one more per-point input
            shape = (names[wrt[0]] if kind == "jvp" else base.outputs[of]).shape
            seed = _product_input(b, model, extra, shape, loc)
        d, var = _derive(b, model, of, wrt, item_mode, loc, kind, seed)
        derivs.append(d)
        outs[d.name] = var
    b.graph.outputs = outs
    graph = dce(b.graph)
    # a Hessian wrt one argument twice is symmetric in its last 2r axes (r = that argument's rank)
    symmetric = {d.name: len(names[d.wrt[0]].shape) for d in derivs
                 if len(d.wrt) == 2 and d.wrt[0] == d.wrt[1] and not d.kind}
    scalar = scalarize(graph, symmetric)
    if scalar is not None and not pays_off(graph, scalar):
        scalar = None
    em = Emitter(scalar or graph, list(graph.inputs), list(graph.params), list(outs))
    body = em.emit()
    point_args = em.args
    per_point = [True] * len(graph.inputs) + [False] * len(graph.params) + [True] * len(outs)
    source = module_source(model.name, em.globals, point_args, body, per_point)
    module = load(source)
    kernel = CompiledKernel(model, graph, derivs, source, module, em.work_size,
                            {n: v.shape for n, v in outs.items()},
                            frozenset(d.name for d in derivs if d.kind == "sum"), scalar is not None,
                            scalar or graph)
    kernel.evaluate({n: np.empty((0,) + v.shape) for n, v in graph.inputs.items()})   # jit (or load) now
    return kernel


def _unpack(req, default_mode):
    """(of, wrt, mode, kind, extra input name) of a request: a DerivativeRequest or (of, wrt)."""
    if hasattr(req, "of"):
        kind = "sum" if req.reduce else "jvp" if req.direction else "vjp" if req.cotangent else ""
        if sum(bool(x) for x in (req.reduce, req.direction, req.cotangent)) > 1:
            raise SpecError("compute.derivatives: reduce, direction and cotangent exclude each other",
                            *_where(req))
        if kind in ("jvp", "vjp") and len(req.wrt) != 1:
            raise SpecError(f"compute.derivatives: a {kind} is of a first derivative (one wrt name)", *_where(req))
        return req.of, tuple(req.wrt), req.mode or default_mode, kind, req.direction or req.cotangent
    of, wrt = req
    wrt = (wrt,) if isinstance(wrt, str) else tuple(wrt)
    return of, wrt, default_mode, "", None


def _where(req):
    return (req.loc.path, req.loc.line, req.loc.col) if req.loc else (None, None, None)


def _product_input(b, model, name, shape, loc):
    """The per-point input holding a jvp's direction or a vjp's cotangent."""
    g = b.graph
    if name in model.graph.inputs or name in model.graph.params:
        raise SpecError(f"'{name}' names an input or param of model '{model.name}'; a direction or cotangent "
                        f"is a separate dataset", *((loc.path, loc.line, loc.col) if loc else ()))
    v = g.inputs.get(name)
    if v is None:
        v = g.inputs[name] = Var(shape)
    elif v.shape != shape:
        raise SpecError(f"'{name}' is used with shapes {v.shape} and {shape}",
                        *((loc.path, loc.line, loc.col) if loc else ()))
    return v


def _derive(b, model, of, wrt, mode, loc=None, kind="", seed=None):
    g = b.graph
    env = {**g.inputs, **g.params}
    of_var = model.graph.outputs[of]
    first = env[wrt[0]]
    name1 = f"d{of}_d{wrt[0]}"
    if kind == "jvp":                   # products never build the Jacobian: one sweep, seeded
        var = jacobian_forward(b, model.custom, first, of_var, seed=seed)
        var = var if var is not None else b.const(0.0, of_var.shape)
        return Derivative(of, tuple(wrt), "forward", select.Choice("forward", 0, 0, "a jvp is forward mode"), kind), var
    if kind == "vjp":
        var = jacobian_reverse(b, model.custom, first, of_var, seed=seed)
        var = var if var is not None else b.const(0.0, first.shape)
        return Derivative(of, tuple(wrt), "reverse", select.Choice("reverse", 0, 0, "a vjp is reverse mode"), kind), var
    choice = select.choose(g, model.custom, of_var, first, mode, name1 in model.manual)
    if choice.mode == "manual":
        if name1 not in model.manual:
            where = (loc.path, loc.line, loc.col) if loc else (model.spec.path, None, None)
            raise SpecError(f"mode manual: model '{model.name}' ({model.spec.path}) has no hand-written "
                            f"derivative '{name1}' under derivatives:", *where)
        var = model.manual[name1]
    elif choice.mode == "forward":
        var = jacobian_forward(b, model.custom, first, of_var)
    else:
        var = jacobian_reverse(b, model.custom, first, of_var)
    if var is None:
        var = b.const(0.0, of_var.shape + first.shape)
    if len(wrt) == 2:                   # forward mode over the first derivative
        second = env[wrt[1]]
        var2 = jacobian_forward(b, model.custom, second, var)
        var = var2 if var2 is not None else b.const(0.0, var.shape + second.shape)
        choice = select.Choice(choice.mode, choice.forward_cost, choice.reverse_cost,
                               f"{choice.mode} for the first derivative, then forward over it")
    return Derivative(of, tuple(wrt), choice.mode, choice, kind), var
