"""A numpy interpreter of the IR, one point at a time: the oracle that compiled kernels are tested
against, and the evaluator of constant param expressions."""
from __future__ import annotations

import numpy as np

from .op import OPS


def interpret(graph, inputs: dict, params: dict, want=None) -> dict:
    """Evaluate `graph` at one point. `inputs`/`params` map names to arrays of the declared shapes.
    Returns {output name: array} for the outputs named in `want` (default: all)."""
    env = {}
    for name, v in graph.inputs.items():
        env[v] = np.asarray(inputs[name], dtype=float).reshape(v.shape)
    for name, v in graph.params.items():
        env[v] = np.asarray(params[name], dtype=float).reshape(v.shape)
    with np.errstate(all="ignore"):
        for e in graph.eqns:
            fn = OPS[e.op].numpy
            env[e.out] = np.asarray(fn(*[env[a] for a in e.args], **dict(e.attrs)))
    names = graph.outputs if want is None else want
    return {n: np.array(env[graph.outputs[n]], dtype=float) for n in names}
