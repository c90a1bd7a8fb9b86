"""adgrad export: the library computes kernel.evaluate's bits (rows, strides, threads, the point
call, both CPU variants of the default build, --cpu host), needs nothing from Python, keeps its C
ABI (docs/native.md, whose program is compiled and run here), checks its arguments, and the command
refuses bad input (exit 2) and replaces an export all or nothing."""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.common import load_model_or_config
from adgrad.cli.main import cli
from adgrad.engine import compile_model, load_model
from adgrad.engine.compile import default_requests
from adgrad.engine.export import export
from adgrad.engine.export.build import export_model
from adgrad.engine.export.loader import D, I64, NativeModel
from adgrad.engine.store.lock import output_lock
from adgrad.engine.tools.sample import Sampler, columns

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "native.md").read_text()
M = 3000          # points: over engine/kernel.py's SERIAL_BELOW, so two threads run

# name: (model file, derivatives) or a config file
MODELS = {
    "eam": ("configs/eam_model.yaml", [("E", "x")]),
    "cu_eam": "configs/cu_eam.yaml",                                            # tables, from a config
    "neo_hooke": ("configs/models/neo_hooke.yaml", [("W", "F"), ("W", ["F", "F"])]),     # W, P, A
    "neo_hooke_lanes": ("configs/models/neo_hooke.yaml", [("W", "F")]),       # a lanes kernel (codegen/vector.py)
    "j2_voce": ("configs/models/j2_voce.yaml", [("sigma", "eps")]),           # a local Newton solve
}


def points(name, kernel, m=M, seed=0):
    if name == "cu_eam":        # Cu's neighbour lists, their vectors perturbed
        with h5py.File(ROOT / "data/cu_points.h5") as f:
            rows = {n: np.resize(f[n][:], (m,) + f[n].shape[1:]) for n in ("R", "valid", "s", "sn")}
        rows["R"] = rows["R"] + np.random.default_rng(seed).uniform(-0.2, 0.2, rows["R"].shape)
        return rows
    return Sampler(columns(kernel.model.spec), seed).rows(0, m)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.int64),
                                                 np.ascontiguousarray(b).view(np.int64))


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request, tmp_path_factory):
    """(name, kernel, NativeModel, directory) of a model exported with the default CPU."""
    name, spec = request.param, MODELS[request.param]
    out = tmp_path_factory.mktemp("export") / name
    if isinstance(spec, str):
        model, config = load_model_or_config(str(ROOT / spec))
        done = export_model(model, config, out)
        kernel = compile_model(model, config.compute.derivatives, mode=config.mode,
                               values=list(config.compute.values), math=config.engine.math)
    else:
        kernel = compile_model(load_model(ROOT / spec[0]), derivatives=spec[1])
        done = export(kernel, out)
    return name, kernel, NativeModel(done.library), out


def test_batch_gives_evaluates_bits_on_rows_strides_and_threads(exported):
    name, kernel, lib, _ = exported
    x = points(name, kernel)
    ref = kernel.evaluate(x)
    for threads in (1, 2, 0):
        got = lib.evaluate(x, threads=threads)
        assert all(same_bits(ref[n], got[n]) for n in ref), (name, threads)
    # the point axis last, in and out (the strided driver), and an input shared by every point
    last = {n: np.moveaxis(np.ascontiguousarray(np.moveaxis(v, 0, -1)), -1, 0) for n, v in x.items()}
    out = {n: np.moveaxis(np.empty(v.shape[1:] + v.shape[:1]), -1, 0) for n, v in ref.items()}
    got = lib.evaluate(last, threads=2, out=out)
    assert all(same_bits(ref[n], got[n]) for n in ref)
    one = {n: np.broadcast_to(v[:1], v.shape) for n, v in x.items()}
    got, ref1 = lib.evaluate(one, threads=2), kernel.evaluate({n: v[:1] for n, v in x.items()})
    assert all(same_bits(np.broadcast_to(ref1[n], got[n].shape), got[n]) for n in ref)


def point_call(lib, x, i):
    """The library's point function at point i of x: {result: array}."""
    ins = [np.ascontiguousarray(x[a["name"]][i], dtype=np.float64) for a in lib.info["inputs"]]
    outs = [np.empty(a["shape"]) for a in lib.info["outputs"]]
    work = np.empty(lib.fn["workspace_size"]())
    lib.check(lib.fn["point"](lib.ctx, (D * len(ins))(*[a.ctypes.data_as(D) for a in ins]),
                              (D * len(outs))(*[a.ctypes.data_as(D) for a in outs]), work.ctypes.data_as(D)))
    return {a["name"]: o for a, o in zip(lib.info["outputs"], outs)}


def test_point_function_gives_the_same_bits(exported):
    name, kernel, lib, _ = exported
    x = points(name, kernel, 64, seed=1)
    ref = kernel.evaluate(x)
    lib.set_params()
    for i in (0, 17, 63):
        got = point_call(lib, x, i)
        assert all(same_bits(ref[n][i], got[n]) for n in ref), (name, i)


BASELINE = """
import sys, numpy as np
from adgrad.engine.export.loader import NativeModel
lib = NativeModel(sys.argv[1])
x = dict(np.load(sys.argv[2]))
np.savez(sys.argv[3], cpu=lib.info["cpu"], **lib.evaluate(x, threads=2))
"""


@pytest.mark.parametrize("level", ["x86-64", "x86-64-v3"])
def test_each_lower_variant_gives_the_same_bits(exported, tmp_path, level):
    """ADGRAD_NATIVE_CPU=x86-64 keeps the baseline code (no FMA instruction: libm's fma), =x86-64-v3 the
    AVX2 code on a CPU with AVX-512 (where the library picks x86-64-v4 by itself), in a process that
    loads the library afresh."""
    name, kernel, lib, out = exported
    x = points(name, kernel, 1500, seed=2)
    np.savez(tmp_path / "x.npz", **x)
    env = {**os.environ, "ADGRAD_NATIVE_CPU": level}
    subprocess.run([sys.executable, "-c", BASELINE, lib.lib._name, tmp_path / "x.npz", tmp_path / "y.npz"],
                   env=env, check=True)
    got = np.load(tmp_path / "y.npz")
    assert str(got["cpu"]) == level or (level == "x86-64-v3" and str(got["cpu"]) == "x86-64")   # a CPU without AVX2
    ref = kernel.evaluate(x)
    assert all(same_bits(ref[n], got[n]) for n in ref)


@pytest.mark.parametrize("name", ["eam", "neo_hooke_lanes"])
def test_cpu_host_gives_the_same_bits(name, tmp_path):
    path, derivs = MODELS[name]
    kernel = compile_model(load_model(ROOT / path), derivatives=derivs)
    lib = NativeModel(export(kernel, tmp_path / "lib", cpu="host").library)
    assert lib.info["cpu"] == "host"
    x = points(name, kernel)
    ref, got = kernel.evaluate(x), lib.evaluate(x, threads=2)
    assert all(same_bits(ref[n], got[n]) for n in ref)


def test_the_library_needs_only_libc_and_libm(exported):
    name, kernel, lib, out = exported
    so = lib.lib._name
    deps = [line.split()[0] for line in subprocess.run(["ldd", so], capture_output=True, text=True,
                                                       check=True).stdout.splitlines()]
    names = {re.sub(r"\.so.*", "", d.rsplit("/", 1)[-1]) for d in deps}
    assert names <= {"linux-vdso", "libc", "libm", "ld-linux-x86-64"}, names
    undefined = subprocess.run(["nm", "-u", so], capture_output=True, text=True, check=True).stdout
    assert not re.search(r"\b(Py|_Py|numba|NRT)", undefined), undefined
    exported_symbols = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True,
                                      check=True).stdout.split()[2::3]
    assert exported_symbols and all(s.startswith(lib.name + "_") for s in exported_symbols), exported_symbols


def test_metadata_describes_the_model(exported):
    name, kernel, lib, out = exported
    info, manifest = lib.info, json.loads((out / "adgrad-export.json").read_text())
    from adgrad.engine.version import __version__
    assert info["abi_version"] == manifest["abi_version"] == 1
    assert info["model"] == kernel.model.name and info["adgrad_version"] == __version__
    assert info["kernel_sha256"] == manifest["kernel_sha256"] and len(info["model_sha256"]) == 64
    assert [(a["name"], a["shape"]) for a in info["inputs"]] == [(n, v.shape) for n, v in kernel.graph.inputs.items()]
    assert [(a["name"], a["shape"]) for a in info["outputs"]] == list(kernel.output_shapes.items())
    derivs = {d.name: d for d in kernel.derivatives}
    for a in info["outputs"]:
        d = derivs.get(a["name"])
        assert (a["kind"], a["of"], a["wrt"]) == (("value", "", "") if d is None else
                                                  ("derivative", d.of, ",".join(d.wrt)))
    defaults = np.concatenate([np.ravel(kernel.model.param_values[n]) for n in kernel.graph.params])
    assert same_bits(info["param_defaults"], defaults)
    assert [p["offset"] for p in info["params"]] == list(np.cumsum([0] + [p["size"] for p in info["params"]])[:-1])
    assert info["workspace_size"] == max(1, kernel.workspace_size)


def test_params_change_the_results_as_evaluates_params_do(tmp_path):
    kernel = compile_model(load_model(ROOT / "configs/models/j2_voce.yaml"), derivatives=[("sigma", "eps")])
    lib = NativeModel(export(kernel, tmp_path / "j2").library)
    x = points("j2_voce", kernel)
    for params in ({"sy": 0.03, "q": 0.1}, {"E": 200.0, "nu": 0.3, "b": 5.0}):
        ref, got = kernel.evaluate(x, params=params), lib.evaluate(x, params=params)
        assert all(same_bits(ref[n], got[n]) for n in ref)
        assert not same_bits(ref["sigma"], kernel.evaluate(x)["sigma"])


def guarded(n):
    """n doubles that end where an unreadable page begins: reading one past them crashes."""
    page = mmap.PAGESIZE
    size = -(-8 * n // page) * page
    buf = mmap.mmap(-1, size + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + size, page, 0) == 0
    arr = np.frombuffer(buf, dtype=np.float64, count=n, offset=size - 8 * n)
    arr[:] = 1.5
    return buf, arr


def test_params_of_the_wrong_length_are_refused_without_a_read_past_them(exported):
    name, kernel, lib, _ = exported
    n = lib.info["n_param_values"]
    ERR_PARAMS, ERR_ARGUMENT = 2, 1
    keep = np.empty(n)
    get = lib.lib[f"{lib.name}_get_params"]
    get.argtypes = [ctypes.c_void_p, D, I64]
    assert lib.fn["set_params"](lib.ctx, lib.info["param_defaults"].ctypes.data_as(D), n) == 0
    for wrong in (n - 1, n + 1, n + 1000, -1):
        buf, arr = guarded(max(1, wrong))
        assert lib.fn["set_params"](lib.ctx, arr.ctypes.data_as(D), wrong) == ERR_PARAMS
        assert get(lib.ctx, arr.ctypes.data_as(D), wrong) == ERR_PARAMS and np.all(arr == 1.5)   # nothing written
        del arr
        buf.close()
    assert get(lib.ctx, keep.ctypes.data_as(D), n) == 0 and same_bits(keep, lib.info["param_defaults"])
    setp = lib.lib[f"{lib.name}_set_param"]
    setp.argtypes = [ctypes.c_void_p, ctypes.c_char_p, D, I64]
    p = lib.info["params"][0]
    buf, arr = guarded(p["size"])
    assert setp(lib.ctx, p["name"].encode(), arr.ctypes.data_as(D), p["size"]) == 0
    assert setp(lib.ctx, p["name"].encode(), arr.ctypes.data_as(D), p["size"] + 1) == ERR_PARAMS
    assert setp(lib.ctx, b"no_such_param", arr.ctypes.data_as(D), p["size"]) == ERR_PARAMS
    assert setp(lib.ctx, None, arr.ctypes.data_as(D), p["size"]) == ERR_ARGUMENT
    assert get(lib.ctx, keep.ctypes.data_as(D), n) == 0
    assert np.all(keep[p["offset"]:p["offset"] + p["size"]] == 1.5)
    del arr
    buf.close()
    lib.set_params()


def test_bad_batch_and_point_arguments_return_error_codes(exported):
    name, kernel, lib, _ = exported
    ARG, WORKSPACE = 1, 3
    x = points(name, kernel, 8)
    ins = [np.ascontiguousarray(x[a["name"]], dtype=np.float64) for a in lib.info["inputs"]]
    outs = [np.empty((8,) + a["shape"]) for a in lib.info["outputs"]]
    ip = (D * len(ins))(*[a.ctypes.data_as(D) for a in ins])
    op = (D * len(outs))(*[a.ctypes.data_as(D) for a in outs])
    rows = [v for a in ins + outs for v in (a[0].size, 1)]
    ist, ost = (I64 * (2 * len(ins)))(*rows[:2 * len(ins)]), (I64 * (2 * len(outs)))(*rows[2 * len(ins):])
    batch, ctx = lib.fn["batch"], lib.ctx
    assert batch(ctx, 8, ip, ist, op, ost, 1, None, 0, None) == 0
    assert batch(ctx, 0, ip, ist, op, ost, 1, None, 0, None) == 0
    assert batch(ctx, -1, ip, ist, op, ost, 1, None, 0, None) == ARG
    assert batch(None, 8, ip, ist, op, ost, 1, None, 0, None) == ARG
    assert batch(ctx, 8, None, ist, op, ost, 1, None, 0, None) == ARG
    assert batch(ctx, 8, ip, ist, None, ost, 1, None, 0, None) == ARG
    for threads in (-1, 1025):
        assert batch(ctx, 8, ip, ist, op, ost, threads, None, 0, None) == ARG
        assert lib.fn["batch_workspace_size"](threads) == -1
    null_in = (D * len(ins))()
    assert batch(ctx, 8, null_in, ist, op, ost, 1, None, 0, None) == ARG
    negative = (I64 * len(ist))(*ist)
    negative[0] = -1
    assert batch(ctx, 8, ip, negative, op, ost, 1, None, 0, None) == ARG
    for bad in ((0, 1), (outs[0][0].size, 0) if outs[0][0].size > 1 else (0, 0)):
        shared = (I64 * len(ost))(*ost)
        shared[0], shared[1] = bad            # points (or entries) of an output written to one place
        assert batch(ctx, 8, ip, ist, op, shared, 1, None, 0, None) == ARG, bad
    need = lib.fn["batch_workspace_size"](2)
    work = np.empty(need)
    assert batch(ctx, 8, ip, ist, op, ost, 2, work.ctypes.data_as(D), need - 1, None) == WORKSPACE
    assert batch(ctx, 8, ip, ist, op, ost, 2, work.ctypes.data_as(D), need, None) == 0
    assert lib.fn["point"](ctx, ip, op, None) == ARG
    assert lib.fn["point"](ctx, null_in, op, work.ctypes.data_as(D)) == ARG
    assert lib.fn["error_string"](ARG).decode().startswith("bad argument")


def test_nonfinite_flags_match_evaluates(tmp_path):
    kernel = compile_model(load_model(ROOT / "configs/eam_model.yaml"), derivatives=[("E", "x")])
    lib = NativeModel(export(kernel, tmp_path / "eam").library)
    x = points("eam", kernel)
    x["x"][5, 3], x["x"][2000, 0], x["x"][2999, 99] = np.nan, np.inf, -800.0   # the last overflows E
    ref_flags, flags = np.zeros(M, dtype=bool), np.zeros(M, dtype=np.uint8)
    ref = kernel.evaluate(x, nonfinite=ref_flags, threads=2)
    got = lib.evaluate(x, nonfinite=flags, threads=2)
    assert np.array_equal(ref_flags, flags.astype(bool)) and ref_flags.sum() == 3
    assert all(same_bits(ref[n], got[n]) for n in ref)


# ---- the program in docs/native.md -------------------------------------------------------------------

def doc_blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", DOC, re.S)


def test_the_docs_program_compiles_runs_and_prints_evaluates_bits(tmp_path):
    (c_src,) = [b for b in doc_blocks("c") if b.startswith("/* example.c */")]
    (commands,) = [b for b in doc_blocks("sh") if "adgrad export" in b and "./example" in b]
    (tmp_path / "example.c").write_text(c_src)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("ADGRAD_NATIVE_CPU", None)
    lines = commands.strip().splitlines()
    for line in lines[:-1]:
        subprocess.run(line, shell=True, cwd=tmp_path, env=env, check=True)
    lib = tmp_path / "build" / "neo_hooke" / "libneo_hooke.so"
    ldd = subprocess.run(["ldd", tmp_path / "example"], capture_output=True, text=True, check=True).stdout
    assert "python" not in ldd.lower() and "libneo_hooke.so" in ldd
    run = subprocess.run(lines[-1], shell=True, cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})       # no Python anywhere in its environment
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "model neo_hooke from adgrad" in out and "result 1: dW_dF (derivative), 9 doubles per point" in out
    assert "params of length 1: wrong params" in out
    kernel = compile_model(load_model(ROOT / "configs/models/neo_hooke.yaml"), derivatives=[("W", "F")])
    n = 1000
    F = np.empty((n + 1, 9))
    F[0] = [1.1, 0.1, 0.0, 0.0, 1.0, 0.05, 0.0, 0.0, 0.9]
    for i in range(n):
        for k in range(9):
            F[i + 1, k] = (k % 4 == 0) + 0.01 * ((7 * i + 13 * k) % 17 - 8)
    ref = kernel.evaluate({"F": F.reshape(n + 1, 3, 3)}, params={"bulk": 5000.0})
    W, P = ref["W"], ref["dW_dF"].reshape(n + 1, 9)
    printed = re.findall(r"^(point(?: \d+)?): W (\S+) P00 (\S+) P12 (\S+)$", out, re.M)
    assert len(printed) == 5
    for label, w, p00, p12 in printed:
        row = 0 if label == "point" else int(label.split()[1]) + 1
        assert (float.fromhex(w), float.fromhex(p00), float.fromhex(p12)) == (W[row], P[row, 0], P[row, 5])
    assert lib.exists()


# ---- the command ---------------------------------------------------------------------------------------

def invoke(*args, env=None):
    return CliRunner().invoke(cli, ["export", *map(str, args)], env=env)


def files(d):
    return {p.name: p.read_bytes() for p in Path(d).iterdir()}


@pytest.fixture(scope="module")
def eam_export(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli") / "eam"
    res = invoke(ROOT / "configs/eam.yaml", "-o", d)
    assert res.exit_code == 0, res.output
    assert f"-> {d}/libeam.so and {d}/eam.h (cpu x86-64)" in res.output
    return d


def test_an_existing_export_needs_overwrite_and_is_left_untouched(eam_export):
    before = files(eam_export)
    res = invoke(ROOT / "configs/eam.yaml", "-o", eam_export)
    assert res.exit_code == 2 and "holds an adgrad export already; pass --overwrite" in res.output
    assert files(eam_export) == before


def test_overwrite_replaces_the_whole_export(eam_export):
    before, inode = files(eam_export), eam_export.stat().st_ino
    res = invoke(ROOT / "configs/eam.yaml", "-o", eam_export, "--overwrite", "--cpu", "host", "-q")
    assert res.exit_code == 0 and res.output == ""
    after = files(eam_export)
    assert set(after) == set(before) and after["libeam.so"] != before["libeam.so"]
    assert json.loads(after["adgrad-export.json"])["cpu"] == "host" and eam_export.stat().st_ino != inode
    assert not [p for p in eam_export.parent.iterdir() if p.name.startswith(".")]   # no temporary left


def test_a_failed_build_leaves_the_old_export(eam_export, tmp_path):
    """A compiler that passes the probe but fails the library's link: exit 1, old export intact."""
    before = files(eam_export)
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *kernel*) echo "ld: out of disk" >&2; exit 1;; esac\n'
                  f'exec {shutil.which("cc")} "$@"\n')
    cc.chmod(0o755)
    res = invoke(ROOT / "configs/eam.yaml", "-o", eam_export, "--overwrite", env={"CC": str(cc)})
    assert res.exit_code == 1 and "building libeam.so failed" in res.output and "ld: out of disk" in res.output
    assert files(eam_export) == before
    assert not [p for p in eam_export.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("env, phrase", [
    ({"CC": "/nonexistent/cc"}, "CC='/nonexistent/cc' is not a program on PATH"),
    ({"CC": "", "PATH": "/nonexistent"}, "no `cc` on PATH"),
    ({"CC": "cc -fuse-ld=/nonexistent/ld"}, "cannot build a shared library here"),
])
def test_no_compiler_or_linker_is_bad_input(env, phrase, tmp_path):
    res = invoke(ROOT / "configs/eam.yaml", "-o", tmp_path / "out", env=env)
    assert res.exit_code == 2, res.output
    assert "adgrad export needs a C compiler and linker" in res.output and phrase in res.output
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == []


def test_a_directory_that_is_not_an_export_is_never_written(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    res = invoke(ROOT / "configs/eam.yaml", "-o", tmp_path / "mine", "--overwrite")
    assert res.exit_code == 2 and "is a directory that adgrad export did not write" in res.output
    assert files(tmp_path / "mine") == {"notes.txt": b"keep"}
    (tmp_path / "file").write_text("x")
    res = invoke(ROOT / "configs/eam.yaml", "-o", tmp_path / "file")
    assert res.exit_code == 2 and "exists and is not a directory" in res.output


def test_an_export_in_progress_holds_the_output_lock(tmp_path):
    with output_lock(str(tmp_path / "out")):
        res = invoke(ROOT / "configs/eam.yaml", "-o", tmp_path / "out")
    assert res.exit_code == 2 and str(tmp_path / "out") in res.output and "another" in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, phrase", [
    (["--name", "1eam"], "--name '1eam': the library's name must be a C identifier"),
    (["--name", "e-am"], "must be a C identifier"),
    (["--cpu", "pentium"], "Invalid value for '--cpu'"),
])
def test_bad_options_are_bad_input(args, phrase, tmp_path):
    res = invoke(ROOT / "configs/eam.yaml", "-o", tmp_path / "out", *args)
    assert res.exit_code == 2 and phrase in res.output
    assert not (tmp_path / "out").exists()


def test_name_sets_the_prefix_and_a_model_file_exports_every_gradient(tmp_path):
    res = invoke(ROOT / "configs/models/neo_hooke.yaml", "-o", tmp_path / "nh", "--name", "nh")
    assert res.exit_code == 0, res.output
    lib = NativeModel(tmp_path / "nh" / "libnh.so")
    model = load_model(ROOT / "configs/models/neo_hooke.yaml")
    kernel = compile_model(model, derivatives=default_requests(model))
    assert [a["name"] for a in lib.info["outputs"]] == list(kernel.output_shapes) == ["W", "dW_dF"]
    header = (tmp_path / "nh" / "nh.h").read_text()
    assert "int nh_batch(const nh_ctx *ctx" in header and "#define NH_OUT_dW_dF 1" in header
    x = points("neo_hooke", kernel)
    ref, got = kernel.evaluate(x), lib.evaluate(x, threads=2)
    assert all(same_bits(ref[n], got[n]) for n in ref)


def test_headers_of_two_exports_compile_together_as_c_and_cpp(eam_export, tmp_path):
    from adgrad.engine.export.cwrap import header
    from adgrad.engine.export.layout import layout
    kernel = compile_model(load_model(ROOT / "configs/models/neo_hooke.yaml"), derivatives=[("W", "F")])
    (tmp_path / "nh.h").write_text(header(layout(kernel, "nh")))
    src = tmp_path / "two.c"
    src.write_text(textwrap.dedent("""\
        #include "eam.h"
        #include "nh.h"
        int main(void) { return eam_info()->abi_version == ADGRAD_ABI_VERSION && NH_SIZE_OUT_dW_dF == 9 ? 0 : 1; }
        """))
    for compiler, flags in (("cc", ["-std=c99", "-Wall", "-Werror", "-pedantic"]), ("c++", ["-x", "c++", "-Wall"])):
        if shutil.which(compiler) is None:
            continue
        exe = tmp_path / f"two-{compiler}"
        subprocess.run([compiler, *flags, "-o", exe, src, f"-I{eam_export}", f"-I{tmp_path}", f"-L{eam_export}",
                        "-leam", f"-Wl,-rpath,{eam_export}"], check=True)
        subprocess.run([exe], check=True)


def test_a_name_c_cannot_spell_is_bad_input(tmp_path):
    (tmp_path / "m.yaml").write_text("adgrad: 1\nname: uni\ninputs:\n  ε: {shape: []}\noutputs:\n  W: 2*ε**2\n")
    res = invoke(tmp_path / "m.yaml", "-o", tmp_path / "out")
    assert res.exit_code == 2 and "input 'ε' of model 'uni'" in res.output and "ASCII letters" in res.output
    assert sorted(os.listdir(tmp_path)) == ["m.yaml"]
