"""Kernels whose bodies engine/codegen/direct.py translates to LLVM IR against the same kernels compiled by
numba's front end (load.DIRECT = False): run time per point, interleaved in one process, and the bits.

    python benchmarks/direct.py [--repeats 15]

The translation exists for the cold compile (benchmarks/compile_times.py); this checks it costs no run time.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import cpu_model, print_command  # noqa: E402

from adgrad.engine import compile_model, load_model  # noqa: E402
from adgrad.engine.codegen import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# name: (model file, derivatives, inputs of m points, m)
CASES = {
    "EAM N=100, E + dE/dx": ("configs/eam_model.yaml", [("E", "x")], lambda r, m: {"x": r.random((m, 100))}, 20_000),
    "neo-Hooke W + P + A": ("configs/models/neo_hooke.yaml", [("W", "F"), ("W", ["F", "F"])],
                            lambda r, m: {"F": np.eye(3) + 0.1 * r.standard_normal((m, 3, 3))}, 100_000),
    "Ogden W + P + A": ("configs/models/ogden.yaml", [("W", "F"), ("W", ["F", "F"])],
                        lambda r, m: {"F": np.eye(3) + 0.1 * r.standard_normal((m, 3, 3))}, 50_000),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15, help="timed rounds (median)")
    args = ap.parse_args(argv)
    print_command()
    print(f"cpu: {cpu_model()}; ns per point, medians of {args.repeats} interleaved rounds of evaluate")
    print("| kernel | direct.py | numba's front end | ratio | same bits |\n|---|---:|---:|---:|---|")
    rng = np.random.default_rng(0)
    for name, (path, derivatives, make, m) in CASES.items():
        model, kernels = load_model(str(ROOT / path)), {}
        for direct in (True, False):
            load.DIRECT = direct
            kernels[direct] = compile_model(model, derivatives)
        load.DIRECT = True
        x = make(rng, m)
        outs = {d: k.evaluate(x) for d, k in kernels.items()}
        same = all(np.array_equal(outs[True][n], outs[False][n], equal_nan=True) for n in outs[True])
        times = {True: [], False: []}
        for _ in range(args.repeats):
            for d, k in kernels.items():
                t = time.perf_counter()
                k.evaluate(x)
                times[d].append(time.perf_counter() - t)
        a, b = (statistics.median(times[d]) / m * 1e9 for d in (True, False))
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.3f} | {same} |")


if __name__ == "__main__":
    main()
