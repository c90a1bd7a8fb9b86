"""felupe material benchmark: adgrad.felupe.Material against felupe's own NeoHooke, and the per-call
overhead of CompiledKernel.evaluate against points per call.

Material evaluation: one felupe material evaluation is gradient(x) + hessian(x) at x = [F, statevars],
F (3, 3, q, c) with q = 8 quadrature points per cell (a hexahedron's), as felupe's SolidBody calls
them in every Newton iteration, with felupe's out= arrays (the previous results) passed back:
  adgrad material          Material("configs/models/neo_hooke.yaml"): P and A written by the kernels
                           in felupe's layout (the strided driver), no full-size copy; both lanes
                           kernels (compile_model's points_last), each entry's 32 points one run
  adgrad rows + transpose  the same kernels' point-first results (M, 3, 3) and (M, 3, 3, 3, 3) moved
                           into felupe's layout by numpy (np.copyto of a moveaxis view: what a
                           point-first kernel costs felupe; the adapter avoids it)
  felupe NeoHooke          felupe.NeoHooke(mu=1, bulk=2), its closed form in numpy, chunks of 8192
                           points (felupe's default), serial
  felupe NeoHooke parallel the same with parallel=True (felupe's thread pool over the chunks)
  floor: write A           the cost of the material's output alone: every entry of A (81 a point) written
                           once in felupe's layout, A[k, i] = F[k % 9, i] / 2, by a numba driver taking
                           blocks of 32 points from the shared counter on the same threads as adgrad's
                           (kernel.run_rows), each entry's 32 points one contiguous run
Each is the median of --repeats interleaved rounds after one warm-up call; before timing, adgrad's P
and A must equal felupe's to 1e-10 (norm-wise per point).

Overhead: evaluate({"F": F}, out=buffers) of neo_hooke's P+A kernel at 1, 16, 256, 4096, 65536 points
per call (point-first rows), against the kernel's compute alone (its driver called directly with the
arrays prepared, with the thread count evaluate uses: one below serial_below = 1024 points); the
difference is evaluate's own cost. "always parallel" is evaluate with serial_below = 0: every call
runs on all threads (engine/kernel.py run_threads), as every call did before the serial path.

    python benchmarks/felupe_material.py              # 65,536 cells x 8 points = 524,288 points
    python benchmarks/felupe_material.py --quick      # 8,192 cells x 8 points
The issue's targets: the adapter >= 4x faster than felupe's material at 512k points; evaluate's
overhead on 256 points < 50 us above the kernel's compute; the material (gradient + hessian) within
1.5x the floor of writing A (issue 29).
"""
import argparse
import statistics
import time
from pathlib import Path

import felupe as fem
import numba
import numpy as np

from _harness import SPREAD_NOTE, check_error, environment, start, time_calls
from adgrad.engine import compile_model, load_model
from adgrad.engine.kernel import NO_FLAGS, run_rows
from adgrad.engine.numeric.scalar import fetch_add
from adgrad.felupe import Material, trailing

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "configs" / "models" / "neo_hooke.yaml"
Q = 8
TARGET_FELUPE = 4.0
TARGET_OVERHEAD_US = 50.0
TARGET_FLOOR = 1.5
SIZES = (1, 16, 256, 4096, 65536)


def points(cells, seed=0):
    rng = np.random.default_rng(seed)
    return np.ascontiguousarray(np.eye(3)[:, :, None, None] + 0.1 * rng.standard_normal((3, 3, Q, cells)))


def rel_err(a, b, shape):
    a, b = (trailing(x, shape).reshape(-1, int(np.prod(shape))) for x in (a, b))
    ref = np.linalg.norm(b, axis=1)
    return float((np.linalg.norm(a - b, axis=1) / np.maximum(ref, 1e-3 * np.median(ref))).max())


@numba.njit(nogil=True, cache=False)
def write_a(next_row, block, F, A):
    """The floor: A (81, m) written once, entry by entry, in runs of 32 points, from F (9, m)."""
    m = F.shape[1]
    lo = fetch_add(next_row, block)
    while lo < m:
        hi = min(lo + block, m)
        for s in range(lo, hi, 32):
            n = min(32, hi - s)
            for k in range(81):
                for b in range(n):
                    A[k, s + b] = F[k % 9, s + b] * 0.5
        lo = fetch_add(next_row, block)


def material_runners(umat, cells):
    """name -> (fn(x), None): one gradient + hessian each, with felupe's out= arrays kept between calls."""
    shape_p, shape_a = (3, 3, Q, cells), (3, 3, 3, 3, Q, cells)
    bufs = {"adgrad": [np.empty(shape_p), np.empty(shape_a)], "rows": [np.empty(shape_p), np.empty(shape_a)]}
    grad, hess = umat.kernels["gradient"], umat.kernels["hessian"]
    rows_p, rows_a = np.empty((Q * cells, 3, 3)), np.empty((Q * cells, 3, 3, 3, 3))

    def adgrad(x):
        P, A = bufs["adgrad"]
        umat.gradient(x, out=P)
        umat.hessian(x, out=A)

    def rows(x):
        P, A = bufs["rows"]
        F = np.ascontiguousarray(trailing(x[0], (3, 3)))
        grad.evaluate({"F": F}, out={umat.P: rows_p})
        np.copyto(trailing(P, (3, 3)), rows_p)
        hess.evaluate({"F": F}, out={umat.A: rows_a})
        np.copyto(trailing(A, (3, 3, 3, 3)), rows_a)

    def felupe_of(parallel):
        nh = fem.NeoHooke(mu=1.0, bulk=2.0, parallel=parallel)
        return lambda x: (nh.gradient(x), nh.hessian(x))

    floor_a = np.empty((81, Q * cells))
    threads = umat.threads or numba.get_num_threads()

    def floor(x):
        F = x[0].reshape(9, -1)
        run_rows(lambda next_row, block, w: write_a(next_row, block, F, floor_a), F.shape[1], threads)
    return {"adgrad material": (adgrad, None), "adgrad rows + transpose": (rows, None),
            "felupe NeoHooke": (felupe_of(False), None), "felupe NeoHooke parallel": (felupe_of(True), None),
            "floor: write A": (floor, None)}


def check_agreement(umat, cells):
    x = [points(min(cells, 2048), seed=1), np.zeros((0, Q, min(cells, 2048)))]
    nh = fem.NeoHooke(mu=1.0, bulk=2.0)
    P, A = umat.gradient(x)[0], umat.hessian(x)[0]
    check_error("P vs felupe", rel_err(P, nh.gradient(x)[0], (3, 3)), 1e-10)
    check_error("A vs felupe", rel_err(A, nh.hessian(x)[0], (3, 3, 3, 3)), 1e-10)


def median_call(fn, seconds=0.3, most=2000):
    """Median seconds of fn() over calls filling about `seconds` (at least 5, at most `most`)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    ts = []
    for _ in range(int(min(most, max(5, seconds / max(once, 1e-7))))):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def overhead_table(kernel, threads):
    """| points | evaluate (us) | compute alone (us) | overhead (us) | always parallel (us) |"""
    rng = np.random.default_rng(2)
    rows_out = []
    for m in SIZES:
        F = np.eye(3) + 0.1 * rng.standard_normal((m, 3, 3))
        out = {n: np.empty((m, *s)) for n, s in kernel.output_shapes.items()}
        evaluate = median_call(lambda: kernel.evaluate({"F": F}, out=out))
        below = kernel.serial_below
        kernel.serial_below = 0
        try:
            parallel = median_call(lambda: kernel.evaluate({"F": F}, out=out))
        finally:
            kernel.serial_below = below
        workers = 1 if m < kernel.serial_below else min(threads, m)
        ws = kernel.workspace(workers)
        F_rows = np.ascontiguousarray(F.reshape(m, 9))
        F_rows.flags.writeable = False
        args = (F_rows, *kernel.param_rows(), *[out[n].reshape(m, -1) for n in kernel.graph.outputs])
        batch = kernel.module.batch
        compute = median_call(lambda: run_rows(lambda r, block, w: batch(r, block, *args, ws[w], NO_FLAGS), m, workers))
        rows_out.append((m, evaluate, compute, parallel))
    return rows_out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, M = start(p, argv, 65536 * Q, 8192 * Q, "print the P+A kernel source")
    cells = M // Q
    threads = numba.get_num_threads()
    t0 = time.perf_counter()
    umat = Material(MODEL, threads=threads)
    print(f"  Material(neo_hooke.yaml): {time.perf_counter() - t0:.2f} s (two compile_model, cached or not); "
          f"lanes kernels: {', '.join(n for n, k in umat.kernels.items() if k.lanes) or 'none'}")
    check_agreement(umat, cells)
    x = [points(cells), np.zeros((0, Q, cells))]
    timed = time_calls(material_runners(umat, cells), (x,), args.repeats)
    for name, (warm, _, _) in timed.items():
        print(f"  {name}: first call {warm:.3f} s")
    print("\n" + environment())
    print(f"\nneo-Hooke (mu 1, bulk 2) material evaluation (gradient + hessian), {cells:,} cells x {Q} points "
          f"= {M:,} points, {args.repeats} rounds")
    print("\n| M | material | s per evaluation (median) | spread | felupe NeoHooke / this |")
    print("|---:|---|---:|---:|---:|")
    fe = timed["felupe NeoHooke"][1]
    for name, (_, med, spread) in timed.items():
        print(f"| {M:,} | {name} | {med:.4f} | {spread:.0%} | {fe / med:.2f} |")
    print(SPREAD_NOTE)
    ratio = fe / timed["adgrad material"][1]
    best = min(fe, timed["felupe NeoHooke parallel"][1]) / timed["adgrad material"][1]
    print(f"target: felupe NeoHooke / adgrad material >= {TARGET_FELUPE:.0f}: {ratio:.2f} "
          f"({best:.2f} against felupe's faster variant) -> {'met' if ratio >= TARGET_FELUPE else 'MISSED'}")
    floor, material = timed["floor: write A"][1], timed["adgrad material"][1]
    print(f"floor of writing A in felupe's layout: {floor / M * 1e9:.1f} ns/point; the material "
          f"{material / M * 1e9:.1f} ns/point")
    print(f"target: adgrad material / floor <= {TARGET_FLOOR}: {material / floor:.2f} -> "
          f"{'met' if material / floor <= TARGET_FLOOR else 'MISSED'}")

    pa = compile_model(load_model(MODEL), [("W", "F"), ("W", ["F", "F"])])
    table = overhead_table(pa, threads)
    print(f"\nevaluate's cost per call, neo-Hooke W + P + A, point-first out= reused, {threads} threads "
          f"(serial below {pa.serial_below} points)")
    print("\n| points per call | evaluate (us) | compute alone (us) | overhead (us) | always parallel (us) |")
    print("|---:|---:|---:|---:|---:|")
    for m, ev, comp, par in table:
        print(f"| {m:,} | {ev * 1e6:.1f} | {comp * 1e6:.1f} | {(ev - comp) * 1e6:.1f} | {par * 1e6:.1f} |")
    over = next((ev - comp) for m, ev, comp, _ in table if m == 256) * 1e6
    print(f"target: overhead at 256 points < {TARGET_OVERHEAD_US:.0f} us: {over:.1f} us -> "
          f"{'met' if over < TARGET_OVERHEAD_US else 'MISSED'}")
    if args.show_source:
        print(umat.kernels["hessian"].source)


if __name__ == "__main__":
    main()
