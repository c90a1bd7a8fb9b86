"""An exported library called from Python through ctypes, without numba: its metadata, and a raw
`evaluate` over numpy arrays, with no argument checks (the C ABI's tests and benchmarks/native.py).
The API's kernel on top of it, checked as a compiled kernel is, is native.py's load_library."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from .. import arguments

D, I64 = ctypes.POINTER(ctypes.c_double), ctypes.c_int64


class _Array(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_char_p), ("of", ctypes.c_char_p),
                ("wrt", ctypes.c_char_p), ("variant", ctypes.c_char_p), ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(I64)), ("size", I64), ("offset", I64)]


class _Info(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_int32), *((f, ctypes.c_char_p) for f in
                ("name", "model", "adgrad_version", "model_sha256", "kernel_sha256", "cpu")),
                ("n_inputs", ctypes.c_int32), ("n_params", ctypes.c_int32), ("n_outputs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(_Array)), ("params", ctypes.POINTER(_Array)),
                ("outputs", ctypes.POINTER(_Array)), ("n_param_values", I64), ("param_defaults", D),
                ("workspace_size", I64)]


def _arrays(ptr, n):
    return [{"name": a.name.decode(), "kind": a.kind.decode(), "of": a.of.decode(), "wrt": a.wrt.decode(),
             "variant": a.variant.decode(), "shape": tuple(a.shape[k] for k in range(a.rank)), "size": a.size,
             "offset": a.offset} for a in (ptr[k] for k in range(n))]


class NativeModel:
    """lib<name>.so of `adgrad export`: `info` (its adgrad_model_info as a dict), `evaluate`."""

    def __init__(self, path):
        path = os.path.abspath(os.fspath(path))
        name = os.path.basename(path)[3:-3]         # lib<name>.so
        self.lib = lib = ctypes.CDLL(path)
        self.name = name
        fn = {f: getattr(lib, f"{name}_{f}") for f in ("info", "new", "free", "set_params", "batch", "point",
                                                        "workspace_size", "batch_workspace_size", "error_string")}
        fn["info"].restype = ctypes.POINTER(_Info)
        fn["new"].restype = ctypes.c_void_p
        fn["free"].argtypes = [ctypes.c_void_p]
        fn["set_params"].argtypes = [ctypes.c_void_p, D, I64]
        fn["batch"].argtypes = [ctypes.c_void_p, I64, ctypes.POINTER(D), ctypes.POINTER(I64), ctypes.POINTER(D),
                                ctypes.POINTER(I64), ctypes.c_int32, D, I64, ctypes.POINTER(ctypes.c_ubyte)]
        fn["point"].argtypes = [ctypes.c_void_p, ctypes.POINTER(D), ctypes.POINTER(D), D]
        fn["batch_workspace_size"].argtypes = [ctypes.c_int32]
        fn["batch_workspace_size"].restype = I64
        fn["workspace_size"].restype = I64
        fn["error_string"].restype = ctypes.c_char_p
        self.fn = fn
        info = fn["info"]().contents
        self.info = {"abi_version": info.abi_version, **{f: getattr(info, f).decode() for f in (
            "name", "model", "adgrad_version", "model_sha256", "kernel_sha256", "cpu")},
            "inputs": _arrays(info.inputs, info.n_inputs), "params": _arrays(info.params, info.n_params),
            "outputs": _arrays(info.outputs, info.n_outputs), "n_param_values": info.n_param_values,
            "param_defaults": np.ctypeslib.as_array(info.param_defaults, (max(1, info.n_param_values),))
            [:info.n_param_values].copy(), "workspace_size": info.workspace_size}
        self.ctx = fn["new"]()
        if not self.ctx:
            raise MemoryError("out of memory")

    def __del__(self):
        if getattr(self, "ctx", None):
            self.fn["free"](self.ctx)
            self.ctx = None

    def check(self, code):
        if code:
            raise RuntimeError(f"{self.name}: {self.fn['error_string'](code).decode()} (error {code})")

    def set_params(self, params: dict | None = None):
        """The params array: the defaults with `params` ({name: value}) over them."""
        values = self.info["param_defaults"].copy()
        for p in self.info["params"]:
            if params and p["name"] in params:
                values[p["offset"]:p["offset"] + p["size"]] = np.asarray(params[p["name"]], dtype=np.float64).ravel()
        self.check(self.fn["set_params"](self.ctx, values.ctypes.data_as(D), len(values)))

    def evaluate(self, inputs: dict, params=None, threads=1, out=None, nonfinite=None):
        """{output: array (M, *shape)} at every point of `inputs` ({name: array (M, *shape)}, any layout
        whose entries of a point are equally spaced is read in place); `out` as kernel.evaluate's
        (float64 arrays in any such layout); nonfinite: an optional uint8 array (M,)."""
        self.set_params(params)
        ins = [np.asarray(inputs[a["name"]], dtype=np.float64) for a in self.info["inputs"]]
        m = len(ins[0]) if ins else len(next(iter((out or {}).values())))
        ins = [a if _strides(a) else np.ascontiguousarray(a) for a in ins]
        outs = [(out or {}).get(a["name"]) for a in self.info["outputs"]]
        outs = [np.empty((m, *a["shape"])) if o is None else o for o, a in zip(outs, self.info["outputs"])]
        strides = [_strides(a) for a in ins + outs]
        if any(s is None for s in strides[len(ins):]):
            raise ValueError("an out array's entries of a point must be equally spaced float64")
        st = (I64 * (2 * len(strides)))(*[v for s in strides for v in s])
        in_ptrs = (D * max(1, len(ins)))(*[a.ctypes.data_as(D) for a in ins])
        out_ptrs = (D * len(outs))(*[a.ctypes.data_as(D) for a in outs])
        flags = None if nonfinite is None else nonfinite.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        self.check(self.fn["batch"](self.ctx, m, in_ptrs, st, out_ptrs, ctypes.cast(ctypes.byref(st, 8 * 2 * len(ins)),
                                                                                     ctypes.POINTER(I64)),
                                    threads, None, 0, flags))
        return {a["name"]: o for a, o in zip(self.info["outputs"], outs)}


def _strides(a):
    """(point stride, entry stride) in doubles of a float64 array (m, *shape) whose entries of a point are
    equally spaced (arguments.layout), else None."""
    return arguments.layout(a, a.shape[0], 1)
