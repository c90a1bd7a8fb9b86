"""`adgrad explain`: how adgrad compiles a model, as text: shapes, the mode per derivative and why,
the workspace, the IR after optimization and the generated kernel source."""
from __future__ import annotations

from collections import Counter

PARTS = ("shapes", "cost", "ir", "source")


def explain(model, config=None, parts=PARTS, mode=None, math=None, log=None) -> str:
    """The parts asked for, of what `config` (or, for a model file alone, every output's gradient
    with respect to every input) compiles to; `mode` and `math` override the config's (default auto
    and vector). `log`: compile_model's."""
    from ..compile import compile_model, default_requests       # here: the CLI reads PARTS without numba
    from ..ir.printer import format_graph, shape_str
    derivs = config.compute.derivatives if config else [(o, w) for o, (w,) in default_requests(model)]
    mode = mode or (config.mode if config else "auto")
    math = math or (config.engine.math if config else "vector")
    kernel = compile_model(model, derivs, mode=mode, values=list(config.compute.values) if config else None,
                           math=math, log=log)
    g, lines = model.graph, []
    if "shapes" in parts:
        lines.append(f"model {model.name}: {model.spec.path}")
        for kind, vs in (("input ", g.inputs), ("param ", g.params), ("output", g.outputs)):
            lines += [f"  {kind} {n}: {shape_str(v)}" for n, v in vs.items()]
        lines += _solves(model)
    if "cost" in parts:
        lines.append("derivatives:")
        for d in kernel.derivatives:
            c = d.choice
            lines.append(f"  {d.name}: {d.mode} ({c.reason}; estimated work forward {c.forward_cost}, "
                         f"reverse {c.reverse_cost})")
        lines.append(f"workspace: {kernel.workspace_size} floats per thread")
        lines += [f"  {v} is kept in {out}'s row until {out} overwrites it" for v, out in kernel.in_output_rows]
        lanes = ", run across points (a lanes kernel)" if kernel.lanes else ""
        lines.append("kernel: " + (f"straight-line scalar code (small tensors scalarized){lanes}" if kernel.scalarized
                                   else "loop nests over the tensor axes"))
        lines += _math(kernel)
    if "ir" in parts:
        lines += ["", "# IR (values and derivatives, after optimization)", format_graph(kernel.graph)]
    if "source" in parts:
        lines += ["", "# generated kernel", kernel.source]
    return "\n".join(lines)


def _solves(model):
    """What each `solve:` let entry compiles to (engine/solve.py)."""
    from ..spec import SolveDecl
    out = []
    for name, d in model.spec.lets.items():
        if isinstance(d, SolveDecl):
            out.append(f"  solve   {name}: {d.residual.text} = 0 by Newton's method from "
                       f"{d.init.text if d.init else '0'}, {d.max_iter} iterations unrolled (converged iterates kept), "
                       f"tol {d.tol:g} x max(1, |r(init)|); derivatives by the implicit function theorem (two "
                       f"Newton steps with the Jacobian frozen at the solution), never through the iterations; "
                       f"NaN where it has not converged")
    return out


def _math(kernel):
    """Which elementary function calls are vectorized (engine/numeric/vecmath.py) and which stay libm
    calls, and why (the policy: engine/codegen/vector.py)."""
    head = f"math: {kernel.math} (engine.math)"
    if not kernel.math_calls:
        return [head + ": no elementary function calls"]
    lines = [head]
    for form, label in (("vector", "vectorized"), ("libm", "libm calls")):
        sites = Counter((f, why) for f, fm, why in kernel.math_calls if fm == form)
        for (f, why), n in sites.items():
            lines.append(f"  {label}: {f}{f' x{n}' if n > 1 else ''} ({why})")
    return lines
