"""Seed 001 benchmark: two formulations of the same score, their gradients, and a hand-written kernel.

Per point (IN = 16, OUT = 8, BATCH = 32): input X [IN, BATCH], input Z [OUT, BATCH], params
Wm [OUT, IN] and b [OUT, 1] (fixed random values, default_rng(1)),
    Y = tanh(Wm @ X + b)
    slices (seed's "colwise"):  S = dot(Y[:, 0], Z[:, 0]) + ... + dot(Y[:, 31], Z[:, 31])
    einsum:                      S = einsum('ij,ij->', Y, Z)
and dS/dX = Wm^T (Z * (1 - Y^2)). The two are the same function; the seed (Zygote) found the
sliced one's gradient 20x slower than the other's. adgrad must keep them within 1.3x.

It times, in one process and with the same numba thread count:
  hand value / hand value+grad   hand-written numba (prange over points, fused), the reference
  adgrad <f> value               compile_model(derivatives=[], mode="auto")
  adgrad <f> value+grad          compile_model(derivatives=[("S", "X")], mode="reverse")
Medians of --repeats interleaved calls after a warm-up, into preallocated outputs, on
X, Z = default_rng(0).standard_normal. adgrad is checked against the hand kernel (1e-10 relative),
the hand kernel against numpy. Compile times are measured in fresh subprocesses, cold (empty
ADGRAD_CACHE_DIR) and cached.

    python benchmarks/formulations.py            # M = 100,000 points
    python benchmarks/formulations.py --quick    # M = 5,000
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from _harness import (KERNEL_OPTS, SPREAD_NOTE, check_error, compile_times, environment, max_rel_err,
                      print_compile_table, print_first_calls, start, time_calls)

IN, OUT, BATCH = 16, 8, 32
BLOCK = 256          # points per prange iteration of the hand kernel (scratch allocated per block)
TARGET = 1.3

_rng = np.random.default_rng(1)
WM = _rng.standard_normal((OUT, IN)) / np.sqrt(IN)
BV = 0.1 * _rng.standard_normal((OUT, 1))

SCORES = {
    "slices": " + ".join(f"dot(Y[:, {j}], Z[:, {j}])" for j in range(BATCH)),
    "einsum": "einsum('ij,ij->', Y, Z)",
}


def model_yaml(form):
    return f"""\
adgrad: 1
name: seed001_{form}
description: Seed 001 score, {form} formulation (benchmarks/formulations.py).
inputs:
  X: {{shape: [{IN}, {BATCH}]}}
  Z: {{shape: [{OUT}, {BATCH}]}}
params:
  Wm: {json.dumps(WM.tolist())}
  b: {json.dumps(BV.tolist())}
let:
  Y: tanh(Wm @ X + b)
outputs:
  S: {SCORES[form]}
"""


REQUESTS = {"value": ([], "auto"), "value+grad": ([("S", "X")], "reverse")}


# ---------------------------------------------------------------- hand-written kernels

@njit(**KERNEL_OPTS)
def hand_value(X, Z, Wm, b, S):
    M = X.shape[0]
    for blk in prange((M + BLOCK - 1) // BLOCK):
        U = np.empty(BATCH)
        for n in range(blk * BLOCK, min(M, (blk + 1) * BLOCK)):
            s = 0.0
            for o in range(OUT):
                for j in range(BATCH):
                    U[j] = b[o, 0]
                for i in range(IN):
                    w = Wm[o, i]
                    for j in range(BATCH):
                        U[j] += w * X[n, i, j]
                for j in range(BATCH):
                    s += np.tanh(U[j]) * Z[n, o, j]
            S[n] = s


@njit(**KERNEL_OPTS)
def hand_value_grad(X, Z, Wm, b, S, D):
    """S and D = dS/dX = Wm^T (Z * (1 - Y^2)); one tanh per element of Y."""
    M = X.shape[0]
    for blk in prange((M + BLOCK - 1) // BLOCK):
        G = np.empty((OUT, BATCH))
        for n in range(blk * BLOCK, min(M, (blk + 1) * BLOCK)):
            s = 0.0
            for o in range(OUT):
                for j in range(BATCH):
                    G[o, j] = b[o, 0]
                for i in range(IN):
                    w = Wm[o, i]
                    for j in range(BATCH):
                        G[o, j] += w * X[n, i, j]
                for j in range(BATCH):
                    y = np.tanh(G[o, j])
                    z = Z[n, o, j]
                    s += y * z
                    G[o, j] = z * (1.0 - y * y)
            S[n] = s
            for i in range(IN):
                for j in range(BATCH):
                    D[n, i, j] = 0.0
                for o in range(OUT):
                    w = Wm[o, i]
                    for j in range(BATCH):
                        D[n, i, j] += w * G[o, j]


def numpy_value_grad(X, Z):
    Y = np.tanh(np.einsum("oi,nij->noj", WM, X) + BV)
    S = np.einsum("noj,noj->n", Y, Z)
    D = np.einsum("oi,noj->nij", WM, Z * (1 - Y * Y))
    return S, D


def hand_runners(M):
    S1, S2, D2 = np.empty(M), np.empty(M), np.empty((M, IN, BATCH))
    return {
        "hand value": (lambda X, Z: hand_value(X, Z, WM, BV, S1), {"S": S1}),
        "hand value+grad": (lambda X, Z: hand_value_grad(X, Z, WM, BV, S2, D2), {"S": S2, "dS_dX": D2}),
    }


# ---------------------------------------------------------------- adgrad kernels

def write_models(directory):
    paths = {}
    for form in SCORES:
        paths[form] = Path(directory) / f"seed001_{form}.yaml"
        paths[form].write_text(model_yaml(form))
    return paths


def adgrad_runners(M, paths):
    from adgrad.engine import compile_model, load_model
    runners, compile_s, kernels = {}, {}, {}
    for form, path in paths.items():
        model = load_model(str(path))
        for what, (derivs, mode) in REQUESTS.items():
            name = f"adgrad {form} {what}"
            out = {"S": np.empty(M)}
            if derivs:
                out["dS_dX"] = np.empty((M, IN, BATCH))
            t0 = time.perf_counter()
            kernels[name] = k = compile_model(model, derivatives=derivs, mode=mode)
            compile_s[name] = time.perf_counter() - t0
            runners[name] = (lambda X, Z, k=k, o=out: k.evaluate({"X": X, "Z": Z}, out=o), out)
    return runners, compile_s, kernels


COMPILE_SNIPPET = """
import sys, time, numpy as np
from adgrad.engine import load_model, compile_model
t1 = time.perf_counter()
k = compile_model(load_model(sys.argv[1]), derivatives=eval(sys.argv[2]), mode=sys.argv[3])
t2 = time.perf_counter()
k.evaluate({"X": np.ones((4, %d, %d)), "Z": np.ones((4, %d, %d))})
t3 = time.perf_counter()
print(t2 - t1, t3 - t2)
""" % (IN, BATCH, OUT, BATCH)


def compile_jobs(paths):
    return {f"adgrad {form} {what}": [COMPILE_SNIPPET, str(path), repr(derivs), mode]
            for form, path in paths.items() for what, (derivs, mode) in REQUESTS.items()}


# ---------------------------------------------------------------- timing and checks

def rel_err(a, b):
    """Relative to max(|b|, 1e-3 max|b|): dS/dX has entries near 0."""
    return max_rel_err(a, b, 1e-3 * float(np.abs(b).max()))


def check(outs, X, Z, tol=1e-10, rows=2000):
    S_np, D_np = numpy_value_grad(X[:rows], Z[:rows])
    errs = [("hand value S vs numpy", rel_err(outs["hand value"]["S"][:rows], S_np), 1e-12),
            ("hand value+grad S vs numpy", rel_err(outs["hand value+grad"]["S"][:rows], S_np), 1e-12),
            ("hand value+grad dS_dX vs numpy", rel_err(outs["hand value+grad"]["dS_dX"][:rows], D_np), 1e-12)]
    for name, out in outs.items():
        if name.startswith("adgrad"):
            ref = "hand value+grad" if name.endswith("grad") else "hand value"
            for key in out:
                errs.append((f"{name} {key} vs {ref}", rel_err(out[key], outs[ref][key]), tol))
    for what, err, t in errs:
        check_error(what, err, t)


# ---------------------------------------------------------------- driver

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args, M = start(p, argv, 100_000, 5_000, "print the two value+grad kernels' source")
    print(f"\nseed 001: IN={IN}, OUT={OUT}, BATCH={BATCH}, M={M:,}")

    rng = np.random.default_rng(0)
    X = rng.standard_normal((M, IN, BATCH))
    Z = rng.standard_normal((M, OUT, BATCH))
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_models(tmp)
        runners = hand_runners(M)
        ad, compile_s, kernels = adgrad_runners(M, paths)
        runners.update(ad)
        timed = time_calls(runners, (X, Z), args.repeats)
        print_first_calls(timed, compile_s)
        check({n: r[1] for n, r in runners.items()}, X, Z)
        ctimes = None if args.no_compile_times else compile_times(compile_jobs(paths))
        if args.show_source:
            for form in SCORES:
                print(f"\n# ---- adgrad {form} value+grad\n" + kernels[f"adgrad {form} value+grad"].source)

    print("\n" + environment())
    print("\n| M | kernel | ns/point (median) | spread | / hand (same outputs) | / einsum (same outputs) |")
    print("|---:|---|---:|---:|---:|---:|")
    for name, (_, med, spread) in timed.items():
        what = "value+grad" if name.endswith("grad") else "value"
        vs_hand = med / timed[f"hand {what}"][1]
        vs_ein = f"{med / timed[f'adgrad einsum {what}'][1]:.2f}" if name.startswith("adgrad") else ""
        print(f"| {M:,} | {name} | {med / M * 1e9:.1f} | {spread:.0%} | {vs_hand:.2f} | {vs_ein} |")
    print(SPREAD_NOTE)
    r = timed["adgrad slices value+grad"][1] / timed["adgrad einsum value+grad"][1]
    ok = 1 / TARGET <= r <= TARGET
    print(f"target: slices / einsum value+grad within {TARGET}x: {r:.2f} ({'met' if ok else 'MISSED'})")
    if ctimes:
        print_compile_table(ctimes)


if __name__ == "__main__":
    main()
