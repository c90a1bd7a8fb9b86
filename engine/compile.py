"""Model + requested results -> CompiledKernel: derivatives (ad/), optimization (opt/), source
(codegen/), the cached module, and the kernel object (kernel.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .ad import select
from .ad.transform import jacobian_forward, jacobian_reverse
from .codegen.emit import Emitter
from .codegen.direct import untranslated
from .codegen.load import is_cold, load, module_source, warn
from .codegen.vector import lanes_fit
from .errors import SpecError
from .ir.core import Builder, Graph, Var
from .kernel import CompiledKernel
from .model import LoadedModel
from .opt.dce import dce
from .opt.scalarize import pays_off, scalarize
from .opt.selects import simplify_selects
from .opt.spectral import merge_matfun_derivatives
from .spec import DerivativeRequest, as_request, derivative_name


@dataclass(frozen=True)
class Derivative:
    """A requested derivative as compiled: the request, and the mode chosen for it and why."""
    request: DerivativeRequest
    mode: str                   # forward | reverse | manual (second order: the inner mode, then forward)
    choice: select.Choice

    of = property(lambda self: self.request.of)
    wrt = property(lambda self: self.request.wrt)
    kind = property(lambda self: self.request.kind)
    name = property(lambda self: self.request.name)


def default_requests(model: LoadedModel):
    """What a model file alone asks for: every output's gradient with respect to every input."""
    return [(o, (i,)) for o in model.spec.outputs for i in model.spec.inputs]


MATH = ("vector", "libm")


def compile_model(model: LoadedModel, derivatives=(), mode="auto", values=None, math="vector",
                  log=None, points_last=False, sites=False) -> CompiledKernel:
    """Compile values and derivatives into one point kernel and a parallel batch driver.

    derivatives: (of, wrt) pairs; wrt is a name or a list of two names (second derivative), or
    DerivativeRequest objects (which may carry their own mode). values: output names (default all).
    math: "vector" (engine/numeric/vecmath.py's functions in loop nests that vectorize, see
    engine/codegen/vector.py) or "libm" (libm calls everywhere: numpy's bits).
    log: called with one line before a kernel not in the compile cache is compiled, and with its time after
    (the CLI prints them). The kernel's `cold`: whether this call compiled it; `compile_seconds`: its time.
    points_last: the caller's arrays will have the point axis last (e.g. felupe's (3, 3, q, c)), read
    and written by the strided driver: straight-line code then runs as a lanes kernel whatever its
    number of values a point (engine/codegen/vector.py lanes_fit), faster there and slower on
    point-first rows (with vecmath's functions where libm's were: last bits may differ). Any layout
    works either way.
    sites: a site energy's kernel (_site_buffers) with the driver that gathers rows from a neighbour list
    (CompiledKernel.sites: the ASE calculator's), compiled instead of batch.
    """
    start = time.perf_counter()
    if math not in MATH:
        raise SpecError(f"math must be 'vector' or 'libm', got {math!r}")
    graph, derivs = _results(model, derivatives, mode, values)
    graph = simplify_selects(merge_matfun_derivatives(graph))
    # a Hessian wrt one argument twice is symmetric in its last 2r axes (r = that argument's rank)
    names = {**graph.inputs, **graph.params}
    symmetric = {d.name: names[d.wrt[0]].rank for d in derivs
                 if len(d.wrt) == 2 and d.wrt[0] == d.wrt[1] and not d.kind}
    scalar = scalarize(graph, symmetric)
    if scalar is not None and not pays_off(graph, scalar):
        scalar = None
    em, body = _emit(scalar or graph, graph, math, lanes=scalar is not None and lanes_fit(scalar, math, points_last))
    per_point = [True] * len(graph.inputs) + [False] * len(graph.params) + [True] * len(graph.outputs)
    buffers = _site_buffers(model, graph, em.args) if sites else None

    def kernel_of(translate):
        source = module_source(model.name, em.globals, em.args, body, per_point, math, em.lanes, translate, buffers)
        return CompiledKernel(model, graph, derivs, source, load(source), em.work_size,
                              {n: v.shape for n, v in graph.outputs.items()},
                              frozenset(d.name for d in derivs if d.kind == "sum"), scalar is not None,
                              scalar or graph, math, tuple(em.calls), lanes=bool(em.lanes),
                              in_output_rows=tuple((em.names[v], out[4:]) for v, out in em.staged.items()))
    kernel = kernel_of(None)
    cold = is_cold(kernel.module)
    if cold and log:
        log(f"compiling {model.name} (first use of this model and these derivatives)")
    try:
        _first_call(kernel, points_last, sites)        # jit (or load) now
    except Exception as exc:            # noqa: BLE001  (a body codegen/direct.py could not translate after all)
        reason = untranslated(exc)
        if reason is None:
            raise
        warn(f"model '{model.name}': {reason}; its kernel is compiled by numba's front end instead (slower to "
             f"compile, the same results)")
        kernel = kernel_of(False)
        _first_call(kernel, points_last, sites)
    kernel.module._adgrad_cold = False      # compiled: warm for the rest of the process
    kernel.cold, kernel.compile_seconds = cold, time.perf_counter() - start
    if cold and log:
        log(f"compiled {model.name} in {kernel.compile_seconds:.1f} s")
    return kernel


def _site_buffers(model, graph, args):
    """{kernel argument: its row buffer in the sites driver} of a site-energy kernel (compile_model's sites)."""
    ins, outs = graph.inputs, graph.outputs
    n = ins["R"].shape[0] if "R" in ins and len(ins["R"].shape) == 2 else None
    want = {"R": (n, 3), "valid": (n,), "s": (), "sn": (n,)}
    scalar = [o for o, v in outs.items() if v.shape == ()]
    if n is None or not {"R", "valid"} <= set(ins) <= set(want) or any(v.shape != want[k] for k, v in ins.items()) \
            or len(outs) != 2 or len(scalar) != 1 or outs[next(o for o in outs if o not in scalar)].shape != (n, 3):
        raise SpecError(f"model '{model.name}' is not a site energy (inputs R [N, 3], valid [N], optionally s [] and "
                        f"sn [N]; results a site energy and its gradient with respect to R [N, 3])")
    names = {"R": "b_R", "valid": "b_valid", "s": "b_s", "sn": "b_sn"}
    buffers = {a: names[k] for k, a in zip(ins, args)}
    buffers.update({a: "b_E" if o in scalar else "b_G" for o, a in zip(outs, args[len(args) - len(outs):])})
    return buffers


def _first_call(kernel, points_last, sites=False):
    """Compile (or load) the driver the caller will use: batch on point-first rows, or with
    `points_last` the strided driver, on two points with the point axis last (felupe calls no other,
    so batch, which inlines the body once more, is compiled only if ever called), or with `sites` the
    sites driver on no rows (the ASE calculator's argument types)."""
    if sites:
        index, real = np.zeros(0, dtype=np.int64), np.zeros(0)
        pairs = (np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32),
                 np.zeros((0, 3)), np.zeros(0, dtype=np.uint8), np.zeros((0, 3)))
        kernel.sites(np.zeros(2, dtype=np.int64), 0, 0, (index, index), pairs, real, kernel.param_rows(),
                     (real, np.zeros((1, 0, 3)), np.zeros((1, 3, 3))), kernel.site_buffers(1))
        return
    if not points_last:
        kernel.evaluate({n: np.empty((0,) + v.shape) for n, v in kernel.graph.inputs.items()})
        return

    def last(shape):
        return np.moveaxis(np.zeros((*shape, 2)), -1, 0)
    kernel.evaluate({n: last(v.shape) for n, v in kernel.graph.inputs.items()},
                    out={n: last(s) for n, s in kernel.output_shapes.items() if n not in kernel.reduced})


def _emit(code, graph, math, lanes):
    """(Emitter, body lines) of `code` (graph's optimized or scalarized form): a lanes kernel
    (codegen/vector.py) if `lanes` and its body keeps nothing in the workspace of its own."""
    em = Emitter(code, list(graph.inputs), list(graph.params), list(graph.outputs), math, lanes)
    body = em.emit()
    if lanes and em.ws.size:
        return _emit(code, graph, math, False)
    return em, body


def _results(model, derivatives, mode, values):
    """The model's graph with the requested values and derivatives as its outputs (dead code
    removed), and the compiled Derivatives."""
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
        req = as_request(req, mode)
        if req.of not in base.outputs:
            raise SpecError(f"'{req.of}' is not an output of model '{model.name}'")
        for w in req.wrt:
            if w not in names:
                raise SpecError(f"'{w}' is not an input or param of model '{model.name}'")
        seed = None
        if req.vector is not None:      # direction / cotangent: one more per-point input
            shape = (names[req.wrt[0]] if req.kind == "jvp" else base.outputs[req.of]).shape
            seed = _product_input(b, model, req.vector, shape, req.loc)
        d, var = _derive(b, model, req, seed)
        derivs.append(d)
        outs[d.name] = var
    if model.species_guard is not None:     # an invalid species index: NaN results, counted as non-finite
        with b.active():
            outs = {n: b.emit("select", model.species_guard, v, np.nan) for n, v in outs.items()}
    b.graph.outputs = outs
    return dce(b.graph), derivs


def _where(loc):
    return (loc.path, loc.line, loc.col) if loc else ()


def _product_input(b, model, name, shape, loc):
    """The per-point input holding a jvp's direction or a vjp's cotangent."""
    g = b.graph
    if name in model.graph.inputs or name in model.graph.params:
        raise SpecError(f"'{name}' names an input or param of model '{model.name}'; a direction or cotangent "
                        f"is a separate dataset", *_where(loc))
    v = g.inputs.get(name)
    if v is None:
        v = g.inputs[name] = Var(shape)
    elif v.shape != shape:
        raise SpecError(f"'{name}' is used with shapes {v.shape} and {shape}", *_where(loc))
    return v


def _derive(b, model, req, seed=None):
    """(Derivative, its Var) for one request, appended to the builder's graph."""
    env = {**b.graph.inputs, **b.graph.params}
    of_var, first = model.graph.outputs[req.of], env[req.wrt[0]]
    if req.kind == "jvp":               # products never build the Jacobian: one sweep, seeded
        var = jacobian_forward(b, model.custom, first, of_var, seed=seed)
        var = var if var is not None else b.const(0.0, of_var.shape)
        return Derivative(req, "forward", select.Choice("forward", 0, 0, "a jvp is forward mode")), var
    if req.kind == "vjp":
        var = jacobian_reverse(b, model.custom, first, of_var, seed=seed)
        var = var if var is not None else b.const(0.0, first.shape)
        return Derivative(req, "reverse", select.Choice("reverse", 0, 0, "a vjp is reverse mode")), var
    name1 = derivative_name(req.of, req.wrt[:1])
    choice = select.choose(b.graph, model.custom, of_var, first, req.mode, name1 in model.manual)
    if choice.mode == "manual":
        if name1 not in model.manual:
            raise SpecError(f"mode manual: model '{model.name}' ({model.spec.path}) has no hand-written "
                            f"derivative '{name1}' under derivatives:",
                            *(_where(req.loc) or (model.spec.path, None, None)))
        var = model.manual[name1]
    else:
        jacobian = jacobian_forward if choice.mode == "forward" else jacobian_reverse
        var = jacobian(b, model.custom, first, of_var)
    if var is None:
        var = b.const(0.0, of_var.shape + first.shape)
    if len(req.wrt) == 2:               # forward mode over the first derivative
        second = env[req.wrt[1]]
        var2 = jacobian_forward(b, model.custom, second, var)
        var = var2 if var2 is not None else b.const(0.0, var.shape + second.shape)
        choice = select.Choice(choice.mode, choice.forward_cost, choice.reverse_cost,
                               f"{choice.mode} for the first derivative, then forward over it")
    return Derivative(req, choice.mode, choice), var
