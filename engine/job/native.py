"""`adgrad run CONFIG --native DIR`: the run's kernel is a library of `adgrad export`, taken only if it
is the kernel the config compiles to, so that the output file holds the numba kernel's bits.

The first run of a config with a library checks it in full: it compiles the config's kernel (numba,
from the compile cache) and compares the hash of its source with the library's kernel_sha256. What
the run needs of the model (the params array in the library's order, its hash for the output file,
the modes) is then kept in a record in the adgrad cache, keyed by everything that decides them: the
library file, the config's and the model's texts, the files their params read, adgrad's version and
its code. A later run with the same key reads the record and imports neither numba nor the compiler.

Also here: a numpy form of numeric/checksum.py's digest (the same values), for the input checksums
of a run that has no numba."""
from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from ..errors import DataError
from ..numeric.cachedir import cache_root
from ..store.guard import model_files
from ..version import __version__

RECORDS = "native-runs"         # under the adgrad cache: one JSON file per checked (library, config)


def is_native(kernel):
    """Whether `kernel` is an exported library (engine/export/native.py NativeKernel), not a CompiledKernel."""
    return getattr(kernel, "native", False)


def params_sha256(param_values: dict) -> str:
    """The output file's params_sha256: a hash of every param's name, shape and values."""
    h = hashlib.sha256()
    for name in sorted(param_values):
        value = np.ascontiguousarray(param_values[name], dtype=np.float64)
        h.update(f"{name}{value.shape}".encode() + value.tobytes())
    return h.hexdigest()


def prepare(config, kernel, compile_config):
    """Check that `kernel` (engine/export/native.py NativeKernel, whose check_results passed) is the
    kernel `config` compiles to, set its params to the config's and its modes; returns (params_sha256,
    whether the check compiled a kernel not in the compile cache). compile_config(): (the config's
    model, its compiled kernel), as job/run.py's run compiles them, called only if no record has the
    answer. Another kernel is a DataError that says how to export the right one."""
    path = os.path.join(cache_root(), RECORDS, _key(config, kernel) + ".json")
    record, cold = _read(path, kernel), False
    if record is None:
        record, cold = _check_kernel(config, kernel, *compile_config())
        _write(path, record)
    kernel.use_params(np.array(record["params"], dtype=np.float64))
    kernel.modes = dict(record["modes"])
    return record["params_sha256"], cold


def _again(config, kernel):
    return (f"export it again from this config: adgrad export {config.path} -o {os.path.dirname(kernel.library)} "
            f"--overwrite")


def check_results(config, kernel):
    """The library's model text and results are the config's (cheap: before the input is opened and
    the kernel's hash checked); else a DataError that says how to export the right one."""
    if kernel.model_sha256 != hashlib.sha256(config.model.text.encode()).hexdigest():
        raise DataError(f"{kernel.library}: exported from another model than {config.model.path or config.path} "
                        f"(model_sha256 differs); {_again(config, kernel)}")
    want = [*config.compute.values, *(d.name for d in config.compute.derivatives)]
    have = list(kernel.output_shapes)
    if have != want:
        raise DataError(f"{kernel.library}: computes {', '.join(have) or 'nothing'}, and {config.path} asks for "
                        f"{', '.join(want) or 'nothing'}; {_again(config, kernel)}")


def _check_kernel(config, kernel, model, compiled):
    """Compare the config's compiled kernel (numba; from the compile cache after a first run or the
    export) with the library's: the record of a library that is this kernel."""
    if hashlib.sha256(compiled.source.encode()).hexdigest() != kernel.kernel_sha256:
        raise DataError(f"{kernel.library}: is not the kernel {config.path} compiles to (another mode, engine.math, "
                        f"params' grids or adgrad version; kernel_sha256 differs); {_again(config, kernel)}")
    values = kernel.param_array()
    for a in kernel.info["params"]:
        v = np.ravel(np.asarray(model.param_values[a["name"]], dtype=np.float64))
        values[a["offset"]:a["offset"] + a["size"]] = v     # same kernel: same names and sizes
    record = {"kernel_sha256": kernel.kernel_sha256, "params": values.tolist(),
              "params_sha256": params_sha256(model.param_values), "modes": compiled.modes}
    return record, compiled.cold


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return [os.path.abspath(path), None]
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino]


def _code():
    """adgrad's engine code, as (file, size, mtime): an edited compiler may compile another kernel."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        out += [_stat(os.path.join(d, f))[1:3] + [os.path.relpath(os.path.join(d, f), root)]
                for f in sorted(files) if f.endswith(".py")]
    return out


def _key(config, kernel):
    parts = [__version__, _stat(kernel.library), kernel.kernel_sha256, config.text, config.model.text,
             [_stat(p) for p, _ in model_files(config.model, config.params)], _code()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _read(path, kernel):
    try:
        with open(path) as f:
            record = json.load(f)
        if record["kernel_sha256"] == kernel.kernel_sha256 and len(record["params"]) == kernel.info["n_param_values"]:
            return record
    except (OSError, ValueError, KeyError, TypeError):
        pass                    # no record (or a damaged one): check again
    return None


def _write(path, record):
    """Keep the record (atomically); a cache that cannot take it only means the next run checks again."""
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass


GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
BLOCK = 1 << 13                 # words per pass: the temporaries stay in the L2 cache


def digest(rows, first_row=0):
    """numeric/checksum.py's digest (the same value) by numpy: a run with a native library never loads
    numba for its input checksums. About a third of numba's speed."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    words = rows.reshape(-1).view(np.uint64)
    per_row = rows[0].size if rows.ndim > 1 and len(rows) else 1
    first, n, h = first_row * per_row, words.size, 0
    pos = np.arange(min(n, BLOCK), dtype=np.uint64)
    m, t = np.empty(len(pos), dtype=np.uint64), np.empty(len(pos), dtype=np.uint64)
    for a in range(0, n, BLOCK):
        k = min(BLOCK, n - a)
        mm, tt = m[:k], t[:k]
        np.add(pos[:k], np.uint64((first + a) % (1 << 64)), out=mm)     # arrays of uint64 wrap mod 2^64
        mm *= GOLDEN
        mm += words[a:a + k]
        for shift, mul in ((30, M1), (27, M2)):
            np.right_shift(mm, np.uint64(shift), out=tt)
            mm ^= tt
            mm *= mul
        np.right_shift(mm, np.uint64(31), out=tt)
        mm ^= tt
        h += int(mm.sum(dtype=np.uint64))
    return h % (1 << 64)
