"""Hostile but fair input: commands that would write over a file they read, or whose output path is not
a file, or whose input is not one. Each row: the files, the command, exit code 2, a phrase of the
message, no traceback, and no file that existed before changed (sha256) and no output left behind."""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]

from test_cli import CONFIG  # noqa: E402  (the CLI tests' config: model.yaml, in.h5, out.h5)


def workspace(tmp, out="out.h5"):
    shutil.copy(ROOT / "configs" / "eam_model.yaml", tmp / "model.yaml")
    (tmp / "config.yaml").write_text(CONFIG.replace("out.h5", out))
    with h5py.File(tmp / "in.h5", "w") as f:
        f["points"] = np.random.default_rng(0).random((20, 100))
    (tmp / "sub").mkdir()


def snapshot(tmp):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp.rglob("*") if p.is_file()}


def shards(tmp):
    """Two complete shard files of the run, for merge."""
    for i in range(2):
        res = CliRunner().invoke(cli, ["run", str(tmp / "config.yaml"), "--shard", f"{i}/2", "-q"])
        assert res.exit_code == 0, res.output
    return [tmp / "out.shard0of2.h5", tmp / "out.shard1of2.h5"]


def link(tmp, kind):
    target = tmp / "in.h5"
    if kind == "symlink":
        os.symlink(target, tmp / "alias.h5")
    else:
        os.link(target, tmp / "alias.h5")
    return "alias.h5"


# (id, setup(tmp) -> extra (after the workspace), args(tmp, extra), phrase); "=input" as setup: the
# config's output.path names the input
CASES = [
    ("run -o input", None, lambda t, e: ["run", t / "config.yaml", "-o", t / "in.h5", "--overwrite"],
     "would replace the input file"),
    ("run output.path = input", "=input", lambda t, e: ["run", t / "config.yaml", "--overwrite"],
     "would replace the input file"),
    ("run -o sub/../input", None, lambda t, e: ["run", t / "config.yaml", "-o", str(t / "sub") + "/../in.h5",
                                               "--overwrite"], "would replace the input file"),
    ("run -o config", None, lambda t, e: ["run", t / "config.yaml", "-o", t / "config.yaml", "--overwrite"],
     "would replace the config file"),
    ("run -o model", None, lambda t, e: ["run", t / "config.yaml", "-o", t / "model.yaml", "--overwrite"],
     "would replace the model file"),
    ("run -o symlink to input", lambda t: link(t, "symlink"),
     lambda t, e: ["run", t / "config.yaml", "-o", t / e, "--overwrite"], "would replace the input file"),
    ("run -o hard link to input", lambda t: link(t, "hard"),
     lambda t, e: ["run", t / "config.yaml", "-o", t / e, "--overwrite"], "would replace the input file"),
    ("run --resume -o input", None, lambda t, e: ["run", t / "config.yaml", "-o", t / "in.h5", "--resume"],
     "would replace the input file"),
    ("run -o directory", None, lambda t, e: ["run", t / "config.yaml", "-o", t / "sub", "--overwrite"],
     "is a directory"),
    ("run input is a FIFO", lambda t: (os.remove(t / "in.h5"), os.mkfifo(t / "in.h5")),
     lambda t, e: ["run", t / "config.yaml"], "not a regular file (a FIFO)"),
    ("sample -o model", None, lambda t, e: ["sample", t / "model.yaml", "-n", "5", "-o", t / "model.yaml", "--overwrite"],
     "would replace the model file"),
    ("sample config -o config", None,
     lambda t, e: ["sample", t / "config.yaml", "-n", "5", "-o", t / "config.yaml", "--overwrite"],
     "would replace the config file"),
    ("merge -o a shard", shards, lambda t, e: ["merge", e[0], *e, "--overwrite"], "would replace one of the shards"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_without_touching_any_file(tmp_path, case):
    _, setup, args, phrase = case
    workspace(tmp_path, "in.h5" if setup == "=input" else "out.h5")
    extra = setup(tmp_path) if callable(setup) else None
    before = snapshot(tmp_path)
    result = {}

    def invoke():
        result["r"] = CliRunner().invoke(cli, [str(a) for a in args(tmp_path, extra)])
    t = threading.Thread(target=invoke, daemon=True)     # a FIFO must not block the command
    t.start()
    t.join(60)
    assert not t.is_alive(), "the command hangs"
    r = result["r"]
    assert r.exit_code == 2, r.output
    assert phrase in r.output, r.output
    assert "Traceback" not in r.output
    assert snapshot(tmp_path) == before, "a file that existed before the command changed or appeared"


def test_virtual_dataset_with_a_missing_source_is_refused(tmp_path):
    workspace(tmp_path)
    paths = shards(tmp_path)
    res = CliRunner().invoke(cli, ["merge", str(tmp_path / "merged.h5"), *map(str, paths)])
    assert res.exit_code == 0, res.output
    # a config reading the merged (virtual) file as its input, after a shard went missing
    with h5py.File(tmp_path / "merged.h5", "r") as f:
        assert f["E"].is_virtual
    (tmp_path / "config2.yaml").write_text(CONFIG.replace("out.h5", "out2.h5").replace("in.h5", "merged.h5")
                                           .replace("{x: points}", "{x: dE_dx}"))
    os.remove(paths[1])
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "config2.yaml")])
    assert r.exit_code == 2 and "source file" in r.output and "is missing" in r.output, r.output
    assert not (tmp_path / "out2.h5").exists()


# ---- one error boundary: no traceback, one line, at any moment ------------------------------------------
def test_an_unexpected_exception_is_one_line_internal_error(tmp_path, monkeypatch):
    workspace(tmp_path)
    import adgrad.cli.run as cli_run

    def broken(*args, **kwargs):
        raise RuntimeError("something adgrad did not expect")
    monkeypatch.setattr(cli_run, "run_job", broken)
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "internal error: RuntimeError: something adgrad did not expect" in r.output
    monkeypatch.setenv("ADGRAD_DEBUG", "1")
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml")])
    assert r.exit_code == 1 and "Traceback" in r.output and "internal error" in r.output


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4, 1.0, 2.0])
def test_sigterm_at_any_moment_exits_cleanly(tmp_path, delay):
    """From the first instruction of main (imports, compile, the chunk loop): one line, exit 1 (0 if the
    run finished first), no traceback, the input untouched, and an output only if complete or
    resumable. (A signal in the first tens of milliseconds, while the interpreter itself starts and
    before main runs, gets Python's default: the process is killed; nothing was written then.)"""
    import signal
    import subprocess
    import sys
    import time
    workspace(tmp_path)
    before = snapshot(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", "from adgrad.cli.entry import main; main()", "run",
                          str(tmp_path / "config.yaml"), "--chunk", "2"], stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 1), (p.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    if p.returncode == 1:
        assert "SIGTERM" in err, err
    assert all(snapshot(tmp_path).get(f) == h for f, h in before.items())
    out = tmp_path / "out.h5"
    if out.exists():
        with h5py.File(out, "r") as f:
            assert bool(f.attrs["complete"]) == (p.returncode == 0)


def test_axis_none_as_documented_and_none_elsewhere_refused(tmp_path):
    """docs/model-language.md writes logsumexp(x, axis=None): it means every axis, as numpy's."""
    (tmp_path / "m.yaml").write_text("adgrad: 1\nname: lse\ninputs:\n  x: [2, 3]\noutputs:\n"
                                     "  y: logsumexp(x, axis=None)\n  z: sum(x, axis=None)\n")
    from adgrad.engine import api
    x = np.random.default_rng(0).normal(size=(4, 2, 3))
    out = api.compile_model(api.load_model(str(tmp_path / "m.yaml"))).evaluate({"x": x})
    np.testing.assert_allclose(out["y"], np.log(np.exp(x).sum(axis=(1, 2))), rtol=1e-14)
    np.testing.assert_allclose(out["z"], x.sum(axis=(1, 2)), rtol=1e-14)
    (tmp_path / "bad.yaml").write_text("adgrad: 1\nname: bad\ninputs:\n  x: [2]\noutputs:\n  y: sum(x) + None\n")
    r = CliRunner().invoke(cli, ["check", str(tmp_path / "bad.yaml")])
    assert r.exit_code == 2 and "None is only allowed as axis=None" in r.output


# ---- every input checked before the output exists ------------------------------------------------------
def _dataset(kind):
    def setup(t):
        with h5py.File(t / "in.h5", "w") as f:
            if kind == "complex":
                f["points"] = np.ones((20, 100), dtype=complex)
            elif kind == "string":
                f["points"] = np.array([["a" * 3] * 100] * 20, dtype="S3")
            else:
                f["points"] = np.zeros((20, 100), dtype=[("a", "f8"), ("b", "i4")])
    return setup


CHECKS = [  # (id, setup, args, env, phrase)
    ("complex input", _dataset("complex"), ["run", "{t}/config.yaml"], {}, "has dtype complex128"),
    ("string input", _dataset("string"), ["run", "{t}/config.yaml"], {}, "has dtype |S3"),
    ("compound input", _dataset("compound"), ["run", "{t}/config.yaml"], {}, "inputs are real numbers"),
    ("--chunk 10**30", None, ["run", "{t}/config.yaml", "--chunk", str(10 ** 30)], {}, "--chunk"),
    ("sample -n 0", None, ["sample", "{t}/model.yaml", "-n", "0", "-o", "{t}/s.h5"], {}, "-n"),
    ("SLURM task id abc", None, ["run", "{t}/config.yaml"],
     {"SLURM_ARRAY_TASK_ID": "abc", "SLURM_ARRAY_TASK_COUNT": "4"}, "is not an integer"),
    ("SLURM array with a step", None, ["run", "{t}/config.yaml"],
     {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
      "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_STEP": "2"}, "not a contiguous range"),
    ("SLURM array as a list", None, ["run", "{t}/config.yaml"],
     {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1",
      "SLURM_ARRAY_TASK_MAX": "7"}, "not a contiguous range"),
]


@pytest.mark.parametrize("case", CHECKS, ids=[c[0] for c in CHECKS])
def test_checked_before_the_output_exists(tmp_path, case):
    _, setup, args, env, phrase = case
    workspace(tmp_path)
    if setup:
        setup(tmp_path)
    before = snapshot(tmp_path)
    r = CliRunner().invoke(cli, [a.format(t=tmp_path) for a in args], env=env)
    assert r.exit_code == 2, r.output
    assert phrase in r.output and "Traceback" not in r.output, r.output
    assert snapshot(tmp_path) == before
    assert not list(tmp_path.glob("out*.h5")) and not (tmp_path / "s.h5").exists()


# ---- one writer per output ------------------------------------------------------------------------------
def test_a_second_writer_of_one_output_is_refused_and_a_stale_lock_taken_over(tmp_path):
    from adgrad.engine.store.lock import lock_path, output_lock
    workspace(tmp_path)
    out = tmp_path / "out.h5"
    with output_lock(out):              # another run holds the output
        r = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml")])
        assert r.exit_code == 2 and "another adgrad run is writing this output" in r.output, r.output
        assert f"pid {os.getpid()} on host" in r.output
        assert not out.exists()
    assert not Path(lock_path(out)).exists()
    Path(lock_path(out)).write_text("pid 999999 on host long-gone\n")     # its holder was killed
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml"), "-q"])
    assert r.exit_code == 0, r.output
    assert out.exists() and not Path(lock_path(out)).exists()


# ---- limits that a model file cannot exceed ---------------------------------------------------------------
def _limit_cases():
    bomb = ["  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"] + \
        [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return [
        ("alias bomb", "params:\n" + "\n".join(bomb) + "\noutputs:\n  y: x\n", "expands to more than"),
        ("deep YAML", "params:\n  p: " + "[" * 150 + "1" + "]" * 150 + "\noutputs:\n  y: x\n", "nested more than"),
        ("arange 1e9", "outputs:\n  y: x * sum(arange(0, 1000000000))\n", "more than the limit of"),
        ("outer 5000", "outputs:\n  y: sum(outer(x5000, x5000))\n", "more than the limit of"),
        ("20000-term sum", "outputs:\n  y: " + " + ".join(["x"] * 20000) + "\n", "nested too deeply"),
        ("5000 signs", "outputs:\n  y: " + "-" * 5000 + "x\n", "nested too deeply"),
        ("100000-term sum", "outputs:\n  y: " + " + ".join(["x"] * 100000) + "\n", "nested too deeply"),
    ]


@pytest.mark.parametrize("case", _limit_cases(), ids=lambda c: c[0])
def test_limits_refuse_in_seconds(tmp_path, case):
    import time
    _, body, phrase = case
    (tmp_path / "m.yaml").write_text("adgrad: 1\nname: lim\ninputs:\n  x: []\n  x5000: [5000]\n" + body)
    t0 = time.perf_counter()
    r = CliRunner().invoke(cli, ["check", str(tmp_path / "m.yaml")])
    assert time.perf_counter() - t0 < 20
    assert r.exit_code == 2 and phrase in r.output and "Traceback" not in r.output, r.output[-500:]


def test_a_long_written_out_sum_lowers_without_recursion(tmp_path):
    """Chains of operators are lowered in a loop: 1,500 terms (beyond Python's recursion limit of
    frames per term) load; only the parser's own limit (a few thousand) refuses longer ones."""
    from adgrad.engine import api
    from adgrad.engine.ir.interp import interpret
    terms = " + ".join(f"{k % 7} * x" for k in range(1500))
    (tmp_path / "m.yaml").write_text(f"adgrad: 1\nname: long\ninputs:\n  x: []\noutputs:\n  y: {terms}\n")
    model = api.load_model(str(tmp_path / "m.yaml"))
    y = interpret(model.graph, {"x": np.array(2.0)}, {})["y"]
    assert float(y) == 2.0 * sum(k % 7 for k in range(1500))


# ---- --overwrite is all or nothing -----------------------------------------------------------------------
def test_overwrite_keeps_the_old_results_until_the_new_run_completes(tmp_path, monkeypatch):
    """A disk that fills at the second chunk of an --overwrite run: the previous complete output stays
    as it was; --resume then finishes the staged run and replaces it, bit for bit a fresh run."""
    import errno

    from adgrad.engine.job import run as job
    from adgrad.engine.spec import load_config_file
    from adgrad.engine.store.output import OutputFile, staging_path
    workspace(tmp_path)
    out = tmp_path / "out.h5"
    cfg = load_config_file(str(tmp_path / "config.yaml"))
    job.run(cfg, chunk=4)
    old = hashlib.sha256(out.read_bytes()).hexdigest()
    real_write, calls = OutputFile.write, []

    def full_disk(self, slot, start, stop):
        calls.append(start)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, slot, start, stop)
    monkeypatch.setattr(OutputFile, "write", full_disk)
    with pytest.raises(job.JobError, match="keeps its previous results"):
        job.run(cfg, chunk=4, overwrite=True)
    monkeypatch.setattr(OutputFile, "write", real_write)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == old           # untouched
    stage = Path(staging_path(out))
    assert stage.exists()
    with h5py.File(stage, "r") as f:
        assert not f.attrs["complete"]
    summary = job.run(cfg, chunk=4, resume=True)
    assert summary.output == str(out) and not stage.exists()
    with h5py.File(out, "r") as f, h5py.File(tmp_path / "fresh.h5", "w"):
        assert f.attrs["complete"]
        E, g = f["E"][()], f["dE_dx"][()]
    job.run(cfg, output=str(tmp_path / "fresh.h5"), chunk=4, overwrite=True)
    with h5py.File(tmp_path / "fresh.h5", "r") as f:
        assert np.array_equal(f["E"][()], E) and np.array_equal(f["dE_dx"][()], g)


# ---- a full disk ----------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs, where the machine lets us mount one (root, mount available); else skipped."""
    import subprocess
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({(r.stderr or r.stdout).strip() or 'mount failed'})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def adgrad_process(*args):
    """The console entry point in a new process: real exit codes (a crash would be 139)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", "from adgrad.cli.entry import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_a_full_disk_gives_one_line_and_a_resumable_file(small_disk):
    d = small_disk
    workspace(d)
    with h5py.File(d / "in.h5", "w") as f:
        f["points"] = np.random.default_rng(0).random((1500, 100))      # 1.2 MB; the output needs 1.25 MB
    (d / "filler").write_bytes(b"\0" * 2_100_000)
    before = snapshot(d)
    r = adgrad_process("sample", d / "model.yaml", "-n", 20000, "-o", d / "s.h5")
    assert r.returncode == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (d / "s.h5").exists()
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]
    r = adgrad_process("run", d / "config.yaml", "--chunk", 100)
    assert r.returncode == 1 and "No space left on device" in r.stderr and "--resume" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert all(snapshot(d).get(f) == h for f, h in before.items())    # the input and the rest untouched
    (d / "filler").unlink()
    r = adgrad_process("run", d / "config.yaml", "--chunk", 100, "--resume")
    assert r.returncode == 0, r.stderr
    r = adgrad_process("run", d / "config.yaml", "--chunk", 100, "-o", d / "fresh.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(d / "out.h5", "r") as a, h5py.File(d / "fresh.h5", "r") as b:
        assert a.attrs["complete"] and np.array_equal(a["dE_dx"][()], b["dE_dx"][()])
