"""What `--resume` pays to verify the input of the finished chunks, and what the checksums cost a run.

On M EAM points (configs/eam_model.yaml, 100 inputs per point: 800 bytes), sampled into a temporary
directory: a whole `adgrad run`; a run stopped at half way (SIGTERM from its progress callback); then,
interleaved, the verification alone (engine/job/resume.py verify_input over the finished half) and the
checksum of the same rows alone (engine/numeric/checksum.py), both reading an input that is in the
page cache (a cold input adds a read of the finished part at the disk's speed).

    python benchmarks/resume.py [--points 1000000] [--repeats 5]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

from adgrad.engine.job.pipeline import Plan, input_digests
from adgrad.engine.job.resume import verify_input
from adgrad.engine.job.run import Interrupted, prepare, run
from adgrad.engine.spec import load_config_file
from adgrad.engine.store.input import InputReader
from adgrad.engine.store.output import OutputFile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "adgrad: 1\nmodel: {model}\ninput: {{path: in.h5, datasets: {{x: x}}}}\noutput: {{path: out.h5}}\n" \
         "compute: {{values: [E], derivatives: [{{of: E, wrt: x}}]}}\nengine: {{chunk: 16384}}\n"


def stopped_run(cfg, out, m):
    """out: a run of cfg stopped once half of its m points are done."""
    def progress(done, total):
        if done >= m // 2:
            os.kill(os.getpid(), signal.SIGTERM)
    try:
        run(load_config_file(cfg), output=out, progress=progress)
    except Interrupted as exc:
        print(f"stopped run: {exc}".split(";")[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    m = args.points
    print("command: " + " ".join([sys.executable] + sys.argv))
    with tempfile.TemporaryDirectory() as d:
        with h5py.File(os.path.join(d, "in.h5"), "w") as f:
            f["x"] = np.random.default_rng(0).random((m, 100))
        cfg = os.path.join(d, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(model=os.path.join(ROOT, "configs", "eam_model.yaml")))
        subprocess.run([sys.executable, "-m", "adgrad.cli.entry", "run", cfg, "-o", os.path.join(d, "w.h5"),
                        "-q"], check=True)                                   # compile into the cache
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "adgrad.cli.entry", "run", cfg, "-q", "--overwrite"], check=True)
        whole = time.perf_counter() - t0
        stopped_run(cfg, os.path.join(d, "half.h5"), m)
        config = load_config_file(cfg)
        _, kernel, _ = prepare(config)
        out = OutputFile.open(os.path.join(d, "half.h5"))
        reader = InputReader(config.input.path, {"x": "x"}, {"x": (100,)})
        plan = Plan(0, m, int(out.attrs["chunk"]))
        rows = min(out.done * plan.chunk, m)
        x = reader.read(0, m)["x"]
        verify, digest = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            verify_input(out, reader, plan, ["x"], lambda: False)
            verify.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for k in range(plan.chunks):            # what a whole run computes
                a, b = plan.bounds(k)
                input_digests({"x": x[a:b]}, ["x"])
            digest.append(time.perf_counter() - t0)
        reader.close()
        out.close()
    gb, gb_all = rows * 800 / 1e9, m * 800 / 1e9
    v, c = statistics.median(verify), statistics.median(digest)
    print(f"\n{m:,} EAM points; finished part: {rows:,} points ({gb:.2f} GB of input), median of {args.repeats}")
    print(f"{'what':<52}{'seconds':>10}{'GB/s':>8}{'of a whole run':>16}")
    print(f"{'whole adgrad run (a process, kernel cached)':<52}{whole:>10.3f}{'':>8}{1:>16.3f}")
    print(f"{'--resume verification of the finished part':<52}{v:>10.3f}{gb / v:>8.1f}{v / whole:>16.3f}")
    print(f"{'checksums of every chunk, rows in memory':<52}{c:>10.3f}{gb_all / c:>8.1f}{c / whole:>16.3f}")


if __name__ == "__main__":
    main()
