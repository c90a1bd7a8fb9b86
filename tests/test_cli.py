"""CLI contracts (SPEC.md): commands, exit codes, error messages and the output file, via CliRunner.

Every test works in its own tmp_path with a copy of configs/eam_model.yaml (or a tiny model written
here), a small input file and a config with paths relative to the config file."""
from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
from pathlib import Path

import h5py
import numba
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EAM_MODEL = ROOT / "configs" / "eam_model.yaml"
M = 50

CONFIG = """\
adgrad: 1
model: model.yaml
input:
  path: in.h5
  datasets: {x: points}
output:
  path: out.h5
compute:
  values: [E]
  derivatives:
    - {of: E, wrt: x}
"""


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def eam_reference(x, alpha=3.0):
    r = np.exp(-alpha * (x + 1.0))
    rho = r.sum(axis=1)
    e = rho**2 + rho**3 + 0.25 * rho**4
    de = (2 * rho + 3 * rho**2 + rho**3)[:, None] * (-alpha) * r
    return e, de


def h5_files(d):
    return sorted(p.name for p in Path(d).glob("*.h5"))


@pytest.fixture
def work(tmp_path):
    """tmp_path with model.yaml (the EAM model), in.h5 (/points, (50, 100)) and cfg.yaml."""
    shutil.copy(EAM_MODEL, tmp_path / "model.yaml")
    x = np.random.default_rng(7).random((M, 100))
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f["points"] = x
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    return tmp_path


def write(path, text):
    Path(path).write_text(text)
    return path


def assert_usage_error(result, names_file, no_output_in, before=("in.h5",)):
    """Exit 2, an 'error:' message on stderr naming the file, no traceback, no new .h5 file."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert str(names_file) in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert h5_files(no_output_in) == sorted(before)


def assert_located(result, path, line, col):
    assert f"{path}:{line}:{col}: " in result.stderr, result.stderr


def assert_caret_under(stderr, expr, token):
    """The message shows `expr` on a line of its own and a caret line exactly under `token`."""
    lines = stderr.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip() == expr)
    caret = lines[i + 1]
    carets = caret.strip()
    assert carets and set(carets) == {"^"}, caret
    start = caret.index("^")
    assert lines[i][start:start + len(carets)] == token, (lines[i], caret)


# ---- help -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    ([], ["derivatives", "HDF5", "run", "check", "explain"]),
    (["run"], ["Compute", "outputs and derivatives", "--chunk", "--output", "--overwrite", "--threads",
               "--quiet", "--progress"]),
    (["check"], ["Check derivatives", "central differences", "--points"]),
    (["explain"], ["Show how adgrad compiles a model", "--show", "ir", "source"]),
])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(args, words, flag):
    result = invoke(*args, flag)
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    text = " ".join(result.output.split())      # help text is re-wrapped to the terminal width
    for w in words:
        assert w in text


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert "0.1.0" in result.output


# ---- run: success ---------------------------------------------------------------------------------

def test_run_writes_complete_output(work):
    result = invoke("run", work / "cfg.yaml")
    assert result.exit_code == 0, result.output
    out = work / "out.h5"                   # output.path is relative to the config file, not the cwd
    assert out.exists()
    assert f"{M} points" in result.stderr
    assert "dE_dx: reverse" in result.stderr
    assert "non-finite points: 0" in result.stderr
    assert result.stdout == ""

    with h5py.File(work / "in.h5", "r") as f:
        x = f["points"][()]
    e_ref, de_ref = eam_reference(x)
    with h5py.File(out, "r") as f:
        assert set(f.keys()) - {"_adgrad"} == {"E", "dE_dx"}
        assert f["E"].shape == (M,) and f["E"].dtype == np.float64
        assert f["dE_dx"].shape == (M, 100) and f["dE_dx"].dtype == np.float64
        assert f["dE_dx"].chunks is not None and f["dE_dx"].chunks[1:] == (100,)
        np.testing.assert_allclose(f["E"][()], e_ref, rtol=1e-12)
        np.testing.assert_allclose(f["dE_dx"][()], de_ref, rtol=1e-12)
        a = dict(f.attrs)
    assert bool(a["complete"]) is True
    assert int(a["chunks_done"]) == 1
    assert int(a["points"]) == M
    assert json.loads(a["modes"]) == {"dE_dx": "reverse"}
    model_text = (work / "model.yaml").read_text()
    assert a["model_yaml"] == model_text
    assert a["config_yaml"] == CONFIG
    assert a["model_sha256"] == hashlib.sha256(model_text.encode()).hexdigest()
    assert Path(a["input_path"]) == work / "in.h5"
    assert a["adgrad_version"] == "0.1.0"
    assert a["numba_version"] == numba.__version__
    assert a["numpy_version"] == np.__version__
    assert a["h5py_version"] == h5py.__version__
    assert int(a["threads"]) >= 1
    started = datetime.datetime.fromisoformat(a["started"])
    finished = datetime.datetime.fromisoformat(a["finished"])
    assert started <= finished


def test_run_chunked_equals_single_chunk(work):
    one, seven = work / "one.h5", work / "seven.h5"
    r1 = invoke("run", work / "cfg.yaml", "-o", one)
    r7 = invoke("run", work / "cfg.yaml", "-o", seven, "--chunk", 7, "--threads", 1)
    assert r1.exit_code == 0 and r7.exit_code == 0, (r1.output, r7.output)
    with h5py.File(one, "r") as a, h5py.File(seven, "r") as b:
        assert int(a.attrs["chunks_done"]) == 1
        assert int(b.attrs["chunks_done"]) == -(-M // 7)
        assert bool(b.attrs["complete"]) is True
        for name in ("E", "dE_dx"):
            np.testing.assert_array_equal(a[name][()], b[name][()])


def test_run_quiet_prints_nothing(work):
    result = invoke("run", work / "cfg.yaml", "-q")
    assert result.exit_code == 0
    assert result.output == ""
    assert (work / "out.h5").exists()


def test_run_verbose_prints_timings(work):
    result = invoke("run", work / "cfg.yaml", "-v")
    assert result.exit_code == 0
    assert "timings:" in result.stderr and "compile" in result.stderr


# ---- run: what it says about compiling, and what it checks before -----------------------------------

@pytest.fixture
def cold(monkeypatch):
    """Every kernel taken as not in the compile cache, as on a first use (whether it is: compile_model's)."""
    monkeypatch.setattr("adgrad.engine.compile.is_cold", lambda module: True)


def test_run_says_when_it_compiles(work, cold):
    """A line before the compile and one with its time (both on stderr); the summary gives the run's
    points/s without the compile, and the compile time apart; -q silences it all."""
    result = invoke("run", work / "cfg.yaml")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "compiling eam (first use of this model and these derivatives)"
    assert re.fullmatch(r"compiled eam in \d+\.\d s", lines[1]), lines
    assert re.fullmatch(rf"{M} points in \d+\.\d\d s \([\d,]+ points/s\) -> .*out\.h5", lines[2]), lines
    assert re.fullmatch(r"modes: dE_dx: reverse; non-finite points: 0; threads: \d+; compile: \d+\.\d\d s", lines[3])
    assert len(lines) == 4
    quiet = invoke("run", work / "cfg.yaml", "--overwrite", "-q")
    assert quiet.exit_code == 0 and quiet.output == ""


def test_run_of_a_cached_kernel_says_so(work):
    assert invoke("run", work / "cfg.yaml", "-o", work / "first.h5").exit_code == 0    # now loaded: warm
    result = invoke("run", work / "cfg.yaml")
    assert result.exit_code == 0, result.output
    assert "compil" not in result.stderr.splitlines()[0]
    assert re.search(r"; compile: \d+\.\d\d s \(cached\)$", result.stderr.splitlines()[1]), result.stderr


def test_run_throughput_leaves_the_compile_out(work, monkeypatch):
    """Summary.rate is the points over the run's time without the compile (here made 1 s longer)."""
    import time
    from adgrad.engine.job import run as job
    from adgrad.engine.spec import load_config_file
    compile_model = job.compile_model
    monkeypatch.setattr(job, "compile_model", lambda *a, **k: (time.sleep(1.0), compile_model(*a, **k))[1])
    summary = job.run(load_config_file(str(work / "cfg.yaml")))
    assert summary.compile_seconds >= 1.0 and summary.timings["compile"] == summary.compile_seconds
    assert summary.run_seconds == pytest.approx(summary.seconds - summary.compile_seconds)
    assert summary.rate == pytest.approx(M / summary.run_seconds)


@pytest.mark.parametrize("case", ["input missing", "dataset missing", "dataset shape", "output directory missing",
                                  "output exists"])
def test_run_checks_input_and_output_before_compiling(work, monkeypatch, case):
    """What needs no kernel is answered before the kernel is compiled (or loaded): exit 2 at once."""
    def compile_model(*args, **kwargs):
        raise AssertionError("the kernel was compiled before the input and output were checked")
    monkeypatch.setattr("adgrad.engine.job.run.compile_model", compile_model)
    args, named = [work / "cfg.yaml"], work / "in.h5"
    if case == "input missing":
        write(work / "cfg.yaml", CONFIG.replace("path: in.h5", "path: gone.h5"))
        named = work / "gone.h5"
    elif case == "dataset missing":
        write(work / "cfg.yaml", CONFIG.replace("{x: points}", "{x: nope}"))
    elif case == "dataset shape":
        with h5py.File(work / "in.h5", "w") as f:
            f["points"] = np.zeros((M, 99))
    elif case == "output directory missing":
        args, named = args + ["-o", work / "sub" / "out.h5"], work / "sub"
    else:
        (work / "out.h5").write_bytes(b"results")
        named = work / "out.h5"
    result = invoke("run", *args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.startswith("error: ") and str(named) in result.stderr, result.stderr


COMPILED = {          # command and options -> the label of each kernel it compiles (None: its only one)
    ("check", "--points", 3): {"dE_dx by forward mode", "dE_dx by reverse mode", "dE_dx by manual mode",
                                "E for central differences"},
    ("explain", "--show", "cost"): {None},
    ("bench", "--points", 100, "--repeat", 1, "--no-compile-time"): {
        "values only", "values + derivatives (auto)", "values + derivatives, forward", "values + derivatives, reverse",
        "values + derivatives, manual"},
}


@pytest.mark.parametrize("command", list(COMPILED))
def test_check_explain_bench_say_when_they_compile(work, cold, command):
    """Each kernel compiled is announced on stderr (which of the command's kernels it is after a colon),
    with its time after; -q silences them and changes nothing else."""
    name, *options = command
    result = invoke(name, work / "cfg.yaml", *options)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines and len(lines) % 2 == 0, lines
    labels = set()
    for before, after in zip(lines[::2], lines[1::2]):
        label = before.split(": ", 1)[1] if ": " in before else None
        tail = f": {label}" if label else ""
        assert before == "compiling eam (first use of this model and these derivatives)" + tail, lines
        assert re.fullmatch(r"compiled eam in \d+\.\d s" + re.escape(tail), after), lines
        labels.add(label)
    assert labels == COMPILED[command]
    quiet = invoke(name, work / "cfg.yaml", *options, "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    if name != "bench":         # (bench's timings differ from call to call)
        assert quiet.stdout == result.stdout


# ---- run: bad input (exit 2, message names the file, no output file) --------------------------------

def test_malformed_config_yaml(work):
    cfg = write(work / "bad.yaml", "adgrad: 1\nmodel: model.yaml\ninput: {path: in.h5\n")
    result = invoke("run", cfg)
    assert_usage_error(result, cfg, work)
    assert "malformed YAML" in result.stderr
    assert re.search(re.escape(str(cfg)) + r":\d+:\d+: ", result.stderr)


def test_malformed_model_yaml(work):
    write(work / "model.yaml", "adgrad: 1\ninputs:\n  x: {shape: [100]}\noutputs:\n  E: [sum(x)\n")
    result = invoke("run", work / "cfg.yaml")
    assert_usage_error(result, work / "model.yaml", work)
    assert "malformed YAML" in result.stderr
    assert re.search(re.escape(str(work / "model.yaml")) + r":\d+:\d+: ", result.stderr)


def test_unknown_name_in_expression(work):
    write(work / "model.yaml", "adgrad: 1\ninputs:\n  x: {shape: [100]}\noutputs:\n  E: sum(x) + rhoo**2\n")
    result = invoke("run", work / "cfg.yaml")
    assert_usage_error(result, work / "model.yaml", work)
    assert_located(result, work / "model.yaml", 5, 6)
    assert "unknown name 'rhoo'" in result.stderr
    assert_caret_under(result.stderr, "sum(x) + rhoo**2", "rhoo")


SHAPES_MODEL = """\
adgrad: 1
inputs:
  a: {shape: [3]}
  b: {shape: [4]}
outputs:
  E: {expr}
"""


def _two_input_job(work, expr):
    write(work / "model.yaml", SHAPES_MODEL.replace("{expr}", expr))
    with h5py.File(work / "in.h5", "w") as f:
        f["a"] = np.ones((M, 3))
        f["b"] = np.ones((M, 4))
    return write(work / "c2.yaml", "adgrad: 1\nmodel: model.yaml\ninput: {path: in.h5}\noutput: {path: o.h5}\n")


def test_shape_mismatch_elementwise(work):
    cfg = _two_input_job(work, "sum(a + b)")
    result = invoke("run", cfg)
    assert_usage_error(result, work / "model.yaml", work)
    assert_located(result, work / "model.yaml", 6, 6)
    assert "(3,)" in result.stderr and "(4,)" in result.stderr
    assert_caret_under(result.stderr, "sum(a + b)", "a + b")


def test_shape_mismatch_dot(work):
    cfg = _two_input_job(work, "dot(a, b)")
    result = invoke("run", cfg)
    assert_usage_error(result, work / "model.yaml", work)
    assert_located(result, work / "model.yaml", 6, 6)
    assert re.search(r"\b3\b.*\b4\b", result.stderr.splitlines()[0]), result.stderr
    assert_caret_under(result.stderr, "dot(a, b)", "dot(a, b)")


def test_missing_dataset(work):
    write(work / "cfg.yaml", CONFIG.replace("{x: points}", "{x: nope}"))
    result = invoke("run", work / "cfg.yaml")
    assert_usage_error(result, work / "in.h5", work)
    assert "'nope'" in result.stderr and "not found" in result.stderr
    assert "points" in result.stderr          # lists what the file has


def test_dataset_of_wrong_shape(work):
    with h5py.File(work / "in2.h5", "w") as f:
        f["points"] = np.zeros((M, 99))
    write(work / "cfg.yaml", CONFIG.replace("path: in.h5", "path: in2.h5"))
    result = invoke("run", work / "cfg.yaml")
    assert_usage_error(result, work / "in2.h5", work, before=("in.h5", "in2.h5"))
    assert f"({M}, 99)" in result.stderr
    assert "(M, 100)" in result.stderr


def test_inputs_with_different_point_counts(work):
    _two_input_job(work, "sum(a) + sum(b)")
    with h5py.File(work / "in.h5", "w") as f:
        f["a"] = np.ones((M, 3))
        f["b"] = np.ones((M + 1, 4))
    result = invoke("run", work / "c2.yaml")
    assert_usage_error(result, work / "in.h5", work)
    assert "same number of points" in result.stderr


def test_output_exists_needs_overwrite(work):
    out = work / "out.h5"
    with h5py.File(out, "w") as f:
        f["sentinel"] = np.arange(3.0)
    before = out.read_bytes()
    mtime = out.stat().st_mtime_ns
    result = invoke("run", work / "cfg.yaml")
    assert_usage_error(result, out, work, before=("in.h5", "out.h5"))
    assert "--overwrite" in result.stderr
    assert out.read_bytes() == before and out.stat().st_mtime_ns == mtime

    result = invoke("run", work / "cfg.yaml", "--overwrite")
    assert result.exit_code == 0, result.output
    with h5py.File(out, "r") as f:
        assert set(f.keys()) - {"_adgrad"} == {"E", "dE_dx"}
        assert bool(f.attrs["complete"]) is True


def test_unknown_config_key(work):
    cfg = write(work / "cfg.yaml", CONFIG + "bogus: 1\n")
    result = invoke("run", cfg)
    assert_usage_error(result, cfg, work)
    assert_located(result, cfg, 12, 1)
    assert "unknown key 'bogus'" in result.stderr


def test_unknown_output_in_values(work):
    cfg = write(work / "cfg.yaml", CONFIG.replace("values: [E]", "values: [E, F]"))
    result = invoke("run", cfg)
    assert_usage_error(result, cfg, work)
    assert re.search(re.escape(str(cfg)) + r":9:\d+: ", result.stderr), result.stderr
    assert "'F' is not an output" in result.stderr


def test_wrt_not_an_input_or_param(work):
    cfg = write(work / "cfg.yaml", CONFIG.replace("wrt: x", "wrt: y"))
    result = invoke("run", cfg)
    assert_usage_error(result, cfg, work)
    assert re.search(re.escape(str(cfg)) + r":11:\d+: ", result.stderr), result.stderr
    assert "'y' is not an input or param" in result.stderr


def test_manual_mode_without_hand_written_derivative(work):
    text = EAM_MODEL.read_text()
    write(work / "model.yaml", text[: text.index("derivatives:")])
    cfg = write(work / "cfg.yaml", CONFIG + "mode: manual\n")
    result = invoke("run", cfg)
    assert_usage_error(result, work / "model.yaml", work)
    assert "manual" in result.stderr and "'dE_dx'" in result.stderr
    assert f"{cfg}:11:7: " in result.stderr          # the derivative request's line and column


# ---- check ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["model.yaml", "cfg.yaml"])
def test_check_agrees(work, target):
    result = invoke("check", work / target)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "forward vs reverse" in out
    assert "central FD" in out
    assert "manual vs central FD" in out      # the hand-written rule is checked too
    assert "MISMATCH" not in out
    assert "agree at 32 points" in out


def test_check_points_option(work):
    result = invoke("check", work / "cfg.yaml", "--points", 5)
    assert result.exit_code == 0, result.output
    assert "agree at 5 points" in result.stdout


def test_check_wrong_hand_written_derivative(work):
    write(work / "sq.yaml", "adgrad: 1\ninputs:\n  x: {shape: [3]}\noutputs:\n  E: sum(x**2)\n"
                            "derivatives:\n  dE_dx: -2*x\n")
    result = invoke("check", work / "sq.yaml")
    assert result.exit_code == 1, result.output
    rows = result.stdout.splitlines()
    assert any("forward vs reverse" in r and r.rstrip().endswith("ok") for r in rows)
    assert any("manual vs central FD" in r and "MISMATCH" in r for r in rows)
    assert any("forward vs central FD" in r and r.rstrip().endswith("ok") for r in rows)
    assert "out of tolerance" in result.stderr


def test_check_of_a_model_file_covers_the_tangent():
    """A model file alone: first derivatives, and the second derivative of a scalar output with
    respect to a small input (an energy's tangent), at F drawn about the identity."""
    result = invoke("check", ROOT / "configs" / "models" / "neo_hooke.yaml", "--points", 6)
    assert result.exit_code == 0, result.output
    rows = [r for r in result.stdout.splitlines() if r.startswith("d2W_dF_dF")]
    assert len(rows) == 3 and all(r.rstrip().endswith("ok") for r in rows)   # fwd vs rev, each vs FD


def test_sample_about_the_identity(work):
    out = work / "F.h5"
    result = invoke("sample", ROOT / "configs" / "models" / "neo_hooke.yaml", "-n", 500, "-o", out)
    assert result.exit_code == 0, result.output
    with h5py.File(out, "r") as f:
        F = f["F"][()]
        assert json.loads(f.attrs["sample"]) == {"F": [-0.1, 0.1, "identity"]}
    noise = F - np.eye(3)
    assert noise.min() >= -0.1 and noise.max() < 0.1 and np.linalg.det(F).min() > 0.5
    write(work / "bad.yaml", "adgrad: 1\ninputs:\n  x: {shape: [3], sample: {low: 0, high: 1, center: identity}}\n"
                             "outputs:\n  E: sum(x)\n")
    result = invoke("sample", work / "bad.yaml", "-n", 5, "-o", work / "x.h5")
    assert result.exit_code == 2 and "identity needs square matrices in the last two axes" in result.stderr
    assert f"{work / 'bad.yaml'}:3:" in result.stderr


def test_check_spec_error_exit_2(work):
    write(work / "model.yaml", "adgrad: 1\ninputs:\n  x: {shape: [100]}\noutputs:\n  E: sum(x) + rhoo**2\n")
    result = invoke("check", work / "model.yaml")
    assert result.exit_code == 2
    assert "unknown name 'rhoo'" in result.stderr


# ---- explain --------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["model.yaml", "cfg.yaml"])
def test_explain_everything(work, target):
    result = invoke("explain", work / target)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "input  x: f64[100]" in out
    assert "param  alpha: f64[]" in out
    assert "output E: f64[]" in out
    assert re.search(r"dE_dx: reverse \(.*reverse", out), out
    assert re.search(r"workspace: \d+ floats per thread", out)
    assert "# IR" in out and "output dE_dx = " in out
    assert "def point(" in out and "def batch(" in out


def test_explain_show_ir_only(work):
    result = invoke("explain", work / "cfg.yaml", "--show", "ir")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "input x: f64[100]" in out and "output dE_dx = " in out
    assert "def point(" not in out
    assert "workspace" not in out
    assert "model eam" not in out


def test_explain_mode_override(work):
    result = invoke("explain", work / "cfg.yaml", "--show", "cost", "--mode", "forward")
    assert result.exit_code == 0, result.output
    assert "dE_dx: forward" in result.stdout


def test_explain_unknown_part(work):
    result = invoke("explain", work / "cfg.yaml", "--show", "ir,bogus")
    assert result.exit_code == 2
    assert "bogus" in result.stderr


# ---- non-finite values ----------------------------------------------------------------------------

LOG_MODEL = "adgrad: 1\ninputs:\n  x: {shape: [3]}\noutputs:\n  E: sum(log(x))\n"
LOG_CONFIG = """\
adgrad: 1
model: logm.yaml
input: {path: login.h5}
output: {path: logout.h5}
compute:
  derivatives:
    - {of: E, wrt: x}
engine: {nan: NAN, chunk: 2}
"""


@pytest.fixture
def log_job(tmp_path):
    write(tmp_path / "logm.yaml", LOG_MODEL)
    x = np.random.default_rng(3).uniform(0.5, 2.0, size=(20, 3))
    x[3, 1] = -1.0                           # log(-1) = nan in row 3 only
    with h5py.File(tmp_path / "login.h5", "w") as f:
        f["x"] = x
    return tmp_path, x


def test_nan_error_names_row(log_job):
    d, x = log_job
    cfg = write(d / "cfg.yaml", LOG_CONFIG.replace("NAN", "error"))
    result = invoke("run", cfg)
    assert result.exit_code == 1, result.output
    assert "row 3" in result.stderr
    assert "Traceback" not in result.output
    with h5py.File(d / "logout.h5", "r") as f:         # stopped early: incomplete, finished chunks intact
        assert bool(f.attrs["complete"]) is False
        assert int(f.attrs["chunks_done"]) == 1
        np.testing.assert_allclose(f["E"][:2], np.log(x[:2]).sum(axis=1), rtol=1e-12)
        np.testing.assert_allclose(f["dE_dx"][:2], 1 / x[:2], rtol=1e-12)


def test_nan_propagate_counts(log_job):
    d, x = log_job
    cfg = write(d / "cfg.yaml", LOG_CONFIG.replace("NAN", "propagate"))
    result = invoke("run", cfg)
    assert result.exit_code == 0, result.output
    assert "non-finite points: 1" in result.stderr
    with h5py.File(d / "logout.h5", "r") as f:
        assert bool(f.attrs["complete"]) is True
        e = f["E"][()]
    assert np.isnan(e[3])
    ok = np.arange(20) != 3
    np.testing.assert_allclose(e[ok], np.log(x[ok]).sum(axis=1), rtol=1e-12)
