"""Checks of the Python API's arguments, each at its boundary, before anything runs: a wrong name, shape,
dtype, length or a read-only array is a ValueError (a wrong kind of object a TypeError) that names the
argument and the problem, never a silently ignored key, a numba TypingError or a write past an array.

load_model's sizes= and input_shapes=, and CompiledKernel.evaluate's inputs, out, params, threads and
nonfinite go through here; the adapters (adgrad.felupe, adgrad.ase) call evaluate, so they are checked too.
An exported library's evaluate (engine/export/native.py) makes the same checks: nothing here imports numba.
"""
from __future__ import annotations

import math
import numbers
import operator
import sys

import numpy as np

from .limits import MAX_ELEMENTS


def _names(kind, noun, given, known, owner):
    """Every key of `given` (the argument `kind`) is in `known`, the owner's names of `noun`s."""
    if not isinstance(given, dict):
        raise TypeError(f"{kind} must be a dict of name -> value, got {type(given).__name__}")
    unknown = [n for n in given if n not in known]
    if unknown:
        raise ValueError(f"{kind}: {owner} has no {noun} {', '.join(repr(n) for n in unknown)} "
                         f"(its {noun}s: {', '.join(known) or 'none'})")


def size_value(where, value):
    """A size given to load_model(sizes=...): an int from 1 to MAX_ELEMENTS."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not 1 <= value <= MAX_ELEMENTS:
        raise ValueError(f"{where}: a size is an integer from 1 to {MAX_ELEMENTS:,}, got {value!r}")
    return int(value)


def sizes(given):
    """load_model's sizes=: {name: int}. Whether the model declares each name is checked as it is read."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise TypeError(f"sizes= must be a dict of size name -> int, got {type(given).__name__}")
    return {name: size_value(f"sizes={{{name!r}: ...}}", v) for name, v in given.items()}


def input_shapes(given):
    """load_model's input_shapes=: {name: shape}, a shape a sequence of ints from 1 to MAX_ELEMENTS."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise TypeError(f"input_shapes= must be a dict of input name -> shape, got {type(given).__name__}")
    out = {}
    for name, shape in given.items():
        where = f"input_shapes={{{name!r}: {shape!r}}}"
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"{where}: a shape is a sequence of integers") from None
        if any(d < 1 for d in dims) or math.prod(dims) > MAX_ELEMENTS:
            raise ValueError(f"{where}: every axis needs a length of at least 1, and a point at most "
                             f"{MAX_ELEMENTS:,} elements")
        out[name] = dims
    return out


def real_array(where, a):
    """a as a numpy array of real numbers (bool, int or float; not complex, strings or objects)."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{where} must hold real numbers, got dtype {arr.dtype}")
    return arr


def inputs(given, declared, owner):
    """evaluate's inputs: every declared input present, no other name, real numbers of shape (M, *shape),
    one M for all. Returns (M, {name: array}) (lists become arrays; arrays pass through, not copied)."""
    _names("inputs", "input", given, list(declared), owner)
    m, arrays = None, {}
    for name, v in declared.items():
        if name not in given:
            raise ValueError(f"missing input '{name}' of {owner} (shape (M, *{v.shape}))")
        a = real_array(f"input '{name}'", given[name])
        if a.shape[1:] != v.shape or a.ndim != v.rank + 1:
            raise ValueError(f"input '{name}' must have shape (M, *{v.shape}), got {a.shape}")
        if m is None:
            m = a.shape[0]
        elif a.shape[0] != m:
            raise ValueError(f"input '{name}' has {a.shape[0]} points, the others have {m}")
        arrays[name] = a
    return (0 if m is None else m), arrays


def params(given, graph_params, tables, owner):
    """evaluate's params: names of the model's array params (not its tables or potentials, whose grids are
    compiled in), each of the param's shape. Returns {name: float64 array}."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise TypeError(f"params must be a dict of name -> value, got {type(given).__name__}")
    out = {}
    for name, value in given.items():
        if name in tables:
            raise ValueError(f"param '{name}' of {owner} is a table or potential: its grid is compiled in; "
                             f"override it in a config (params:) or change the model")
        if name not in graph_params or "__" in name:
            known = [n for n in graph_params if "__" not in n]
            raise ValueError(f"params: {owner} has no param {name!r} (its params: {', '.join(known) or 'none'})")
        arr = real_array(f"param '{name}'", value).astype(np.float64)
        want = graph_params[name].shape
        if arr.shape != want:
            raise ValueError(f"param '{name}' has shape {arr.shape}, but the model's param has shape {want}")
        out[name] = arr
    return out


def outputs(given, shapes, reduced, m, owner):
    """evaluate's out: names of results, each a writable numpy array of real floats of shape (M, *shape)
    (or, for a summed result, (*shape) or an ExactSum of that shape). Memory overlap is checked later."""
    if given is None:
        return {}
    _names("out", "result", given, list(shapes), owner)
    for name, a in given.items():
        shape = shapes[name]
        if name in reduced and is_exact_sum(a):
            if a.shape != shape:
                raise ValueError(f"out['{name}'] is an ExactSum of shape {a.shape}, the result has shape {shape}")
            continue
        if not isinstance(a, np.ndarray):
            raise TypeError(f"out['{name}'] must be a numpy array, got {type(a).__name__}")
        if a.dtype.kind != "f":
            raise TypeError(f"out['{name}'] must have a float dtype, got {a.dtype}")
        if not a.flags.writeable:
            raise ValueError(f"out['{name}'] is read-only")
        full = (m,) + shape
        if a.shape != full and not (name in reduced and a.shape == shape):
            also = f" or {shape} (the sum)" if name in reduced else ""
            raise ValueError(f"out['{name}'] must have shape {full}{also}, got {a.shape}")
    return given


def nonfinite(flags, m):
    """evaluate's nonfinite=: None or a writable C-contiguous bool array of shape (M,), which the kernel
    writes one flag per point into (a shorter one would be written past its end)."""
    if flags is None:
        return None
    if not isinstance(flags, np.ndarray) or flags.dtype != np.bool_:
        what = flags.dtype if isinstance(flags, np.ndarray) else type(flags).__name__
        raise TypeError(f"nonfinite must be a numpy bool array of shape ({m},), got {what}")
    if flags.shape != (m,):
        raise ValueError(f"nonfinite must have shape ({m},) (one flag per point), got {flags.shape}")
    if not flags.flags.writeable or not flags.flags.c_contiguous:
        raise ValueError("nonfinite must be a writable, C-contiguous array")
    return flags


def threads(n, most=None):
    """evaluate's threads=: None (numba's setting) or an int from 1 to `most`, numba's thread count."""
    if n is None:
        return None
    if most is None:
        import numba
        most = numba.config.NUMBA_NUM_THREADS
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or not 1 <= n <= most:
        raise ValueError(f"threads must be None or an integer from 1 to {most} (numba's NUMBA_NUM_THREADS), "
                         f"got {n!r}")
    return int(n)


def no_overlap(inputs, out):
    """Raise if an out array shares memory with an input or another out array: the kernels store each
    result as soon as it is computed, so a later read of an input it overlaps would see the result."""
    arrays = [(f"out['{n}']", a) for n, a in out.items() if isinstance(a, np.ndarray)]
    others = arrays + [(f"input '{n}'", a) for n, a in inputs.items() if isinstance(a, np.ndarray)]
    for k, (name, a) in enumerate(arrays):
        for other, b in others[k + 1:]:
            if np.shares_memory(a, b):      # exact: disjoint views of one buffer are fine
                raise ValueError(f"{name} shares memory with {other}: give each output its own array")


def layout(a, m, size, output=False):
    """(point stride, entry stride) in elements of a float64 array `a` (m, *shape) with `size` entries per
    point whose entries of a point are equally spaced (any such view: np.moveaxis(b, -1, 0) of b
    (*shape, m), a slice), which the strided drivers read and write in place; None for other layouts,
    negative or unaligned strides, and (output) read-only arrays or arrays in which two entries share
    memory."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float64 or any(s < 0 or s % 8 for s in a.strides) \
            or (output and not a.flags.writeable):
        return None
    sk = expect = None
    for n, st in zip(reversed(a.shape[1:]), reversed(a.strides[1:])):
        if n == 1:
            continue
        if sk is None:
            sk, expect = st // 8, st * n
        elif st != expect:
            return None
        else:
            expect = st * n
    sk = 1 if sk is None else sk
    si = a.strides[0] // 8 if m > 1 else 0
    if output and m > 1 and (si == 0 or size > 1 and not (sk >= (m - 1) * si + 1 or si >= (size - 1) * sk + 1)):
        return None
    return si, sk


def is_exact_sum(a):
    """Whether `a` is an ExactSum, without importing numba for the question (one exists only if its
    module was imported)."""
    mod = sys.modules.get("adgrad.engine.numeric.exactsum")
    return mod is not None and isinstance(a, mod.ExactSum)


def result_targets(m, out, shapes, reduced):
    """(results to return, float64 rows the kernel fills, steps that finish the results) of an evaluate
    of m points with `out` (checked by outputs): an out array the kernel can write in place (layout) is
    filled directly, another layout or dtype computed in float64 and copied, and a summed result's
    per-point rows summed exactly into it."""
    results, targets, finish = {}, {}, []
    for name, shape in shapes.items():
        full, dst = (m,) + shape, out.get(name)
        if name in reduced and (dst is None or is_exact_sum(dst) or dst.shape == shape):
            rows = targets[name] = np.empty(full)          # per-point rows, summed exactly below
            results[name] = np.empty(shape) if dst is None else dst
            finish.append(lambda dst=results[name], rows=rows: _sum_into(dst, rows))
            continue
        if dst is None:
            dst = np.empty(full)
        results[name] = dst
        if layout(dst, m, max(1, math.prod(shape)), output=True) is not None:
            targets[name] = dst
        else:                       # compute in float64, then cast/copy into the caller's array
            rows = targets[name] = np.empty(full)
            finish.append(lambda dst=dst, rows=rows: dst.__setitem__(Ellipsis, rows))
    return results, targets, finish


def _sum_into(dst, rows):
    from .numeric.exactsum import ExactSum     # numba: only for a summed result
    if isinstance(dst, ExactSum):       # the caller accumulates across calls (chunks, shards)
        dst.add(rows)
    else:                               # exact, so the same bits whatever the order or thread count
        acc = ExactSum(dst.shape)
        acc.add(rows)
        dst[...] = acc.value()
