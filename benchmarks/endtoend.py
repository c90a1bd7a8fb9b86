"""End-to-end `adgrad run` against compute only, and peak memory of a large run.

EAM (configs/eam_model.yaml: 100 inputs per point, value E and gradient dE/dx), M points uniform
in [0, 1) (seed 20261122, like data/make_eam_points.py) written to a temporary HDF5 file:
  adgrad run      the whole job in this process: config, kernel from the disk cache, streamed
                  read -> compute -> write of every chunk, commits, the finished output file
  compute only    kernel.evaluate on the same chunks of the same points, already in memory, into
                  preallocated outputs: what the job would reach if I/O were free
  I/O only        `adgrad run` with the kernel call skipped: what the job would take if computing were
                  free (on 2 cores, run ~ compute only + I/O only says the two do not overlap)
Medians of --repeats runs, interleaved, after one warm-up of each; ratio = run / compute-only
throughput (the issue asks for >= 0.70). CPU seconds (user + system, all threads) show the work
each path does whatever else runs on the machine. The pipeline's phase timings of the last run follow.

--memory-points M2 (default 5,000,000) then writes a second input of M2 points and reports the
peak resident memory (VmHWM) of `adgrad run` on it in a subprocess (the issue asks < 1 GB);
it needs about 16 bytes * 100 * M2 of disk (input and output). --memory-points 0 skips it.

    python benchmarks/endtoend.py                        # 1,000,000 points, 5 repeats, 5,000,000 for memory
    python benchmarks/endtoend.py --points 200000 --memory-points 0   # quick
    python benchmarks/endtoend.py --threads 1 --memory-points 0       # I/O gets a core of its own
    python benchmarks/endtoend.py --dtype float32 --memory-points 0   # half the bytes written
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numba
import numpy as np

from adgrad.engine.api import CompiledKernel
from adgrad.engine.job.run import prepare
from adgrad.engine.job.run import run as run_job
from adgrad.engine.spec import load_config_file

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "configs" / "eam_model.yaml"
SEED, N, BLOCK = 20261122, 100, 100_000

CONFIG = """\
adgrad: 1
model: {model}
input: {{path: {input}, datasets: {{x: points}}}}
output: {{path: {output}, dtype: {dtype}}}
compute:
  values: [E]
  derivatives:
    - {{of: E, wrt: x}}
engine: {{chunk: {chunk}, threads: 0}}
"""


def write_points(path, m):
    """m EAM points, streamed in blocks of BLOCK rows (the values do not depend on BLOCK)."""
    rng = np.random.default_rng(SEED)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("points", shape=(m, N), dtype="f8", chunks=(min(m, 4096), N))
        for a in range(0, m, BLOCK):
            b = min(m, a + BLOCK)
            ds[a:b] = rng.random((b - a, N))


def write_config(d, name, points_file, chunk, dtype="float64"):
    path = d / f"{name}.yaml"
    path.write_text(CONFIG.format(model=MODEL, input=points_file, output=d / f"{name}_out.h5", chunk=chunk,
                                  dtype=dtype))
    return path


def cpu_seconds():
    """User + system CPU time of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, *args, **kw):
    """(wall seconds, CPU seconds, result) of fn(*args, **kw)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = fn(*args, **kw)
    return time.perf_counter() - t0, cpu_seconds() - c0, result


def io_only(config, threads):
    """`adgrad run` with the kernel call skipped: every read, write and commit of the job, rows of
    whatever the buffers hold. What the job would take if computing were free."""
    compute = CompiledKernel.compute
    CompiledKernel.compute = lambda self, inputs, outputs, workspace, nonfinite=None, params=None: \
        nonfinite.fill(False) if nonfinite is not None else None
    try:
        return run_job(config, threads=threads)
    finally:
        CompiledKernel.compute = compute


def compute_only(kernel, x, chunk, outs, threads):
    for a in range(0, len(x), chunk):
        b = min(len(x), a + chunk)
        kernel.evaluate({"x": x[a:b]}, out={n: o[a:b] for n, o in outs.items()}, threads=threads)


# `adgrad` that reports its peak RSS (VmHWM) as it exits; a child's ru_maxrss would include this
# process's peak, which Linux carries over into a child when it execs
PEAK_RSS = ("import atexit, sys; from adgrad.cli.main import cli; atexit.register(lambda: sys.stderr.write("
            "next(line for line in open('/proc/self/status') if line.startswith('VmHWM')))); cli()")


def peak_rss(config):
    """Seconds and peak resident MiB of `adgrad run CONFIG --overwrite` in a fresh process."""
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", PEAK_RSS, "run", str(config), "-q", "--overwrite"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"adgrad run {config} failed: {result.stderr}")
    return time.perf_counter() - t0, int(result.stderr.split()[-2]) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="numba threads for both paths (0 = all cores)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="output.dtype of the run")
    ap.add_argument("--memory-points", type=int, default=5_000_000)
    ap.add_argument("--dir", default=None, help="where the temporary files go (default: the system temp dir)")
    args = ap.parse_args()

    d = Path(tempfile.mkdtemp(prefix="adgrad-endtoend-", dir=args.dir))
    try:
        points = d / "points.h5"
        write_points(points, args.points)
        config = load_config_file(str(write_config(d, "run", points, args.chunk, args.dtype)))
        _, kernel, _ = prepare(config)
        with h5py.File(points, "r") as f:
            x = f["points"][()]
        outs = {n: np.empty((args.points,) + s) for n, s in kernel.output_shapes.items()}

        threads = args.threads or numba.config.NUMBA_NUM_THREADS
        run_job(config, overwrite=True, threads=threads)        # warm-up: kernel cache, page cache
        compute_only(kernel, x, args.chunk, outs, threads)
        times = {"compute only": [], "I/O only": [], "adgrad run": []}
        for _ in range(args.repeats):
            os.remove(config.output.path)               # each run writes a new file, as a user's would
            times["I/O only"].append(timed(io_only, config, threads)[:2])
            os.remove(config.output.path)
            *run_times, summary = timed(run_job, config, threads=threads)
            times["adgrad run"].append(run_times)
            times["compute only"].append(timed(compute_only, kernel, x, args.chunk, outs, threads)[:2])
        with h5py.File(summary.output, "r") as f:      # the job wrote what the kernel computes
            assert np.array_equal(f["E"][()], outs["E"].astype(args.dtype))
            assert np.array_equal(f["dE_dx"][-1000:], outs["dE_dx"][-1000:].astype(args.dtype))

        print(f"EAM, N = {N}, M = {args.points:,} points, chunk {args.chunk}, {args.dtype} output, {threads} compute threads, "
              f"{args.repeats} repeats")
        print("| path | seconds (median) | spread | points/s | / compute only | CPU seconds (median) |")
        print("|---|---:|---:|---:|---:|---:|")
        base = statistics.median(w for w, _ in times["compute only"])
        for name, pairs in times.items():
            walls = [w for w, _ in pairs]
            med = statistics.median(walls)
            print(f"| {name} | {med:.3f} | {(max(walls) - min(walls)) / med:.0%} | {args.points / med:,.0f} | "
                  f"{base / med:.2f} | {statistics.median(c for _, c in pairs):.3f} |")
        t = summary.timings
        print("last run's phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in t.items())
              + f"; wall {summary.seconds:.3f}")
        del x, outs

        if args.memory_points:
            big = d / "big.h5"
            write_points(big, args.memory_points)
            seconds, rss = peak_rss(write_config(d, "big", big, args.chunk, args.dtype))
            print(f"memory: adgrad run over {args.memory_points:,} points (chunk {args.chunk}): peak RSS "
                  f"{rss:,.0f} MiB, {seconds:.1f} s wall ({args.memory_points / seconds:,.0f} points/s incl. start-up)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
