"""What a compiled kernel looks like from C: its arrays in the point function's order, with their
shapes, sizes, the params' offsets in one params array and their values, and what each result is.

Pure Python (no numba): the header, the C wrapper and the numba wrappers are all written from it."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..version import __version__

ABI_VERSION = 1
C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Array:
    """One argument of the point function: an input, a param or a result (a value or a derivative)."""
    name: str           # the model's name: x, alpha, E, dE_dx
    arg: str            # the point function's argument: in_x, p_alpha, out_E
    kind: str           # input | param | value | derivative
    shape: tuple
    of: str = ""        # a derivative: the output it differentiates
    wrt: str = ""       # a derivative: "F", or "F,F" for a second one
    variant: str = ""   # a derivative: "" (whole), "sum" (rows the run sums), "jvp" or "vjp"
    offset: int = 0     # a param: its first value in the params array

    @property
    def size(self):
        """Floats per point (a param: in all); a scalar is one."""
        return max(1, int(np.prod(self.shape, dtype=np.int64)))


@dataclass(frozen=True)
class Layout:
    name: str           # the C prefix of every symbol and the library's name (lib<name>.so)
    model: str          # the model's name
    inputs: tuple
    params: tuple
    outputs: tuple
    defaults: np.ndarray    # the params array as exported (the model's values, a config's overrides)
    workspace_size: int     # doubles of scratch per call of the point function (at least 1)
    model_sha256: str
    kernel_sha256: str
    version: str = __version__
    abi_version: int = ABI_VERSION

    @property
    def arrays(self):
        """Every argument of the point function but the workspace, in its order."""
        return self.inputs + self.params + self.outputs

    @property
    def per_point(self):
        """The arrays indexed by point: inputs, then results."""
        return self.inputs + self.outputs

    @property
    def n_param_values(self):
        return sum(p.size for p in self.params)


def c_name(name, what="--name"):
    """`name` if it is a C identifier, else a SpecError naming `what`."""
    if not C_NAME.match(name or ""):
        raise SpecError(f"{what} {name!r}: the library's name must be a C identifier (letters, digits and _, "
                        f"not starting with a digit)")
    return name


def default_name(model_name):
    """The model's name made a C identifier (the default library name)."""
    name = re.sub(r"\W", "_", model_name, flags=re.ASCII)
    return name if C_NAME.match(name) else f"m_{name}"


def layout(kernel, name=None) -> Layout:
    """The C view of a CompiledKernel (engine/kernel.py); `name` defaults to the model's."""
    graph = kernel.graph
    derivs = {d.name: d for d in kernel.derivatives}
    inputs = tuple(Array(n, f"in_{n}", "input", v.shape) for n, v in graph.inputs.items())
    params, offset, values = [], 0, []
    for n, v in graph.params.items():
        params.append(Array(n, f"p_{n}", "param", v.shape, offset=offset))
        offset += params[-1].size
        values.append(np.asarray(kernel.model.param_values[n], dtype=np.float64).reshape(-1))
    outputs = []
    for n, v in graph.outputs.items():
        d = derivs.get(n)
        outputs.append(Array(n, f"out_{n}", "value", v.shape) if d is None else
                       Array(n, f"out_{n}", "derivative", v.shape, d.of, ",".join(d.wrt), d.kind or ""))
    for a in inputs + tuple(params) + tuple(outputs):
        if not C_NAME.match(a.name):
            raise SpecError(f"{a.kind} '{a.name}' of model '{kernel.model.name}': a native library names its arrays "
                            f"in C, which takes ASCII letters, digits and _ only; rename it", kernel.model.spec.path)
    expected = [a.arg for a in inputs + tuple(params) + tuple(outputs)] + ["work"]
    actual = list(kernel.point_kernel.py_func.__code__.co_varnames[:kernel.point_kernel.py_func.__code__.co_argcount])
    if actual != expected:          # the point function's order is the contract the wrappers rely on
        raise AssertionError(f"the point function takes {actual}, the export expected {expected}")
    text = kernel.model.spec.text or ""
    return Layout(c_name(name) if name is not None else default_name(kernel.model.name), kernel.model.name,
                  inputs, tuple(params), tuple(outputs),
                  np.concatenate(values) if values else np.zeros(0), max(1, kernel.workspace_size),
                  hashlib.sha256(text.encode()).hexdigest(), hashlib.sha256(kernel.source.encode()).hexdigest())
