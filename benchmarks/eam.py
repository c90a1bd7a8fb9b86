"""EAM benchmark: adgrad kernels against hand-written numba kernels of the same math.

Model (seed 000): x in R^N,
    rho = sum_j exp(-3 (x_j + 1)),   E = rho^2 + rho^3 + rho^4 / 4,
    dE/dx_j = (2 rho + 3 rho^2 + rho^3) * (-3) * exp(-3 (x_j + 1)).

For each size (N=100, M=1,000,000 points and N=1000, M=100,000 by default) it times, in one
process and with the same numba thread count:
  hand value        hand-written value-only kernel
  hand value+grad   hand-written value + gradient, one exp per element (the reference)
  hand floor        reads x, writes an (M, N) gradient-shaped array and an (M,) value: the
                    memory-traffic floor of any value+gradient kernel
  hand-vexp value+grad  the hand-written value+grad with adgrad's vexp (within 1 ulp, vectorizes) and
                    the sum in 8 partial sums, so that every loop vectorizes: how close to the floor
                    hand-written code with the same exp gets
  adgrad value      compile_model(model, derivatives=[], mode="auto")
  adgrad value+grad compile_model(model, derivatives=[("E", "x")], mode="reverse")
  JAX value         jax.jit(jax.vmap(E)), E written in jax.numpy as above, float64
  JAX value+grad    jax.jit(jax.vmap(jax.value_and_grad(E)))
Each is the median of --repeats calls (default 7) after one warm-up call, into preallocated
outputs (JAX allocates its own), on X = default_rng(0).random((M, N)); timed calls are interleaved
round-robin across kernels so that drifts of a shared machine hit all of them alike. adgrad's E and
dE/dx are checked against the hand-written kernel; the hand-written kernels against numpy (1e-12
relative), JAX against the hand-written kernel (1e-10). Compile times (adgrad's compile_model plus
first call) are printed separately. The table gives each row over the hand-written, adgrad and
floor rows of the same outputs, and the lines after it issue 12's targets.

Run from anywhere:
    python benchmarks/eam.py                     # full sizes, all cores
    python benchmarks/eam.py --quick             # smoke run: M = 20,000 and 2,000
    python benchmarks/eam.py --threads 4 --sizes 100 1000x50000
    python benchmarks/eam.py --json eam.json     # also the rows as JSON, for benchmarks/chart.py
If adgrad cannot be imported, the hand-written rows are still printed; without jax, the JAX rows are
skipped (--no-jax skips them too).
"""
import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from _harness import (JAX_NOTE, KERNEL_OPTS, add_jax_options, add_timing_options, check_error, environment,
                      jax_runner, load_jax, max_rel_err, print_command, print_ratio_table, print_target, ratio,
                      row, time_calls, write_json)

try:
    from adgrad.engine.numeric.vecmath import vexp
except ImportError:                 # the hand-written rows without adgrad; no hand-vexp row
    vexp = None

MODEL_PATH = Path(__file__).resolve().parent.parent / "configs" / "eam_model.yaml"
DEFAULT_N = (100, 1000)
ELEMENTS = {False: 100_000_000, True: 2_000_000}   # default M * N, full and --quick

REF_VALUE = "hand value"
REF_GRAD = "hand value+grad"
TINY = np.finfo(float).tiny     # relative errors divide by |reference| (E and dE/dx are never 0)


# ---------------------------------------------------------------- hand-written kernels

@njit(**KERNEL_OPTS)
def hand_value(X, E):
    """E[i] for every point; one exp per element, nothing stored."""
    M, N = X.shape
    for i in prange(M):
        rho = 0.0
        for j in range(N):
            rho += np.exp(-3.0 * X[i, j] - 3.0)
        E[i] = rho * rho * (1.0 + rho * (1.0 + 0.25 * rho))


@njit(**KERNEL_OPTS)
def hand_value_grad(X, E, G):
    """E[i] and G[i, :] = dE/dx: store exp into G while summing, then scale G in a second pass."""
    M, N = X.shape
    for i in prange(M):
        rho = 0.0
        for j in range(N):
            e = np.exp(-3.0 * X[i, j] - 3.0)
            G[i, j] = e
            rho += e
        E[i] = rho * rho * (1.0 + rho * (1.0 + 0.25 * rho))
        dF = -3.0 * rho * (2.0 + rho * (3.0 + rho))
        for j in range(N):
            G[i, j] *= dF


@njit(**KERNEL_OPTS)
def hand_vexp_value_grad(X, E, G):
    """hand_value_grad with vexp: exp into G (a loop that vectorizes), G's row sum in 8 partial sums, then
    G scaled by dF."""
    M, N = X.shape
    for i in prange(M):
        for j in range(N):
            G[i, j] = vexp(-3.0 * X[i, j] - 3.0)
        p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0.0
        for j in range(0, N - N % 8, 8):
            p0 += G[i, j]
            p1 += G[i, j + 1]
            p2 += G[i, j + 2]
            p3 += G[i, j + 3]
            p4 += G[i, j + 4]
            p5 += G[i, j + 5]
            p6 += G[i, j + 6]
            p7 += G[i, j + 7]
        rho = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
        for j in range(N - N % 8, N):
            rho += G[i, j]
        E[i] = rho * rho * (1.0 + rho * (1.0 + 0.25 * rho))
        dF = -3.0 * rho * (2.0 + rho * (3.0 + rho))
        for j in range(N):
            G[i, j] *= dF


@njit(**KERNEL_OPTS)
def hand_floor(X, E, G):
    """Memory floor: read X, write G = 3 X and E = row sum of X (no transcendental work)."""
    M, N = X.shape
    for i in prange(M):
        s = 0.0
        for j in range(N):
            x = X[i, j]
            G[i, j] = 3.0 * x
            s += x
        E[i] = s


def numpy_value_grad(X):
    """Plain numpy reference for the hand-written kernels."""
    e = np.exp(-3.0 * (X + 1.0))
    rho = e.sum(axis=1)
    E = rho**2 + rho**3 + 0.25 * rho**4
    G = (2 * rho + 3 * rho**2 + rho**3)[:, None] * (-3.0) * e
    return E, G


def hand_runners(M, N):
    """name -> (zero-argument callable, outputs dict) for the hand-written kernels."""
    E1, E2, E3, E4 = np.empty(M), np.empty(M), np.empty(M), np.empty(M)
    G2, G3, G4 = np.empty((M, N)), np.empty((M, N)), np.empty((M, N))
    runners = {
        REF_VALUE: (lambda X: hand_value(X, E1), {"E": E1}),
        REF_GRAD: (lambda X: hand_value_grad(X, E2, G2), {"E": E2, "dE_dx": G2}),
        "hand floor": (lambda X: hand_floor(X, E3, G3), {"E": E3, "dE_dx": G3}),
    }
    if vexp is not None:
        runners["hand-vexp value+grad"] = (lambda X: hand_vexp_value_grad(X, E4, G4), {"E": E4, "dE_dx": G4})
    return runners


# ---------------------------------------------------------------- adgrad kernels

def adgrad_runners(M, N):
    """name -> (callable, outputs) for adgrad, plus compile seconds; None if adgrad is missing."""
    try:
        from adgrad.engine import compile_model, load_model
    except ImportError as exc:
        return None, f"adgrad unavailable ({exc})"
    overrides = {} if N == 100 else {"input_shapes": {"x": [N]}}
    model = load_model(str(MODEL_PATH), **overrides)
    runners, compile_s = {}, {}
    for name, derivs, mode, out in [
        ("adgrad value", [], "auto", {"E": np.empty(M)}),
        ("adgrad value+grad", [("E", "x")], "reverse", {"E": np.empty(M), "dE_dx": np.empty((M, N))}),
    ]:
        t0 = time.perf_counter()
        kernel = compile_model(model, derivatives=derivs, mode=mode)
        compile_s[name] = time.perf_counter() - t0
        runners[name] = (lambda X, k=kernel, o=out: k.evaluate({"x": X}, out=o), out)
    return runners, compile_s


# ---------------------------------------------------------------- JAX

def jax_runners(jax, X):
    """name -> (callable, outputs) for JAX: E of one point in jax.numpy, jit(vmap(...)) over points."""
    jnp = jax.numpy

    def energy(x):
        rho = jnp.sum(jnp.exp(-3.0 * (x + 1.0)))
        return rho**2 + rho**3 + rho**4 / 4

    return {
        "JAX value": jax_runner(jax, jax.jit(jax.vmap(energy)), (X,), ["E"]),
        "JAX value+grad": jax_runner(jax, jax.jit(jax.vmap(jax.value_and_grad(energy))), (X,), ["E", "dE_dx"]),
    }


# ---------------------------------------------------------------- timing and checks

def check_hand(X, outs, rows=2000, tol=1e-12):
    """The hand-written value and gradient agree with numpy to `tol` relative (first `rows` points)."""
    E_np, G_np = numpy_value_grad(X[:rows])
    errs = {
        "value E": max_rel_err(outs[REF_VALUE]["E"][:rows], E_np, TINY),
        "value+grad E": max_rel_err(outs[REF_GRAD]["E"][:rows], E_np, TINY),
        "value+grad dE_dx": max_rel_err(outs[REF_GRAD]["dE_dx"][:rows], G_np, TINY),
    }
    if "hand-vexp value+grad" in outs:
        errs["vexp value+grad E"] = max_rel_err(outs["hand-vexp value+grad"]["E"][:rows], E_np, TINY)
        errs["vexp value+grad dE_dx"] = max_rel_err(outs["hand-vexp value+grad"]["dE_dx"][:rows], G_np, TINY)
    for what, err in errs.items():
        print(f"  check hand {what} vs numpy: max rel err {err:.2e}")
        if not err <= tol:
            sys.exit(f"hand-written {what} disagrees with numpy: {err:.2e} > {tol:.0e}")


def check_adgrad(outs):
    """Print adgrad's max relative error against the hand-written kernels."""
    pairs = [("adgrad value", "E", REF_VALUE), ("adgrad value+grad", "E", REF_GRAD),
             ("adgrad value+grad", "dE_dx", REF_GRAD)]
    for name, key, ref in pairs:
        if name in outs:
            err = max_rel_err(outs[name][key], outs[ref][key], TINY)
            print(f"  check {name} {key} vs {ref}: max rel err {err:.2e}")


def check_jax(outs, tol=1e-10):
    """JAX's E and dE/dx against the hand-written kernels (exit if beyond `tol`)."""
    for name, ref in [("JAX value", REF_VALUE), ("JAX value+grad", REF_GRAD)]:
        for key, val in outs.get(name, {}).items():
            check_error(f"{name} {key} vs {ref}", max_rel_err(np.asarray(val), outs[ref][key], TINY), tol)


def describe(name):
    """(impl, kernel) of a row name: 'hand floor' is the floor of value+grad."""
    if name == "hand floor":
        return "floor", "value+grad"
    return name.split(" ")[0], name.split(" ")[-1]


# ---------------------------------------------------------------- driver

def bench_size(N, M, repeats, jax):
    """Time every kernel at one size; return table rows (harness.row dicts)."""
    print(f"\nN={N}, M={M:,}")
    X = np.random.default_rng(0).random((M, N))
    runners = hand_runners(M, N)
    ad, info = adgrad_runners(M, N)
    if ad is None:
        print(f"  {info}")
    else:
        runners.update(ad)
    if jax is not None:
        runners.update(jax_runners(jax, X))
    rows, outs = [], {}
    for name, (warm, med, spread) in time_calls(runners, (X,), repeats).items():
        extra = f", compile_model {info[name]:.2f} s" if ad is not None and name in info else ""
        what = "numba" if not name.startswith("JAX") else "XLA"
        print(f"  {name}: first call (incl. {what} compile) {warm:.3f} s{extra}")
        rows.append(row(f"EAM N={N}", *describe(name)[::-1], name, M, med, spread))
        outs[name] = runners[name][1]
    check_hand(X, outs)
    check_adgrad(outs)
    check_jax(outs)
    return rows


def print_targets(rows, sizes):
    """Issue 12's EAM targets, per size."""
    def get(N, impl, kernel):
        return next((r for r in rows if r["model"] == f"EAM N={N}" and r["impl"] == impl and r["kernel"] == kernel),
                    None)
    for N, _ in sizes:
        ad_vg, ad_v = get(N, "adgrad", "value+grad"), get(N, "adgrad", "value")
        if ad_vg is None:
            continue
        inv = (lambda x: None if x is None else 1 / x)
        print_target(f"N={N} adgrad value+grad / floor", ratio(rows, ad_vg, "floor"), 1.5)
        print_target(f"N={N} hand value+grad / adgrad value+grad", inv(ratio(rows, ad_vg, "hand")), 2.5, False)
        print_target(f"N={N} JAX value+grad / adgrad value+grad", inv(ratio(rows, ad_vg, "JAX")), 2.5, False)
        print_target(f"N={N} JAX value / adgrad value", inv(ratio(rows, ad_v, "JAX")), 1.0, False)


def parse_sizes(items, quick):
    """'N' (M = 1e8 / N, or 2e6 / N with --quick) or 'NxM' -> list of (N, M)."""
    sizes = []
    for item in items or DEFAULT_N:
        n, _, m = str(item).partition("x")
        sizes.append((int(n), int(m) if m else ELEMENTS[quick] // int(n)))
    return sizes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_timing_options(p)
    add_jax_options(p)
    p.set_defaults(repeats=7)
    p.add_argument("--quick", action="store_true", help="small M for a smoke run")
    p.add_argument("--sizes", nargs="+", metavar="N[xM]",
                   help="sizes to run, e.g. 100 1000x50000 (default: 100 and 1000)")
    args = p.parse_args(argv)

    numba.set_num_threads(args.threads)
    sizes = parse_sizes(args.sizes, args.quick)
    print_command()
    jax = load_jax(args.no_jax)
    rows = []
    for n, m in sizes:
        rows += bench_size(n, m, args.repeats, jax)
    print("\n" + environment())
    if jax is not None:
        print(JAX_NOTE)
    print_ratio_table(rows)
    print_targets(rows, sizes)
    if args.json:
        write_json(args.json, "eam.py", rows)


if __name__ == "__main__":
    main()
