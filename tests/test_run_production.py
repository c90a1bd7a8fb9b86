"""Production `adgrad run`: signals, kill -9 and --resume, shards, exact sums, threads, NaN policy, memory.

One small model (4 inputs per point, two params) with a per-point gradient and two `reduce: sum`
param derivatives; its kernel compiles once into the disk cache, which the subprocesses reuse."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine.errors import JobError
from adgrad.engine.store.direct import DirectWriter, aligned_empty
from adgrad.engine.numeric.exactsum import ExactSum
from adgrad.engine.job.run import Interrupted
from adgrad.engine.job.run import run as run_job
from adgrad.engine.spec import load_config_file

ADGRAD = [sys.executable, "-c", "from adgrad.cli.main import cli; cli()"]   # `adgrad`, whatever the PATH
M = 6000

MODEL = """\
adgrad: 1
name: small
inputs:
  x: {shape: [4]}
params:
  a: [1.0, 2.0, 3.0, 4.0]
  c: 0.5
outputs:
  E: sum(a * exp(-c * x)) + c * sum(x**2)
"""

CONFIG = """\
adgrad: 1
model: model.yaml
input: {path: in.h5}
output: {path: out.h5}
compute:
  derivatives:
    - {of: E, wrt: x}
    - {of: E, wrt: a}
    - {of: E, wrt: a, reduce: sum}
    - {of: E, wrt: c, reduce: sum}
engine: {chunk: CHUNK}
"""
DEFAULT_HANDLERS = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}   # restored after a run
VOLATILE = {"started", "finished", "threads"}      # attributes that say when and how fast, not what


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def make_job(d: Path, chunk=10, m=M, seed=0):
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.yaml").write_text(MODEL)
    (d / "cfg.yaml").write_text(CONFIG.replace("CHUNK", str(chunk)))
    x = np.random.default_rng(seed).standard_normal((m, 4)) * 3
    with h5py.File(d / "in.h5", "w") as f:
        f["x"] = x
    return d / "cfg.yaml"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A job directory and its uninterrupted reference output (`ref.h5`)."""
    d = tmp_path_factory.mktemp("job")
    cfg = make_job(d)
    # Compile into the disk cache in another process first, so the subprocesses below start fast.
    subprocess.run(ADGRAD + ["run", str(cfg), "-o", str(d / "warm.h5"), "--shard", "0/600", "-q"], check=True)
    result = invoke("run", cfg, "-o", d / "ref.h5", "-q")
    assert result.exit_code == 0, result.output
    return cfg, d / "ref.h5"


def contents(path):
    """Every dataset (with /_adgrad) and every attribute but the volatile ones."""
    data = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: data.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        attrs = {k: v for k, v in f.attrs.items() if k not in VOLATILE}
    return data, attrs


def assert_same_file(a, b):
    (da, aa), (db, ab) = contents(a), contents(b)
    assert sorted(da) == sorted(db)
    for name in da:
        assert da[name].tobytes() == db[name].tobytes(), name      # bit for bit, NaN included
    assert aa.keys() == ab.keys()
    for k in aa:
        assert str(aa[k]) == str(ab[k]), k


def committed(path):
    """Chunks committed in a file another process is writing (raw reads need no lock)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            return int(f["_adgrad/commit"][()].max())
    except (OSError, KeyError):
        return 0


def interrupt_after(cfg, out, points, signum=signal.SIGTERM, **kw):
    """Run in this process and send ourselves `signum` once `points` points are done."""
    def progress(done, total):
        if done >= points:
            os.kill(os.getpid(), signum)
    with pytest.raises(Interrupted) as exc:
        run_job(load_config_file(str(cfg)), output=str(out), progress=progress, **kw)
    return str(exc.value)


# ---- signals, resume, kill -9 --------------------------------------------------------------------

def test_sigterm_stops_at_chunk_boundary_and_resume_finishes(job, tmp_path):
    cfg, ref = job
    out = tmp_path / "out.h5"
    proc = subprocess.Popen(ADGRAD + ["run", str(cfg), "-o", str(out)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while committed(out) < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "stopped by SIGTERM" in err and "marked incomplete" in err
    assert f"resume with: adgrad run {cfg} --resume -o {out}" in err
    with h5py.File(out, "r") as f:
        assert bool(f.attrs["complete"]) is False
        done = int(f.attrs["chunks_done"])
        assert 20 <= done < M // 10 and int(f["_adgrad/commit"][()].max()) == done
        np.testing.assert_array_equal(f["E"][: done * 10], h5py.File(ref, "r")["E"][: done * 10])

    result = invoke("run", cfg, "-o", out, "--resume")
    assert result.exit_code == 0, result.output
    assert f"resumed: {done * 10} were done" in result.stderr
    assert_same_file(out, ref)


def test_kill_9_at_random_moments_then_resume_is_bit_identical(job, tmp_path):
    cfg, ref = job
    out = tmp_path / "out.h5"
    rng = np.random.default_rng(4)
    # 20 kills: 4 at random moments of start-up (imports, kernel load, layout of the file), then 16 as
    # the runs pass random chunks (at a random moment of a commit)
    targets = [0] * 4 + sorted(rng.choice(np.arange(20, M // 10 - 20), 16, replace=False))
    for target in targets:
        proc = subprocess.Popen(ADGRAD + ["run", str(cfg), "-o", str(out), "--resume", "-q"],
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while target and committed(out) < target and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.004) if target else rng.uniform(0, 0.8))
        proc.kill()
        assert proc.wait() == -signal.SIGKILL, f"the run ended before its kill near chunk {target}"
        assert committed(out) >= target
    assert 0 < committed(out) < M // 10
    result = invoke("run", cfg, "-o", out, "--resume")
    assert result.exit_code == 0, result.output
    assert_same_file(out, ref)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_resume_in_process_after_stop(job, tmp_path, signum):
    cfg, ref = job
    out = tmp_path / "out.h5"
    message = interrupt_after(cfg, out, 2500, signum, threads=1)
    # the signal comes after chunk 250's commit, while chunk 251 computes and 252 waits behind it:
    # both are finished and committed, nothing more starts
    assert f"stopped by {signum.name} after 252 of 600 chunks (2520 of 6000 points)" in message
    assert signal.getsignal(signum) == DEFAULT_HANDLERS[signum]
    summary = run_job(load_config_file(str(cfg)), output=str(out), resume=True, threads=2)
    assert summary.computed == M - 2520 and summary.points == M
    assert_same_file(out, ref)


def test_a_signal_noted_before_the_run_stops_it(job, tmp_path, monkeypatch):
    """A signal whose exception Python dropped (raised in an import callback) is still honoured: the
    entry point noted it, and the run stops before writing anything."""
    from adgrad.engine.job import signals
    monkeypatch.setattr(signals, "PENDING", ["SIGTERM"])
    cfg, _ = job
    with pytest.raises(Interrupted, match="stopped by SIGTERM before the run started; nothing was written"):
        run_job(load_config_file(str(cfg)), output=str(tmp_path / "out.h5"))
    assert not (tmp_path / "out.h5").exists()


def test_resume_with_two_chunks_left(tmp_path):
    """Stopped at once, a run of 4 chunks keeps the 2 already started; the resume computes the last
    2 (fewer than the 3 slots, from chunk 2 on) and equals a run that was never stopped."""
    cfg = make_job(tmp_path, chunk=10, m=40)
    out = tmp_path / "out.h5"
    assert "after 2 of 4 chunks" in interrupt_after(cfg, out, 0)
    summary = run_job(load_config_file(str(cfg)), output=str(out), resume=True)
    assert summary.computed == 20
    run_job(load_config_file(str(cfg)), output=str(tmp_path / "ref.h5"))
    assert_same_file(out, tmp_path / "ref.h5")


@pytest.fixture
def stopped(tmp_path):
    """A job stopped after 30 of its 60 chunks: (config, output)."""
    cfg = make_job(tmp_path, m=600)
    interrupt_after(cfg, tmp_path / "out.h5", 300)
    return cfg, tmp_path / "out.h5"


@pytest.mark.parametrize("change, what", [
    (lambda d: (d / "in.h5").write_bytes((d / "in.h5").read_bytes()[:-8] + b"\x01" * 8), "input file"),
    (lambda d: make_job(d, m=600, seed=1), "input file"),
    (lambda d: (d / "model.yaml").write_text(MODEL + "# edited\n"), "model text"),
    (lambda d: (d / "model.yaml").write_text(MODEL.replace("c: 0.5", "c: 0.25")), "model text"),
    (lambda d: (d / "cfg.yaml").write_text(CONFIG.replace("CHUNK", "10") + "# edited\n"), "config text"),
])
def test_resume_refuses_changed_run(stopped, change, what):
    cfg, out = stopped
    before = out.read_bytes()
    change(cfg.parent)
    result = invoke("run", cfg, "--resume")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {out}: cannot resume: ") and what in result.stderr, result.stderr
    assert "--overwrite" in result.stderr
    assert out.read_bytes() == before


def rewrite_rows_keeping_mtime(path, rows):
    """Change input rows in place: the file's size, mtime and first and last MiB stay the same."""
    st = os.stat(path)
    with h5py.File(path, "r+") as f:
        f["x"][rows] = f["x"][rows] + 1e-9
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size


@pytest.fixture
def stopped_big(tmp_path):
    """A job of 6.4 MB of input (rows 33k..167k lie beyond the first and last MiB whose hash the
    file records) stopped after 120 of its 200 chunks: (config, output)."""
    cfg = make_job(tmp_path, chunk=1000, m=200_000)
    interrupt_after(cfg, tmp_path / "out.h5", 118_000)
    return cfg, tmp_path / "out.h5"


def test_resume_verifies_the_finished_chunks_input_rows(stopped_big):
    """Rows in the middle of the finished part changed (as a user rewriting the file with its mtime
    restored): --resume refuses, naming the rows, and leaves the file; --trust-input resumes anyway."""
    cfg, out = stopped_big
    rewrite_rows_keeping_mtime(cfg.parent / "in.h5", slice(60_345, 60_347))
    before = out.read_bytes()
    result = invoke("run", cfg, "--resume")
    assert result.exit_code == 2, result.output
    assert f"rows 60000..60999 of {cfg.parent / 'in.h5'} (dataset x) are not the rows" in result.stderr, result.stderr
    assert out.read_bytes() == before
    assert invoke("run", cfg, "--resume", "--trust-input", "-q").exit_code == 0
    with h5py.File(out, "r") as f:
        assert f.attrs["complete"] and f["_adgrad/input_digests"].shape == (200, 1)


def test_a_file_without_checksums_resumes_only_with_trust_input(stopped):
    """A file an adgrad before the checksums wrote: --resume says why it cannot verify; --trust-input
    finishes it, as a run never stopped would have."""
    cfg, out = stopped
    with h5py.File(out, "r+") as f:
        del f["_adgrad/input_digests"]
    result = invoke("run", cfg, "--resume")
    assert result.exit_code == 2 and "records no checksums" in result.stderr and "--trust-input" in result.stderr
    assert invoke("run", cfg, "--resume", "--trust-input", "-q").exit_code == 0
    run_job(load_config_file(str(cfg)), output=str(out.parent / "ref.h5"))
    with h5py.File(out, "r") as a, h5py.File(out.parent / "ref.h5", "r") as b:
        assert a.attrs["complete"] and a["dE_dx"][()].tobytes() == b["dE_dx"][()].tobytes()


def test_resume_does_not_check_unfinished_rows(stopped_big):
    """Rows after the finished chunks are computed on resume from the file as it is: changing them
    is no reason to refuse."""
    cfg, out = stopped_big
    rewrite_rows_keeping_mtime(cfg.parent / "in.h5", slice(150_000, 150_010))
    result = invoke("run", cfg, "--resume", "-q")
    assert result.exit_code == 0, result.output


def test_input_digests_add_over_pieces_and_see_positions():
    from adgrad.engine.numeric.checksum import digest
    x = np.random.default_rng(0).random((50, 3))
    assert (digest(x[:17]) + digest(x[17:], 17)) % 2 ** 64 == digest(x)
    assert digest(x[[1, 0, *range(2, 50)]]) != digest(x)       # two rows swapped
    y = x.copy()
    y[30, 1] = np.nextafter(y[30, 1], 2)
    assert digest(y) != digest(x)


def test_resume_refuses_other_chunk_and_complete_file(stopped):
    cfg, out = stopped
    result = invoke("run", cfg, "--resume", "--chunk", 20)
    assert result.exit_code == 2 and "points per chunk" in result.stderr, result.output
    assert invoke("run", cfg, "--resume").exit_code == 0
    result = invoke("run", cfg, "--resume")
    assert result.exit_code == 2 and "complete already" in result.stderr, result.output


def test_existing_output_needs_a_flag(stopped):
    cfg, out = stopped
    before = out.read_bytes()
    result = invoke("run", cfg)
    assert result.exit_code == 2
    assert "--overwrite" in result.stderr and "--resume" in result.stderr
    result = invoke("run", cfg, "--resume", "--overwrite")
    assert result.exit_code == 2 and "exclude each other" in result.stderr
    assert out.read_bytes() == before


def test_resume_without_a_file_starts_fresh(job, tmp_path):
    cfg, ref = job
    result = invoke("run", cfg, "-o", tmp_path / "new.h5", "--resume", "-q")
    assert result.exit_code == 0, result.output
    assert_same_file(tmp_path / "new.h5", ref)


def test_two_concurrent_runs_to_one_new_path_one_is_refused(job, tmp_path):
    """Started together, one run writes the file and the other exits 2: while the first holds the
    output's lock it is named, after it the file exists; the file is the one complete result."""
    cfg, ref = job
    out = tmp_path / "out.h5"
    procs = [subprocess.Popen(ADGRAD + ["run", str(cfg), "-o", str(out)], stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = sorted((p.wait(timeout=120), p.stderr.read()) for p in procs)
    assert [code for code, _ in results] == [0, 2], results
    refusal = results[1][1]
    assert "another adgrad run is writing this output" in refusal or "output file exists" in refusal, refusal
    assert_same_file(out, ref)


# ---- exact sums, threads, chunks, shards -------------------------------------------------------------

def test_threads_and_chunks_give_the_same_bits(job, tmp_path):
    cfg, ref = job
    for threads, chunk in [(1, 7), (2, 997), (2, M)]:
        out = tmp_path / f"t{threads}c{chunk}.h5"
        result = invoke("run", cfg, "-o", out, "--threads", threads, "--chunk", chunk, "-q")
        assert result.exit_code == 0, result.output
        (a, _), (b, _) = contents(out), contents(ref)
        for name in b:
            if not name.startswith("_adgrad/") or name.startswith("_adgrad/exact/"):
                assert a[name].tobytes() == b[name].tobytes(), (threads, chunk, name)


def _o_direct_works(directory):
    """Whether this file system takes aligned O_DIRECT writes (tmpfs, for one, may not)."""
    path = directory / "probe.bin"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
        try:
            return os.pwritev(fd, [aligned_empty((4096,), np.uint8)], 0) == 4096
        finally:
            os.close(fd)
    except OSError:
        return False


def test_whole_block_chunks_go_out_with_o_direct_and_equal_buffered_writes(job, tmp_path, monkeypatch):
    """With --chunk 2048 every HDF5 chunk is whole 4 KiB blocks: the rows go straight from the
    buffers to the file (O_DIRECT), the last HDF5 chunk partly past the end (M = 6000), and the file
    holds the bits that buffered writes give."""
    if not _o_direct_works(tmp_path):
        pytest.skip(f"the file system of {tmp_path} has no O_DIRECT; runs there write through h5py")
    cfg, ref = job
    taken = []
    write = DirectWriter.write
    monkeypatch.setattr(DirectWriter, "write", lambda self, *a: taken.append(write(self, *a)) or taken[-1])
    out = tmp_path / "direct.h5"
    result = invoke("run", cfg, "-o", out, "--chunk", 2048, "-q")
    assert result.exit_code == 0, result.output
    assert taken and all(taken)
    (a, _), (b, _) = contents(out), contents(ref)
    for name in b:
        if not name.startswith("_adgrad/") or name.startswith("_adgrad/exact/"):
            assert a[name].tobytes() == b[name].tobytes(), name


def test_reduced_sums_are_correctly_rounded(job):
    _, ref = job
    with h5py.File(ref, "r") as f:
        rows, total = f["dE_da"][()], f["dE_da_sum"][()]
        state = f["_adgrad/exact/dE_da_sum"][()]
        assert f["dE_dc_sum"].shape == () and f["_adgrad/exact/dE_dc_sum"].dtype == np.int64
    assert [total[j] for j in range(4)] == [math.fsum(rows[:, j]) for j in range(4)]
    np.testing.assert_array_equal(ExactSum.from_state(state).value(), total)


def test_shards_cover_the_full_run(job, tmp_path, monkeypatch):
    cfg, ref = job
    out = tmp_path / "out.h5"
    for i in range(3):
        result = invoke("run", cfg, "-o", out, "--shard", f"{i}/3", "-q")
        assert result.exit_code == 0, result.output
    full, _ = contents(ref)
    acc = {name: ExactSum(full[name].shape) for name in ("dE_da_sum", "dE_dc_sum")}
    pieces = {name: [] for name in ("E", "dE_dx", "dE_da")}
    for i in range(3):
        path = tmp_path / f"out.shard{i}of3.h5"
        data, attrs = contents(path)
        start, stop = i * M // 3, (i + 1) * M // 3
        assert (attrs["shard"], attrs["row_start"], attrs["row_stop"]) == (f"{i}/3", start, stop)
        assert (attrs["points"], attrs["input_points"], bool(attrs["complete"])) == (stop - start, M, True)
        for name in pieces:
            pieces[name].append(data[name])
        for name in acc:
            acc[name].merge(ExactSum.from_state(data[f"_adgrad/exact/{name}"]))
            np.testing.assert_array_equal(ExactSum.from_state(data[f"_adgrad/exact/{name}"]).value(), data[name])
    for name, parts in pieces.items():
        assert np.concatenate(parts).tobytes() == full[name].tobytes()
    for name, a in acc.items():
        assert a.value().tobytes() == full[name].tobytes()
        np.testing.assert_array_equal(a.state(), full[f"_adgrad/exact/{name}"])

    # inside a SLURM job array, the task picks the shard (task ids may start above 0)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    result = invoke("run", cfg, "-o", tmp_path / "slurm.h5", "-q")
    assert result.exit_code == 0, result.output
    assert contents(tmp_path / "slurm.shard1of3.h5")[0]["E"].tobytes() == pieces["E"][1].tobytes()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "8")
    result = invoke("run", cfg, "-o", tmp_path / "slurm.h5")
    assert result.exit_code == 2 and "contiguous --array" in result.stderr


@pytest.mark.parametrize("text", ["3/3", "1", "a/b", "-1/2"])
def test_bad_shard(job, tmp_path, text):
    cfg, _ = job
    result = invoke("run", cfg, "-o", tmp_path / "o.h5", "--shard", text)
    assert result.exit_code == 2 and "--shard" in result.stderr, result.output
    assert not list(tmp_path.iterdir())


# ---- NaN policy, messages --------------------------------------------------------------------------

def test_nan_error_names_global_row_and_input_dataset(tmp_path):
    cfg = make_job(tmp_path, m=300)
    with h5py.File(tmp_path / "in.h5", "r+") as f:
        f["x"][250, 2] = np.inf
    strict = tmp_path / "strict.yaml"
    strict.write_text(CONFIG.replace("{chunk: CHUNK}", "{chunk: 40, nan: error}"))
    with pytest.raises(JobError, match=r"row 250 in input dataset 'x'.* keeps the 2 chunk\(s\)"):
        run_job(load_config_file(str(strict)), shard="1/2")     # rows 150..299: row 250 is in chunk 2
    with h5py.File(tmp_path / "out.shard1of2.h5", "r") as f:
        assert (bool(f.attrs["complete"]), int(f.attrs["chunks_done"])) == (False, 2)

    result = invoke("run", cfg, "--overwrite")          # engine.nan: propagate (the default) counts it
    assert result.exit_code == 0 and "non-finite points: 1" in result.stderr, result.output
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert int(f.attrs["nan_points"]) == 1 and np.isnan(f["dE_dc_sum"][()])      # inf * 0 at row 250


def test_float32_output_counts_overflow_as_non_finite(tmp_path):
    cfg = make_job(tmp_path, m=300)
    with h5py.File(tmp_path / "in.h5", "r+") as f:
        f["x"][[5, 100], 0] = -200.0                     # exp(100) = 2.7e43: finite, but not in float32
    invoke("run", cfg, "-o", tmp_path / "f64.h5", "-q")
    (tmp_path / "f32.yaml").write_text(cfg.read_text().replace("{path: out.h5}", "{path: f32.h5, dtype: float32}"))
    result = invoke("run", tmp_path / "f32.yaml", "--chunk", 64)
    assert result.exit_code == 0 and "non-finite points: 2" in result.stderr, result.output
    with h5py.File(tmp_path / "f32.h5", "r") as f, h5py.File(tmp_path / "f64.h5", "r") as r, \
            np.errstate(over="ignore"):
        assert int(r.attrs["nan_points"]) == 0 and int(f.attrs["nan_points"]) == 2
        for name in ("E", "dE_dx", "dE_da"):
            assert f[name].dtype == np.float32
            assert f[name][()].tobytes() == r[name][()].astype(np.float32).tobytes()
        assert np.isinf(f["E"][[5, 100]]).all()


def test_verbose_reports_phases_and_threads(job, tmp_path):
    cfg, _ = job
    result = invoke("run", cfg, "-o", tmp_path / "o.h5", "-v", "--threads", 1)
    assert result.exit_code == 0, result.output
    for word in ("compile", "read", "compute", "write", "wait", "threads: 1"):
        assert word in result.stderr
    result = invoke("run", cfg, "-o", tmp_path / "q.h5", "-q", "--progress")
    assert result.exit_code == 0 and result.output == ""


# ---- bounded memory ---------------------------------------------------------------------------------

# `adgrad` that reports its peak RSS as it exits. (A child's ru_maxrss from wait4 is no good: Linux
# carries the parent's peak over into it when the child execs.)
PEAK_RSS = ("import atexit, sys; from adgrad.cli.main import cli; atexit.register(lambda: sys.stderr.write("
            "next(line for line in open('/proc/self/status') if line.startswith('VmHWM')))); cli()")


def peak_rss_mib(d: Path, m, width=32, engine="engine: {chunk: 4096}\n", *options):
    """Peak resident memory of `adgrad run OPTIONS` over m points of `width` inputs (value and
    gradient of sum(exp(-x))), and the chunk it chose."""
    d.mkdir()
    (d / "model.yaml").write_text(f"adgrad: 1\ninputs:\n  x: {{shape: [{width}]}}\noutputs:\n  E: sum(exp(-x))\n")
    (d / "cfg.yaml").write_text("adgrad: 1\nmodel: model.yaml\ninput: {path: in.h5}\noutput: {path: out.h5}\n"
                                "compute: {derivatives: [{of: E, wrt: x}]}\n" + engine)
    with h5py.File(d / "in.h5", "w") as f:
        f.create_dataset("x", shape=(m, width), dtype="f8", fillvalue=0.5)
    result = subprocess.run([sys.executable, "-c", PEAK_RSS, "run", str(d / "cfg.yaml"), "-q", *options],
                            capture_output=True, text=True, check=True)
    with h5py.File(d / "out.h5", "r") as f:
        assert f.attrs["complete"] and f["dE_dx"].shape == (m, width)
        chunk = int(f.attrs["chunk"])
    return int(result.stderr.split()[-2]) / 1024, chunk


def test_peak_memory_does_not_grow_with_points(tmp_path):
    peak_rss_mib(tmp_path / "warm", 10)                 # compile into the cache first
    (small, _), (large, _) = peak_rss_mib(tmp_path / "small", 25_000), peak_rss_mib(tmp_path / "large", 250_000)
    # 250,000 points hold 64 MB of input and 66 MB of results, which a run holding the file would
    # add; a streaming run's peak is the same within a few MB (measured: 0.1 MB apart)
    assert large - small < 8, f"peak RSS grew by {large - small:.1f} MiB from 25,000 to 250,000 points"


def peak_rss_budget_mib(d: Path, m, memory):
    """Peak RSS and chunk of a run over points of 1000 inputs (8 KB in, 8 KB out) without engine.chunk."""
    return peak_rss_mib(d, m, 1000, "", "--memory", memory)


def test_the_chunk_follows_the_memory_budget(tmp_path):
    """Without engine.chunk a chunk is as many points as fit --memory (47 KiB per point here), and the
    run's peak memory follows: a budget of 8 MiB peaks within a few MiB of a run of 10 points."""
    base, _ = peak_rss_budget_mib(tmp_path / "warm", 10, "8MiB")
    small, chunk = peak_rss_budget_mib(tmp_path / "small", 6000, "8MiB")
    assert chunk == (8 << 20) // (3 * (8 * 1000 + 8 * 1001))
    large, chunk = peak_rss_budget_mib(tmp_path / "large", 6000, "96MiB")
    assert chunk == (96 << 20) // (3 * (8 * 1000 + 8 * 1001))
    assert small - base < 8 + 4, f"a budget of 8 MiB peaked {small - base:.1f} MiB above a run of 10 points"
    assert 60 < large - small < 96, f"a budget of 96 MiB peaked {large - small:.1f} MiB above one of 8 MiB"


def test_a_chunk_beyond_the_memory_budget_is_refused(job, tmp_path):
    cfg, _ = job
    out = tmp_path / "o.h5"
    result = invoke("run", cfg, "-o", out, "--chunk", 100_000, "--memory", "4 MiB")
    assert result.exit_code == 2, result.output
    assert "a chunk of 100,000 points (--chunk) needs 33.6 MiB of buffers (352 bytes per point" in result.stderr, \
        result.stderr
    assert not out.exists()
    result = invoke("run", cfg, "-o", out, "--memory", "4")
    assert result.exit_code == 2 and "Invalid value for '--memory': must be from 1 MiB" in result.output
    (tmp_path / "c.yaml").write_text(cfg.read_text().replace("engine: {chunk: 10}", "engine: {memory: lots}")
                                     .replace("model.yaml", str(cfg.parent / "model.yaml")))
    result = invoke("run", tmp_path / "c.yaml", "-o", out)
    assert result.exit_code == 2 and "c.yaml:" in result.stderr and "engine.memory: must be a size" in result.stderr
