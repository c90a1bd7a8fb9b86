"""An exported library (`adgrad export`) as a kernel of the Python API, without numba.

load_library(path) returns a NativeKernel: `evaluate` takes and returns what CompiledKernel.evaluate
does, checked the same way, to the same bits (tests/test_native_start.py); `compute` is the lean call
`adgrad run --native DIR` makes per chunk. Importing this module loads numpy and ctypes, not numba,
llvmlite or the compiler: a process that evaluates an exported model starts in the time of Python and
numpy (docs/python-api.md, "A native library"). A summed result (reduce: sum) is summed by adgrad's
ExactSum, which imports numba at that first call."""
from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os

import numpy as np

from .. import arguments
from ..errors import DataError
from .loader import D, I64, NativeModel

MANIFEST = "adgrad-export.json"     # engine/export/build.py's (which imports the compiler)
ABI_VERSION = 1
SERIAL_BELOW = 1024                 # CompiledKernel's: calls on fewer points run on the calling thread
MAX_THREADS = 1024                  # the C ABI's limit


def default_threads():
    """The thread count of a call without threads=: numba's default (NUMBA_NUM_THREADS, else the CPUs
    this process may run on), read without importing numba."""
    try:
        n = int(os.environ.get("NUMBA_NUM_THREADS", ""))
    except ValueError:
        n = 0
    return n if n >= 1 else max(1, len(os.sched_getaffinity(0)))


def load_library(path) -> NativeKernel:
    """The library of an `adgrad export` directory (or its lib<name>.so) as a NativeKernel. A path that
    is not one, or a library of another ABI version, is a DataError naming it."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        manifest = os.path.join(path, MANIFEST)
        try:
            with open(manifest) as f:
                library = json.load(f)["library"]
        except FileNotFoundError:
            raise DataError(f"{path}: not an adgrad export (no {MANIFEST}); make one with "
                            f"`adgrad export MODEL_OR_CONFIG -o {path}`") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{manifest}: not readable as an export's manifest ({exc})") from None
        if not isinstance(library, str) or os.path.basename(library) != library:
            raise DataError(f"{manifest}: 'library' must name a file of the directory, got {library!r}")
        path = os.path.join(path, library)
    base = os.path.basename(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such export directory or library")
    if not (base.startswith("lib") and base.endswith(".so") and len(base) > 6):
        raise DataError(f"{path}: not a library of adgrad export (lib<NAME>.so) nor an export directory")
    try:
        lib = NativeModel(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot load the library ({exc})") from None
    except AttributeError as exc:
        raise DataError(f"{path}: not a library of adgrad export ({exc})") from None
    _check_fresh(lib, path)
    if lib.info["abi_version"] != ABI_VERSION:
        raise DataError(f"{path}: C ABI version {lib.info['abi_version']}, this adgrad reads version {ABI_VERSION}; "
                        f"export the model again")
    return NativeKernel(lib, path)


def _check_fresh(lib, path):
    """The dynamic loader gives a process the library it loaded first from a path, even after an
    export replaced the file: refuse that library when the export's manifest names another kernel."""
    try:
        with open(os.path.join(os.path.dirname(path), MANIFEST)) as f:
            exported = json.load(f).get("kernel_sha256")
    except (OSError, ValueError, AttributeError):
        return                  # a library without its manifest: nothing to compare
    if exported is not None and exported != lib.info["kernel_sha256"]:
        raise DataError(f"{path}: this process loaded this path's earlier library, and the dynamic loader keeps "
                        f"giving it that one; the export that replaced it is another kernel: load it in a new "
                        f"process")


class Var:
    """An array of the library as ir.core.Var describes one (what the job and callers read)."""
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)

    size = property(lambda self: math.prod(self.shape))
    rank = property(lambda self: len(self.shape))


class Arrays:
    """The library's arrays as a Graph names them: inputs, params, outputs (name -> Var)."""

    def __init__(self, info):
        self.inputs, self.params, self.outputs = ({a["name"]: Var(a["shape"]) for a in info[k]}
                                                  for k in ("inputs", "params", "outputs"))


class NativeKernel:
    """An exported library with the interface of a CompiledKernel (engine/kernel.py) but point_kernel:
    evaluate, compute, workspace, output_shapes, reduced, graph (.inputs/.params/.outputs with shapes),
    workspace_size, serial_below; and library, info (the C metadata as a dict), kernel_sha256,
    model_sha256, cpu, param_values (the defaults the library was exported with)."""

    def __init__(self, lib: NativeModel, path):
        info = lib.info
        self.lib, self.library, self.info = lib, path, info
        self.name = info["model"]
        self.graph = Arrays(info)
        self.output_shapes = {n: v.shape for n, v in self.graph.outputs.items()}
        self.reduced = frozenset(a["name"] for a in info["outputs"] if a["variant"] == "sum")
        self.workspace_size = info["workspace_size"]
        self.kernel_sha256, self.model_sha256, self.cpu = info["kernel_sha256"], info["model_sha256"], info["cpu"]
        self.param_values = {a["name"]: info["param_defaults"][a["offset"]:a["offset"] + a["size"]].reshape(a["shape"])
                             for a in info["params"]}
        self._tables = {p.split("__", 1)[0] for p in self.graph.params if "__" in p}    # a table's coefficients
        self.serial_below = SERIAL_BELOW
        self.native = True          # (the job's test: not a CompiledKernel)
        self.modes = {}             # not recorded in a library; `adgrad run --native` knows them (job/native.py)
        self.cold, self.compile_seconds = False, 0.0
        self._values = info["param_defaults"].copy()     # the params of calls without params=

    @property
    def max_threads(self):
        """The most threads a call takes: numba's thread count (default_threads)."""
        return default_threads()

    def __repr__(self):
        return f"NativeKernel({self.library!r}, model {self.name!r}, cpu {self.cpu!r})"

    def param_array(self, params: dict | None = None):
        """The library's params array (C ABI order): this kernel's values with `params` (name -> float64
        array of the param's shape, already checked) over them."""
        values = self._values.copy()
        for a in self.info["params"]:
            if params and a["name"] in params:
                values[a["offset"]:a["offset"] + a["size"]] = np.ravel(params[a["name"]])
        return values

    def use_params(self, values):
        """Make `values` (the whole params array, C ABI order) the params of calls without params=."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        if values.shape != self._values.shape:
            raise ValueError(f"{self.library}: a params array of {values.size} values, the library takes "
                             f"{self._values.size}")
        self._values = values.copy()

    @contextlib.contextmanager
    def _context(self, values):
        """A C context holding `values`: one per call, so concurrent calls with other params never share one."""
        fn = self.lib.fn
        ctx = fn["new"]()
        if not ctx:
            raise MemoryError(f"{self.library}: out of memory for a context")
        try:
            self.lib.check(fn["set_params"](ctx, values.ctypes.data_as(D), len(values)))
            yield ctx
        finally:
            fn["free"](ctx)

    def workspace(self, workers):
        """Scratch for calls on `workers` threads: the batch call's whole workspace, a row per thread."""
        workers = min(max(1, workers), MAX_THREADS)
        size = self.lib.fn["batch_workspace_size"](workers)
        return np.zeros((workers, max(1, -(-size // workers))))

    def compute(self, inputs: dict, outputs: dict, workspace, nonfinite=None, params=None):
        """CompiledKernel.compute: every row of `inputs` into `outputs` (float64, rows or any layout
        whose entries of a point are equally spaced, every result), on len(workspace) threads (one below
        serial_below points); nonfinite (bool (m,)) flags rows with a NaN or infinity. Nothing is checked."""
        names = list(self.graph.outputs)
        m = len(outputs[names[0]]) if names else 0
        threads = 1 if m < self.serial_below else len(workspace)
        self._batch(m, inputs, outputs, threads, workspace, nonfinite, self.param_array(params))

    def _batch(self, m, inputs, outputs, threads, workspace, nonfinite, values):
        ins = []
        for n, v in self.graph.inputs.items():
            a = inputs[n]
            lay = arguments.layout(a, m, max(1, v.size))
            if lay is None:
                a = np.ascontiguousarray(a, dtype=np.float64)
                lay = arguments.layout(a, m, max(1, v.size))
            ins.append((a, lay))
        outs = [(outputs[n], arguments.layout(outputs[n], m, max(1, v.size), output=True))
                for n, v in self.graph.outputs.items()]
        in_ptrs = (D * max(1, len(ins)))(*[a.ctypes.data_as(D) for a, _ in ins])
        out_ptrs = (D * max(1, len(outs)))(*[a.ctypes.data_as(D) for a, _ in outs])
        in_st = (I64 * max(2, 2 * len(ins)))(*[s for _, lay in ins for s in lay])
        out_st = (I64 * max(2, 2 * len(outs)))(*[s for _, lay in outs for s in lay])
        work, size = (None, 0) if workspace is None else (workspace.ctypes.data_as(D), workspace.size)
        flags = None if nonfinite is None else nonfinite.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        threads = min(threads, MAX_THREADS)
        with self._context(values) as ctx:      # the call releases the GIL (ctypes)
            self.lib.check(self.lib.fn["batch"](ctx, m, in_ptrs, in_st, out_ptrs, out_st, threads, work, size, flags))

    def evaluate(self, inputs: dict, out: dict | None = None, params: dict | None = None, threads=None,
                 nonfinite: np.ndarray | None = None):
        """CompiledKernel.evaluate, through the library: the same arguments, checks, results and bits.
        `threads`: threads of this call (default: numba's default count, NUMBA_NUM_THREADS or the CPUs),
        one below serial_below points."""
        owner = f"model '{self.name}'"
        m, inputs = arguments.inputs(inputs, self.graph.inputs, owner)
        out = arguments.outputs(out, self.output_shapes, self.reduced, m, owner)
        params = arguments.params(params, self.graph.params, self._tables, owner)
        most = default_threads()
        threads = arguments.threads(threads, most=most)
        nonfinite = arguments.nonfinite(nonfinite, m)
        arguments.no_overlap(inputs, out)
        results, targets, finish = arguments.result_targets(m, out, self.output_shapes, self.reduced)
        workers = 1 if m < self.serial_below else min(threads or most, max(m, 1))
        self._batch(m, inputs, targets, workers, None, nonfinite, self.param_array(params))
        for step in finish:
            step()
        return results
