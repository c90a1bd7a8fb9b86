"""The canonical text form of the IR, used by `adgrad explain` and golden tests."""
from __future__ import annotations


def shape_str(v):
    t = "bool" if v.dtype == "bool" else "f64"
    return f"{t}[{','.join(map(str, v.shape))}]"


def format_attrs(e):
    parts = []
    for k, v in e.attrs:
        if k == "data":
            v = f"<{len(v)} values>" if len(v) > 8 else "[" + ", ".join(f"{x:g}" for x in v) + "]"
        elif k == "index":
            v = "[" + ", ".join(":".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in v) + "]"
        elif k == "value":
            v = repr(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def format_eqn(e, names):
    args = ", ".join(names.get(a, f"%{a.id}") for a in e.args)
    attrs = format_attrs(e)
    inside = ", ".join(x for x in (args, attrs) if x)
    return f"{names.get(e.out, f'%{e.out.id}')}: {shape_str(e.out)} = {e.op}({inside})"


def canonical_names(graph):
    """Stable names: inputs and params by name, equations %0, %1, ... in order."""
    names = {v: n for n, v in graph.inputs.items()}
    names.update({v: n for n, v in graph.params.items()})
    for i, e in enumerate(graph.eqns):
        names[e.out] = f"%{i}"
    return names


def format_graph(graph):
    names = canonical_names(graph)
    lines = [f"input {n}: {shape_str(v)}" for n, v in graph.inputs.items()]
    lines += [f"param {n}: {shape_str(v)}" for n, v in graph.params.items()]
    lines += [format_eqn(e, names) for e in graph.eqns]
    lines += [f"output {n} = {names.get(v, '?')}" for n, v in graph.outputs.items()]
    return "\n".join(lines)
