"""Model + requested results -> CompiledKernel: derivatives (ad/), optimization (opt/), source
(codegen/), the cached module, and the kernel object (kernel.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ad import select
from .ad.transform import jacobian_forward, jacobian_reverse
from .codegen.emit import Emitter
from .codegen.load import load, module_source
from .errors import SpecError
from .ir.core import Builder, Graph, Var
from .kernel import CompiledKernel
from .model import LoadedModel
from .opt.dce import dce
from .opt.scalarize import pays_off, scalarize


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


def default_requests(model: LoadedModel):
    """What a model file alone asks for: every output's gradient with respect to every input."""
    return [(o, (i,)) for o in model.spec.outputs for i in model.spec.inputs]


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
