"""A native library in Python (issue 26 item 5): `load_library(DIR)` and `adgrad run --native DIR`
compute kernel.evaluate's and a numba run's bits (random points with NaN and infinities, params,
threads, strided and float32 `out`, summed results), refuse what evaluate refuses with the same
errors; a process that loads a library imports no numba, and a run with one no compiler (read from
sys.modules in fresh processes; the start-up times are benchmarks/native.py's, not a test's)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import compile_model, load_library, load_model
from adgrad.engine.errors import DataError
from adgrad.engine.export import export
from adgrad.engine.job import native as job_native
from adgrad.engine.numeric.checksum import digest as numba_digest
from adgrad.engine.numeric.exactsum import ExactSum
from adgrad.engine.spec import DerivativeRequest

ROOT = Path(__file__).resolve().parents[1]
COMPILER = {"adgrad.engine.compile", "adgrad.engine.kernel", "adgrad.engine.codegen.load", "adgrad.engine.model"}

# name: (model file, derivatives); every kernel also exported, in the module's fixture
MODELS = {
    "eam": ("configs/eam_model.yaml", [("E", "x")]),
    "neo_hooke": ("configs/models/neo_hooke.yaml", [("W", "F"), ("W", ["F", "F"])]),
    "j2_sum": ("configs/models/j2_voce.yaml", [("sigma", "eps"), DerivativeRequest("sigma", ("K",), reduce="sum")]),
}


def same_bits(a, b):
    """The same bits but for a NaN's sign and payload: NaN at the same entries, every other entry equal
    bit for bit. (Which NaN an operation on a NaN and an infinity returns, the input's or the CPU's
    default -NaN, depends on the operand order each compiler chose: numpy does not fix it either.)"""
    a, b = (np.ascontiguousarray(v, dtype=np.float64) for v in (a, b))
    nan = np.isnan(a)
    return a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and \
        np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request, tmp_path_factory):
    """(compiled kernel, its library loaded by load_library, the export directory)."""
    path, derivs = MODELS[request.param]
    kernel = compile_model(load_model(ROOT / path), derivatives=derivs)
    out = tmp_path_factory.mktemp("native") / request.param
    export(kernel, out)
    return kernel, load_library(out), out


def random_points(kernel, m, seed=0):
    """Uniform points about each input's sample range (F about I), a few entries NaN or +-inf."""
    rng = np.random.default_rng(seed)
    pts = {}
    for n, v in kernel.graph.inputs.items():
        lo, hi, center = kernel.model.spec.inputs[n].sample or (0.0, 1.0, 0.0)
        x = rng.uniform(lo, hi, (m, *v.shape)) + (np.eye(3) if center == "identity" else center or 0.0)
        flat = x.reshape(m, -1)
        for value, k in ((np.nan, 3), (np.inf, 5), (-np.inf, 7)):
            flat[rng.integers(0, m, k), rng.integers(0, flat.shape[1], k)] = value
        pts[n] = x
    return pts


@pytest.mark.parametrize("m, threads", [(37, None), (3000, 1), (3000, 2)])
def test_evaluate_gives_the_kernels_bits_and_nonfinite_flags(pair, m, threads):
    kernel, lib, _ = pair
    x = random_points(kernel, m)
    flags_k, flags_l = np.zeros(m, dtype=bool), np.ones(m, dtype=bool)
    ref = kernel.evaluate(x, threads=threads, nonfinite=flags_k)
    got = lib.evaluate(x, threads=threads, nonfinite=flags_l)
    assert list(got) == list(ref)
    for n in ref:
        assert same_bits(got[n], ref[n]), n
    assert flags_k.any() and np.array_equal(flags_k, flags_l)


def test_params_for_one_call_give_the_kernels_bits(pair):
    kernel, lib, _ = pair
    x = random_points(kernel, 2000, seed=1)
    name = next(n for n in kernel.graph.params if "__" not in n)
    value = np.asarray(kernel.model.param_values[name]) * 1.25
    ref, got = kernel.evaluate(x, params={name: value}), lib.evaluate(x, params={name: value})
    for n in ref:
        assert same_bits(got[n], ref[n]), n
    default = lib.evaluate(x)                   # the call's params did not stay
    assert all(same_bits(default[n], kernel.evaluate(x)[n]) for n in ref)


def test_strided_inputs_and_every_kind_of_out_array(pair):
    """Inputs with the point axis last, reversed or broadcast; out arrays with the point axis last
    (written in place), float32 and overlapping ones (filled by a copy), an ExactSum for a sum."""
    kernel, lib, _ = pair
    m = 1500
    x = random_points(kernel, m, seed=2)
    layouts = {n: np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 0, -1)), -1, 0) for n, a in x.items()}
    first = next(iter(x))
    layouts[first] = x[first][::-1].copy()[::-1]                # negative point stride: read through a copy
    ref = kernel.evaluate(layouts)
    for dtype in (np.float64, np.float32):
        outs = {}
        for n, s in kernel.output_shapes.items():
            if n in kernel.reduced:
                outs[n] = ExactSum(s)
            else:
                outs[n] = np.moveaxis(np.zeros((*s, m), dtype=dtype), -1, 0)
        got = lib.evaluate(layouts, out=outs)
        assert all(got[n] is outs[n] for n in outs)
        for n in ref:
            if n in kernel.reduced:
                assert same_bits(got[n].value(), ref[n]), n
            else:
                assert same_bits(got[n], ref[n].astype(dtype)), (n, dtype)
    point = {n: np.broadcast_to(a[:1], a.shape) for n, a in x.items()}     # one point for every row
    ref, got = kernel.evaluate(point), lib.evaluate(point)
    assert all(same_bits(got[n], ref[n]) for n in ref)


@pytest.mark.parametrize("pair", ["j2_sum"], indirect=True)
def test_a_summed_result_is_the_exact_sum_as_evaluates(pair):
    kernel, lib, _ = pair
    x = random_points(kernel, 2500, seed=3)
    x = {n: np.where(np.isfinite(a), a, 0.0) for n, a in x.items()}
    name = next(iter(kernel.reduced))
    ref, got = kernel.evaluate(x), lib.evaluate(x)
    assert same_bits(got[name], ref[name]) and got[name].shape == kernel.output_shapes[name]
    rows = {name: np.empty((2500, *kernel.output_shapes[name]))}
    assert same_bits(lib.evaluate(x, out=rows)[name], kernel.evaluate(x, out={name: rows[name].copy()})[name])


def bad_calls(kernel):
    """(label, arguments of evaluate) that evaluate refuses."""
    x = random_points(kernel, 10)
    first, shape = next(iter(x)), next(iter(kernel.graph.inputs.values())).shape
    out_name = next(n for n in kernel.output_shapes if n not in kernel.reduced)
    param = next(n for n in kernel.graph.params if "__" not in n)
    return [
        ("unknown input", ({**x, "nope": x[first]},), {}),
        ("missing input", ({},), {}) if len(x) == 1 else ("missing input", ({k: x[k] for k in list(x)[1:]},), {}),
        ("wrong shape", ({**x, first: np.zeros((10, *shape, 2))},), {}),
        ("complex", ({**x, first: x[first].astype(complex)},), {}),
        ("not a dict", ([x[first]],), {}),
        ("points differ", ({**x, first: x[first][:5]},), {}) if len(x) > 1 else ("list", (x,), {"out": []}),
        ("unknown out", (x,), {"out": {"nope": np.zeros(10)}}),
        ("out shape", (x,), {"out": {out_name: np.zeros((9, *kernel.output_shapes[out_name]))}}),
        ("out int", (x,), {"out": {out_name: np.zeros((10, *kernel.output_shapes[out_name]), dtype=int)}}),
        ("out list", (x,), {"out": {out_name: [0.0]}}),
        ("out read-only", (x,), {"out": {out_name: np.broadcast_to(0.0, (10, *kernel.output_shapes[out_name]))}}),
        ("unknown param", (x,), {"params": {"nope": 1.0}}),
        ("param shape", (x,), {"params": {param: np.zeros((7, 7))}}),
        ("params list", (x,), {"params": [1.0]}),
        ("threads 0", (x,), {"threads": 0}),
        ("threads many", (x,), {"threads": 10 ** 6}),
        ("threads bool", (x,), {"threads": True}),
        ("flags int", (x,), {"nonfinite": np.zeros(10, dtype=int)}),
        ("flags short", (x,), {"nonfinite": np.zeros(9, dtype=bool)}),
        ("flags strided", (x,), {"nonfinite": np.zeros(20, dtype=bool)[::2]}),
    ]


def test_bad_arguments_are_refused_as_evaluate_refuses_them(pair):
    kernel, lib, _ = pair
    for label, args, kwargs in bad_calls(kernel):
        errors = []
        for k in (kernel, lib):
            with pytest.raises((TypeError, ValueError)) as info:
                k.evaluate(*args, **kwargs)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1], label


def test_an_out_array_over_an_input_is_refused(pair):
    kernel, lib, _ = pair
    m = 10
    x = random_points(kernel, m)
    out_name, shape = next((n, s) for n, s in kernel.output_shapes.items() if n not in kernel.reduced)
    buf = np.zeros((m, max(1, int(np.prod(shape))) + x[next(iter(x))][0].size))
    first = next(iter(x))
    x[first] = buf[:, :x[first][0].size].reshape(x[first].shape)
    for k in (kernel, lib):
        with pytest.raises(ValueError, match="shares memory with input"):
            k.evaluate(x, out={out_name: buf[:, :max(1, int(np.prod(shape)))].reshape((m, *shape))})


def test_load_library_refuses_what_is_not_an_export(tmp_path, pair):
    _, lib, out = pair
    with pytest.raises(DataError, match="not an adgrad export"):
        load_library(tmp_path)
    with pytest.raises(DataError, match="no such export directory or library"):
        load_library(tmp_path / "missing")
    (tmp_path / "libfake.so").write_text("not a library")
    with pytest.raises(DataError, match="cannot load the library"):
        load_library(tmp_path / "libfake.so")
    assert load_library(Path(lib.library)).kernel_sha256 == lib.kernel_sha256       # the .so itself
    assert lib.info["kernel_sha256"] == json.loads((out / "adgrad-export.json").read_text())["kernel_sha256"]


def test_a_process_that_loads_a_library_imports_no_numba(pair):
    kernel, lib, out = pair
    x = random_points(kernel, 3000, seed=4)
    x = {n: np.where(np.isfinite(a), a, 0.5) for n, a in x.items()}
    np.savez(out.parent / "x.npz", **x)
    code = (f"import sys, numpy as np\nfrom adgrad.engine import load_library\n"
            f"lib = load_library({str(out)!r})\nx = dict(np.load({str(out.parent / 'x.npz')!r}))\n"
            f"res = lib.evaluate(x, out={{n: np.empty((3000, *s)) for n, s in lib.output_shapes.items()}})\n"
            f"np.savez({str(out.parent / 'y.npz')!r}, **res)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')"
            f" or m in {sorted(COMPILER)!r}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["[]"]
    ref = kernel.evaluate(x, out={n: np.empty((3000, *s)) for n, s in kernel.output_shapes.items()})
    got = np.load(out.parent / "y.npz")
    assert all(same_bits(got[n], ref[n]) for n in got.files) and got.files


def test_the_numpy_digest_is_the_numba_digest():
    rng = np.random.default_rng(5)
    for shape, first in (((7, 3), 5), ((1000, 100), 12345), ((3,), 2 ** 40), ((0, 4), 3), ((9000, 1), 0)):
        x = rng.standard_normal(shape)
        x.reshape(-1)[: x.size // 3] = np.nan
        assert job_native.digest(x, first) == numba_digest(x, first), shape


# --- adgrad run --native ---

def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def attrs_and_data(path):
    with h5py.File(path) as f:
        attrs = {k: str(v) for k, v in f.attrs.items() if k not in ("started", "finished")}
        data = {k: f[k][:] for k in f if not k.startswith("_")}
    return attrs, data


@pytest.fixture(scope="module")
def eam_run(tmp_path_factory):
    """A copy of configs/eam.yaml with its model and data, its export, and a numba run's output."""
    root = tmp_path_factory.mktemp("eam_run")
    for folder, name in (("configs", "eam.yaml"), ("configs", "eam_model.yaml"), ("data", "eam_points.h5")):
        (root / folder).mkdir(exist_ok=True)
        shutil.copy(ROOT / folder / name, root / folder / name)
    assert invoke("export", root / "configs/eam.yaml", "-o", root / "lib").exit_code == 0
    assert invoke("run", root / "configs/eam.yaml", "-o", root / "numba.h5", "-q").exit_code == 0
    return root


def test_run_native_writes_the_numba_runs_file(eam_run):
    res = invoke("run", eam_run / "configs/eam.yaml", "-o", eam_run / "native.h5", "--native", eam_run / "lib",
                 "--threads", 2, "--chunk", 700)
    assert res.exit_code == 0, res.output
    assert f"native library {eam_run / 'lib' / 'libeam.so'}" in res.output
    (a, x), (b, y) = attrs_and_data(eam_run / "numba.h5"), attrs_and_data(eam_run / "native.h5")
    assert {k: v for k, v in a.items() if k not in ("chunk", "chunks_done")} == \
        {k: v for k, v in b.items() if k not in ("chunk", "chunks_done")}
    assert list(x) == list(y) and all(same_bits(x[k], y[k]) for k in x)


def test_a_second_native_run_imports_no_compiler_and_no_kernel_helpers(eam_run):
    """The first run with a library checks it (the compiler), the second reads the record: no compiler,
    and no numba at all (this run sums nothing: store/output.py imports the exact sums only for that)."""
    args = ["run", "configs/eam.yaml", "-o", "again.h5", "--overwrite", "--native", "lib", "-q"]
    code = ("import sys\nfrom adgrad.cli.entry import main\nsys.argv[0] = 'adgrad'\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            f"print(sorted(m for m in sys.modules if m in {sorted(COMPILER)!r}"
            f" or m.startswith(('numba', 'llvmlite', 'adgrad.engine.codegen', 'adgrad.engine.ir',"
            f" 'adgrad.engine.numeric.scalar', 'adgrad.engine.numeric.exactsum'))))")
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                             cwd=eam_run)
        assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["[]"], res.stdout
    _, x = attrs_and_data(eam_run / "numba.h5")
    _, y = attrs_and_data(eam_run / "again.h5")
    assert all(same_bits(x[k], y[k]) for k in x)


def test_a_library_of_another_model_or_kernel_is_bad_input(eam_run, pair):
    kernel, _, out = pair
    res = invoke("run", eam_run / "configs/eam.yaml", "-o", eam_run / "x.h5", "--native", out)
    if kernel.model.name != "eam":
        assert res.exit_code == 2 and "exported from another model" in res.output
        return
    assert res.exit_code == 0, res.output        # the model file's export: the config's kernel too
    os.remove(eam_run / "x.h5")
    assert invoke("export", eam_run / "configs/eam.yaml", "-o", eam_run / "fwd", "--mode", "forward").exit_code == 0
    res = invoke("run", eam_run / "configs/eam.yaml", "-o", eam_run / "x.h5", "--native", eam_run / "fwd")
    assert res.exit_code == 2 and "is not the kernel" in res.output and "--overwrite" in res.output
    res = invoke("run", eam_run / "configs/eam.yaml", "-o", eam_run / "x.h5", "--native", eam_run / "configs")
    assert res.exit_code == 2 and "not an adgrad export" in res.output
    assert not (eam_run / "x.h5").exists()


@pytest.mark.parametrize("first, second", [("native", "numba"), ("numba", "native")])
def test_a_run_stopped_with_one_kernel_resumes_with_the_other(eam_run, first, second):
    """The same kernel_sha256, params, modes and input checksums: a file started by the library is
    finished by numba's kernel and the other way round, to the numba run's bits."""
    import signal

    from adgrad.engine.job.run import run as run_job
    from adgrad.engine.job.signals import Interrupted
    from adgrad.engine.spec import load_config_file
    config = load_config_file(str(eam_run / "configs/eam.yaml"))
    out = eam_run / f"{first}-{second}.h5"
    kernels = {"native": lambda: load_library(eam_run / "lib"), "numba": lambda: None}

    def progress(done, total):
        if done >= 500:
            os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(Interrupted, match="marked incomplete"):
        run_job(config, output=str(out), chunk=250, threads=1, progress=progress, native=kernels[first]())
    summary = run_job(config, output=str(out), resume=True, native=kernels[second]())
    assert 0 < summary.computed < summary.points == 2000
    _, x = attrs_and_data(eam_run / "numba.h5")
    _, y = attrs_and_data(out)
    assert all(same_bits(x[k], y[k]) for k in x)


def test_a_configs_params_override_the_librarys_defaults(eam_run):
    """A library exported from the model file (alpha = 3, its default) runs a config that sets alpha:
    the run's params are the config's, from the first run's check and from the record after it."""
    text = (eam_run / "configs/eam.yaml").read_text().replace("mode: auto", "mode: auto\nparams: {alpha: 2.5}")
    (eam_run / "configs/eam_p.yaml").write_text(text)
    assert invoke("export", eam_run / "configs/eam_model.yaml", "-o", eam_run / "model_lib").exit_code == 0
    assert load_library(eam_run / "model_lib").param_values["alpha"] == 3.0
    assert invoke("run", eam_run / "configs/eam_p.yaml", "-o", eam_run / "p_numba.h5", "-q").exit_code == 0
    a, x = attrs_and_data(eam_run / "p_numba.h5")
    for k in range(2):
        out = eam_run / f"p_native{k}.h5"
        res = invoke("run", eam_run / "configs/eam_p.yaml", "-o", out, "--native", eam_run / "model_lib", "-q")
        assert res.exit_code == 0, res.output
        b, y = attrs_and_data(out)
        assert b["params_sha256"] == a["params_sha256"] and all(same_bits(x[n], y[n]) for n in x)
    _, default = attrs_and_data(eam_run / "numba.h5")
    assert not same_bits(default["E"], y["E"])


def test_a_library_exported_again_is_checked_again(eam_run):
    """The record is keyed by the library file: replaced by another kernel's export, it is refused (in
    a new process: one that loaded the old library is refused it by load_library, below)."""
    cfg, lib = eam_run / "configs/eam.yaml", eam_run / "relib"
    assert invoke("export", cfg, "-o", lib).exit_code == 0

    def run(out):
        return subprocess.run([sys.executable, "-m", "adgrad.cli.entry", "run", str(cfg), "-o", str(out), "--native",
                               str(lib)], capture_output=True, text=True, timeout=600)
    assert run(eam_run / "r1.h5").returncode == 0          # the record
    old = load_library(lib)
    assert invoke("export", cfg, "-o", lib, "--mode", "forward", "--overwrite").exit_code == 0
    res = run(eam_run / "r2.h5")
    assert res.returncode == 2 and "is not the kernel" in res.stderr
    assert not (eam_run / "r2.h5").exists()
    with pytest.raises(DataError, match="loaded this path's earlier library"):
        load_library(lib)
    assert old.evaluate({"x": np.zeros((2, 100))})["E"].shape == (2,)
