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
  hand floor value / value+grad  read X and Z, write S (and an (IN, BATCH) array): the memory floor
  JAX value / value+grad         jax.jit(jax.vmap(S)) and jax.jit(jax.vmap(jax.value_and_grad(S))),
                                 S(X, Z) = sum(tanh(Wm @ X + b) * Z) in jax.numpy, float64
Medians of --repeats (default 7) interleaved calls after a warm-up, into preallocated outputs (JAX
allocates its own), on X, Z = default_rng(0).standard_normal. adgrad and JAX are checked against the
hand kernel (1e-10 relative), the hand kernel against numpy. Compile times are measured in fresh
subprocesses, cold (empty ADGRAD_CACHE_DIR) and cached. In the ratio table "/ adgrad" is over the
einsum formulation; the target lines give slices / einsum and issue 12's adgrad / hand value+grad.

    python benchmarks/formulations.py            # M = 100,000 points
    python benchmarks/formulations.py --quick    # M = 5,000
    python benchmarks/formulations.py --json f.json   # also the rows as JSON, for benchmarks/chart.py
Without jax the JAX rows are skipped (--no-jax skips them too).
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from _harness import (JAX_NOTE, KERNEL_OPTS, add_jax_options, check_error, compile_times, environment,
                      jax_runner, load_jax, max_rel_err, print_compile_table, print_first_calls, print_ratio_table,
                      print_target, row, start, time_calls, write_json)

IN, OUT, BATCH = 16, 8, 32
BLOCK = 256          # points per prange iteration of the hand kernel (scratch allocated per block)
TARGET = 1.3
TARGET_12 = 1.2     # issue 12: adgrad value+grad / hand

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


@njit(**KERNEL_OPTS)
def floor_value(X, Z, S):
    """Memory floor of the value: read X and Z, write S (sums, no arithmetic to speak of)."""
    M = X.shape[0]
    for n in prange(M):
        s = 0.0
        for i in range(IN):
            for j in range(BATCH):
                s += X[n, i, j]
        for o in range(OUT):
            for j in range(BATCH):
                s += Z[n, o, j]
        S[n] = s


@njit(**KERNEL_OPTS)
def floor_value_grad(X, Z, S, D):
    """Memory floor of value+grad: read X and Z, write S and D = 3 X."""
    M = X.shape[0]
    for n in prange(M):
        s = 0.0
        for i in range(IN):
            for j in range(BATCH):
                x = X[n, i, j]
                D[n, i, j] = 3.0 * x
                s += x
        for o in range(OUT):
            for j in range(BATCH):
                s += Z[n, o, j]
        S[n] = s


def numpy_value_grad(X, Z):
    Y = np.tanh(np.einsum("oi,nij->noj", WM, X) + BV)
    S = np.einsum("noj,noj->n", Y, Z)
    D = np.einsum("oi,noj->nij", WM, Z * (1 - Y * Y))
    return S, D


def hand_runners(M):
    S1, S2, D2 = np.empty(M), np.empty(M), np.empty((M, IN, BATCH))
    S3, S4, D4 = np.empty(M), np.empty(M), np.empty((M, IN, BATCH))
    return {
        "hand value": (lambda X, Z: hand_value(X, Z, WM, BV, S1), {"S": S1}),
        "hand value+grad": (lambda X, Z: hand_value_grad(X, Z, WM, BV, S2, D2), {"S": S2, "dS_dX": D2}),
        "hand floor value": (lambda X, Z: floor_value(X, Z, S3), {}),
        "hand floor value+grad": (lambda X, Z: floor_value_grad(X, Z, S4, D4), {}),
    }


# ---------------------------------------------------------------- JAX

def jax_runners(jax, X, Z):
    """name -> (callable, outputs) for JAX: S of one point in jax.numpy, jit(vmap(...)) over points."""
    jnp = jax.numpy
    Wm, b = jnp.asarray(WM), jnp.asarray(BV)

    def score(X, Z):
        Y = jnp.tanh(Wm @ X + b)
        return jnp.sum(Y * Z)

    return {
        "JAX value": jax_runner(jax, jax.jit(jax.vmap(score)), (X, Z), ["S"]),
        "JAX value+grad": jax_runner(jax, jax.jit(jax.vmap(jax.value_and_grad(score))), (X, Z), ["S", "dS_dX"]),
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
        if name.startswith(("adgrad", "JAX")):
            ref = "hand value+grad" if name.endswith("grad") else "hand value"
            for key in out:
                errs.append((f"{name} {key} vs {ref}", rel_err(np.asarray(out[key]), outs[ref][key]), tol))
    for what, err, t in errs:
        check_error(what, err, t)


def describe(name):
    """(impl, kernel) of a row name: the einsum formulation is "adgrad", the other "adgrad (slices)"."""
    kernel = name.split(" ")[-1]
    if name.startswith("hand floor"):
        return "floor", kernel
    if name.startswith("adgrad"):
        return ("adgrad" if "einsum" in name else "adgrad (slices)"), kernel
    return name.split(" ")[0], kernel


# ---------------------------------------------------------------- driver

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_jax_options(p)
    p.set_defaults(repeats=7)
    args, M = start(p, argv, 100_000, 5_000, "print the two value+grad kernels' source")
    jax = load_jax(args.no_jax)
    print(f"\nseed 001: IN={IN}, OUT={OUT}, BATCH={BATCH}, M={M:,}")

    rng = np.random.default_rng(0)
    X = rng.standard_normal((M, IN, BATCH))
    Z = rng.standard_normal((M, OUT, BATCH))
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_models(tmp)
        runners = hand_runners(M)
        ad, compile_s, kernels = adgrad_runners(M, paths)
        runners.update(ad)
        if jax is not None:
            runners.update(jax_runners(jax, X, Z))
        timed = time_calls(runners, (X, Z), args.repeats)
        print_first_calls(timed, compile_s)
        check({n: r[1] for n, r in runners.items()}, X, Z)
        ctimes = None if args.no_compile_times else compile_times(compile_jobs(paths))
        if args.show_source:
            for form in SCORES:
                print(f"\n# ---- adgrad {form} value+grad\n" + kernels[f"adgrad {form} value+grad"].source)

    print("\n" + environment())
    if jax is not None:
        print(JAX_NOTE)
    rows = [row("seed 001", *describe(name)[::-1], name, M, med, spread) for name, (_, med, spread) in timed.items()]
    print_ratio_table(rows)
    r = timed["adgrad slices value+grad"][1] / timed["adgrad einsum value+grad"][1]
    ok = 1 / TARGET <= r <= TARGET
    print(f"target: slices / einsum value+grad within {TARGET}x: {r:.2f} ({'met' if ok else 'MISSED'})")
    for form in SCORES:
        print_target(f"adgrad {form} value+grad / hand (issue 12)",
                     timed[f"adgrad {form} value+grad"][1] / timed["hand value+grad"][1], TARGET_12)
    if args.json:
        write_json(args.json, "formulations.py", rows)
    if ctimes:
        print_compile_table(ctimes)


if __name__ == "__main__":
    main()
