"""adgrad as a felupe material: any adgrad model of a strain energy W(F), or of a stress P(F), usable
wherever felupe takes a constitutive material (SolidBody, SolidBodyNearlyIncompressible's umat, `&`).

    import felupe as fem
    from adgrad.felupe import Material
    umat = Material("configs/models/ogden.yaml")               # W(F): P = dW/dF, A = d2W/dF2
    umat = Material("my_law.yaml", stress="P", bulk=5000.0)    # P(F): A = dP/dF; a param's value
    solid = fem.SolidBody(umat, field)

felupe hands a material x = [F, statevars] with F (3, 3, q, c) (quadrature points and cells as
trailing axes) and expects gradient(x) -> [P, statevars_new] and hessian(x) -> [A], P (3, 3, q, c)
and A (3, 3, 3, 3, q, c). The compiled kernels read F and write P and A in that layout directly (the
kernel's strided driver, CompiledKernel.evaluate's `out`): no array of the whole size is copied, and
felupe's `out=` arrays (its results of the previous call) are written in place. They are compiled for
it (compile_model's points_last): the tangent, too, runs 32 points per vector pass, each entry's 32
points copied as one run between felupe's array and the kernel's workspace.

Small strain: `Material(model, strain="small")` gives a model whose input is a small strain (eps) the
strain sym(F) - I, as felupe's small-strain framework does (MaterialStrain): the model is rewritten
with F as its input and `eps = (F + F.T)/2 - eye(3)` as its first `let`, so its stress sigma is P and
the tangent A = dsigma/dF = dsigma/deps : deps/dF is compiled by the chain rule, written in felupe's
layout like any other. An input named like a strain (eps, epsilon, strain, e, ...) given F is refused.

State variables: every input of the model other than F is a state variable, whose updated value is
the output named `<input>_new` (configs/models/j2_voce.yaml: eps_p, alpha -> eps_p_new, alpha_new).
felupe keeps them as one array (n, q, c), the inputs' entries one after another in model order; the
hessian is taken at the old state (x[-1]), as felupe's own materials do.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys

import numpy as np

try:
    import felupe
except ImportError as e:            # pragma: no cover - the optional extra is not installed
    raise ImportError("adgrad.felupe needs felupe: pip install 'adgrad[felupe]'") from e

from adgrad.engine import compile_model, load_model
from adgrad.engine.model import build
from adgrad.engine.spec import Expr, InputDecl

__all__ = ["Material"]

STRAINS = (None, "small")
# an input named so holds a strain, not the deformation gradient felupe gives (eps, eps_total, epsilon,
# e, E: Green-Lagrange's, strain, total_strain, ...)
STRAIN_NAME = re.compile(r"(?i)(e|eps|epsilon|\u03b5)(_\w*|\d*)|\w*strain\w*")


def stderr(line):
    """The default log: the line on stderr, now."""
    print(line, file=sys.stderr, flush=True)


def trailing(a, shape):
    """A view (M, *shape) of `a` (*shape, q, c) with its points first (M = q c), the same memory when
    the point axes of `a` merge into one (felupe's arrays are C-contiguous), else a copy."""
    a = np.asarray(a)
    m = int(np.prod(a.shape[len(shape):], dtype=np.int64))
    return np.moveaxis(a.reshape(*shape, m), -1, 0)


class Material(felupe.ConstitutiveMaterial):
    """A felupe constitutive material computed by adgrad kernels.

    model: a model file (path) or a LoadedModel (adgrad.engine.load_model).
    energy / stress: the output that is W (a scalar: P = dW/dF, A = d2W/dF2) or P (a 3x3 output:
    A = dP/dF). Default: the model's only scalar output, else its only 3x3 output.
    F: the input felupe's deformation gradient goes to (default: "F", else the model's only 3x3 input
    that is not a state variable).
    strain: None (the input is F itself) or "small": the input is the small strain sym(F) - I, the
    model's stress output (or its energy's gradient) is P and its derivative wrt the strain, mapped by
    the chain rule, is A (felupe's small-strain framework, as in LinearElasticPlasticIsotropicHardening).
    An input named like a strain is refused without strain="small", one named F with it.
    params: param values (also as keyword arguments); change `material.params` between calls, no
    recompile. threads: numba threads of each call (None: numba's setting). mode, math: as
    compile_model's.
    log: called with one line of text before a kernel that is not in adgrad's compile cache is
    compiled, and with its time after; default: printed on stderr; None: silent; e.g.
    logging.getLogger("adgrad").info.
    """

    def __init__(self, model, *, energy=None, stress=None, F=None, strain=None, params=None, threads=None,
                 mode="auto", math="vector", log=stderr, **param_values):
        if log is not None and not callable(log):
            raise ValueError(f"log={log!r}: give a function of one line of text, or None for silence")
        if strain not in STRAINS:
            raise ValueError(f"strain={strain!r}: give None (the input is the deformation gradient F) or 'small' "
                             f"(the input is the small strain sym(F) - I)")
        self.log, self.strain = log, strain
        if isinstance(model, (str, os.PathLike)):
            model = load_model(model)
        self.params = {**(params or {}), **param_values}
        unknown = set(self.params) - set(model.graph.params)
        if unknown:
            raise ValueError(f"model '{model.name}' has no param {sorted(unknown)}")
        inputs, outputs = model.graph.inputs, model.graph.outputs
        if F is not None and F not in inputs:
            raise ValueError(f"F='{F}': model '{model.name}' has no input '{F}' (its inputs: {', '.join(inputs)})")
        driven = [n for n, v in inputs.items() if v.shape == (3, 3) and f"{n}_new" not in outputs]
        F = F or ("F" if "F" in inputs else _only(driven, "input that is not a state variable", model))
        if inputs[F].shape != (3, 3):
            raise ValueError(f"input '{F}' of model '{model.name}' has shape {inputs[F].shape}, not (3, 3)")
        if strain is None and STRAIN_NAME.fullmatch(F):
            raise ValueError(f"input '{F}' of model '{model.name}' is named like a strain, but felupe gives the "
                             f"deformation gradient F: Material(..., strain='small') gives it sym(F) - I")
        if strain == "small":
            if F == "F":
                raise ValueError(f"strain='small' gives input 'F' of model '{model.name}' the small strain "
                                 f"sym(F) - I, but it is named like the deformation gradient; leave strain=None")
            model, F = small_strain(model, F)
            inputs, outputs = model.graph.inputs, model.graph.outputs
        self.model, self.threads, self.F = model, threads, F
        if energy is None and stress is None:        # among the outputs that are not new states
            results = {n: v.shape for n, v in outputs.items() if n[:-4] not in inputs or not n.endswith("_new")}
            scalars = [n for n, shape in results.items() if shape == ()]
            energy = scalars[0] if len(scalars) == 1 else None
            stress = None if energy else _only([n for n, shape in results.items() if shape == (3, 3)],
                                               "output that is not a new state", model)
        self.energy, self.stress = energy, stress
        self.state = [n for n in inputs if n != self.F]
        for n in self.state:
            if f"{n}_new" not in outputs or outputs[f"{n}_new"].shape != inputs[n].shape:
                raise ValueError(f"state variable '{n}' of model '{model.name}' needs an output '{n}_new' "
                                 f"of shape {inputs[n].shape}")
        self.sizes = [max(1, inputs[n].size) for n in self.state]
        new = [f"{n}_new" for n in self.state]
        gradient, hessian = self._logged("the stress P for gradient()"), self._logged("the tangent A for hessian()")
        # felupe's arrays have the points last: the kernels are compiled for the strided driver
        common = dict(mode=mode, math=math, points_last=True)
        if energy:
            grad = compile_model(model, [(energy, self.F)], values=new, log=gradient, **common)
            hess = compile_model(model, [(energy, [self.F, self.F])], values=[], log=hessian, **common)
            self.P = grad.derivatives[0].name
        else:
            grad = compile_model(model, [], values=[stress, *new], log=gradient, **common)
            hess = compile_model(model, [(stress, self.F)], values=[], log=hessian, **common)
            self.P = stress
        self.A = hess.derivatives[0].name
        self.kernels = {"gradient": grad, "hessian": hess}
        self._function = None
        self.x = [np.eye(3), np.zeros(sum(self.sizes))]
        self.parallel = False           # felupe's chunked evaluation is not used: the kernels are parallel

    def _logged(self, what):
        """compile_model's log for the kernel of `what`: the material's log, each line saying which kernel."""
        return None if self.log is None else (lambda line: self.log(f"adgrad: {line}: {what}"))

    def _inputs(self, x):
        """adgrad's inputs of felupe's x = [F, ..., statevars]: views with the points first."""
        F, statevars = x[0], x[-1]
        inputs = {self.F: trailing(F, (3, 3))}
        rows = np.asarray(statevars).reshape(len(statevars), -1) if self.state else None
        offset = 0
        for n, size in zip(self.state, self.sizes):
            shape = self.model.graph.inputs[n].shape
            inputs[n] = np.moveaxis(rows[offset:offset + size].reshape(*shape, -1), -1, 0)
            offset += size
        return F, statevars, inputs

    def _evaluate(self, which, inputs, out):
        self.kernels[which].evaluate(inputs, out=out, params=self.params, threads=self.threads)

    def gradient(self, x, out=None, **kwargs):
        """[P (3, 3, q, c), statevars_new (n, q, c)] at x = [F, statevars]; P is written into `out`
        when it is a float64 array of that shape (felupe passes its previous result)."""
        F, statevars, inputs = self._inputs(x)
        P = out if _usable(out, F.shape) else np.empty(F.shape)
        outs = {self.P: trailing(P, (3, 3))}
        if self.state:
            new = np.empty(statevars.shape)
            rows, offset = new.reshape(len(new), -1), 0
            for n, size in zip(self.state, self.sizes):
                shape = self.model.graph.inputs[n].shape
                outs[f"{n}_new"] = np.moveaxis(rows[offset:offset + size].reshape(*shape, -1), -1, 0)
                offset += size
        else:
            new = statevars
        self._evaluate("gradient", inputs, outs)
        return [P, new]

    def hessian(self, x, out=None, **kwargs):
        """[A (3, 3, 3, 3, q, c)] at x = [F, statevars], written into `out` when it is a float64
        array of that shape."""
        F, _, inputs = self._inputs(x)
        shape = (3, 3, 3, 3, *F.shape[2:])
        A = out if _usable(out, shape) else np.empty(shape)
        self._evaluate("hessian", inputs, {self.A: trailing(A, (3, 3, 3, 3))})
        return [A]

    def function(self, x, **kwargs):
        """[W (q, c)] at x = [F, statevars] (a model of W only; compiled at the first call)."""
        if not self.energy:
            raise TypeError(f"model '{self.model.name}' is a stress model ({self.stress}): it has no energy")
        if self._function is None:
            self._function = compile_model(self.model, [], values=[self.energy], log=self._logged("W for function()"))
        F, _, inputs = self._inputs(x)
        W = np.empty(F.shape[2:])
        self._function.evaluate(inputs, out={self.energy: W.reshape(-1)}, params=self.params,
                                threads=self.threads)
        return [W]


def _usable(out, shape):
    return isinstance(out, np.ndarray) and out.shape == tuple(shape) and out.dtype == np.float64 \
        and out.flags.c_contiguous and out.flags.writeable


def _only(names, what, model):
    if len(names) != 1:
        raise ValueError(f"model '{model.name}' has {len(names)} {what}s of shape (3, 3)"
                         f"{' (' + ', '.join(names) + ')' if names else ''}; name the one to use")
    return names[0]


def small_strain_name(model):
    """The name of the F input small_strain gives `model`: F, unless the model uses that name."""
    spec = model.spec
    used = {*spec.inputs, *spec.params, *spec.functions, *spec.lets, *spec.outputs, *model.graph.params}
    return next(n for n in ("F", *(f"F_{i}" for i in range(len(used) + 1))) if n not in used)


def small_strain(model, strain):
    """(`model` with its input `strain` replaced by the deformation gradient F and the let
    `strain = (F + F.T)/2 - eye(3)` (felupe's small strain) before its own, the name of F): derivatives wrt
    F are then the chain rule's. Its params keep their current values; hand-written derivatives (wrt the
    strain) and the export section are dropped."""
    spec, F = model.spec, small_strain_name(model)
    decl = spec.inputs[strain]
    inputs = {(F if n == strain else n): (InputDecl(F, (3, 3), (-0.1, 0.1, "identity"), decl.loc) if n == strain
                                          else d) for n, d in spec.inputs.items()}
    let = Expr(f"({F} + {F}.T)/2 - eye(3)", decl.loc.path, decl.loc.line, decl.loc.col, f"inputs.{strain}")
    wrapped = build(dataclasses.replace(spec, inputs=inputs, lets={strain: let, **spec.lets}, derivatives={},
                                        export=None))
    wrapped.param_values = dict(model.param_values)
    return wrapped, F
