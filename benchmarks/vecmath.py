"""vecmath benchmark: a numba loop `y[i] = f(x[i])` with libm's f against the same loop with the
vectorized branch-free f of engine/numeric/vecmath.py.

For each function and each size (1e6 and 1e7 float64 by default) it times two single-threaded numba
loops over the same input, compiled alike (error_model="numpy", no fastmath):
  libm   math.exp(x[i]) etc. (np.cbrt; scalar.sigmoid and scalar.softplus, adgrad's current helpers)
  vec    vecmath.vexp(x[i]) etc.
  and for exp a third loop, timed in the same rounds: "exp (double-double)", the exp that vexp was
  until _exp_fast (vecmath._exp_red, kept for the functions that need e**x to more than 53 bits).
Each time is the median of --repeats rounds (default 7) after one warm-up call; within a round the
two loops run one after the other (interleaved), so drifts of this shared machine hit both alike.
Printed: ns per element, the spread of the timed calls, and libm / vec (> 1: vecmath is faster).
The inputs are spread over each function's useful range (table: `DOMAINS`), fixed seed.

Run from anywhere:
    python benchmarks/vecmath.py                    # every function, 1e6 and 1e7
    python benchmarks/vecmath.py --sizes 1000000 --only vexp vlog
"""
import argparse
import math
import platform
import sys
from pathlib import Path

import llvmlite.binding
import numba
import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import SPREAD_NOTE, print_command, time_calls
from adgrad.engine.numeric import scalar, vecmath


def _loop1(f):
    @njit(error_model="numpy", nogil=True)
    def run(x, y, _):
        for i in range(x.size):
            y[i] = f(x[i])
    return run


def _loop2(f):
    @njit(error_model="numpy", nogil=True)
    def run(x, y, b):
        for i in range(x.size):
            y[i] = f(x[i], b[i])
    return run


@njit(inline="always", error_model="numpy")
def _libm_pow(x, y):
    return math.pow(x, y)


@njit(inline="always", error_model="numpy")
def _libm_atan2(y, x):
    return math.atan2(y, x)


@njit(inline="always", error_model="numpy")
def _exp_dd(x):
    """vexp as it was before _exp_fast: e**x as a double-double (_exp_red), rounded once (0.514 ulp)."""
    wh, wl, k = vecmath._exp_red(x, -0.0, -746.0, 710.0)
    return vecmath._scale(wh + wl, k)


def _sym(lo, hi):
    """Log-uniform magnitudes in [lo, hi], both signs."""
    return lambda rng, n: np.exp(rng.uniform(math.log(lo), math.log(hi), n)) * rng.choice([-1.0, 1.0], n)


def _uni(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


def _pos(lo, hi):
    return lambda rng, n: np.exp(rng.uniform(math.log(lo), math.log(hi), n))


# name: (libm scalar function, vecmath function, first argument's domain, second argument's or None), then
# optionally a previous vecmath version timed beside them (EXTRA). Moderate
# ranges, where glibc takes its fast paths (its exp, e.g., branches to a slower path for |x| > 512).
DOMAINS = {
    "exp": (math.exp, vecmath.vexp, _uni(-50.0, 50.0), None),
    "log": (math.log, vecmath.vlog, _pos(1e-3, 1e3), None),
    "expm1": (math.expm1, vecmath.vexpm1, _uni(-10.0, 10.0), None),
    "log1p": (math.log1p, vecmath.vlog1p, _pos(1e-6, 1e3), None),
    "pow": (_libm_pow, vecmath.vpow, _pos(0.1, 10.0), _uni(-5.0, 5.0)),
    "sinh": (math.sinh, vecmath.vsinh, _uni(-10.0, 10.0), None),
    "cosh": (math.cosh, vecmath.vcosh, _uni(-10.0, 10.0), None),
    "tanh": (math.tanh, vecmath.vtanh, _uni(-5.0, 5.0), None),
    "sigmoid": (scalar.sigmoid, vecmath.vsigmoid, _uni(-20.0, 20.0), None),
    "softplus": (scalar.softplus, vecmath.vsoftplus, _uni(-20.0, 20.0), None),
    "sin": (math.sin, vecmath.vsin, _uni(-10.0, 10.0), None),
    "cos": (math.cos, vecmath.vcos, _uni(-10.0, 10.0), None),
    "tan": (math.tan, vecmath.vtan, _uni(-10.0, 10.0), None),
    "arctan": (math.atan, vecmath.varctan, _sym(1e-3, 1e3), None),
    "arctan2": (_libm_atan2, vecmath.varctan2, _sym(1e-3, 1e3), _sym(1e-3, 1e3)),
    "arcsin": (math.asin, vecmath.varcsin, _uni(-1.0, 1.0), None),
    "arccos": (math.acos, vecmath.varccos, _uni(-1.0, 1.0), None),
    "cbrt": (np.cbrt, vecmath.vcbrt, _sym(1e-3, 1e3), None),
    "erf": (math.erf, vecmath.verf, _uni(-3.0, 3.0), None),
}
EXTRA = {"exp": ("exp (double-double)", _exp_dd)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (median)")
    parser.add_argument("--only", nargs="+", choices=sorted(DOMAINS), help="these functions only")
    args = parser.parse_args(argv)
    print_command()
    print(f"numba {numba.__version__}, numpy {np.__version__}, python {platform.python_version()}, "
          f"CPU {llvmlite.binding.get_host_cpu_name()}, SVML {numba.config.USING_SVML}")
    names = args.only or list(DOMAINS)
    print("\n| function | n | libm ns/elem | spread | vec ns/elem | spread | libm / vec |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        libm, vec, dom_a, dom_b = DOMAINS[name]
        make = _loop2 if dom_b else _loop1
        runners = {"libm": make(libm), "vec": make(vec)}
        if name in EXTRA:
            runners["extra"] = make(EXTRA[name][1])
        for n in args.sizes:
            rng = np.random.default_rng(0)
            x = dom_a(rng, n)
            b = dom_b(rng, n) if dom_b else x
            outs = {k: np.empty(n) for k in runners}
            timed = time_calls({k: (lambda a, bb, f=f, y=outs[k]: f(a, y, bb), None) for k, f in runners.items()},
                               (x, b), args.repeats)
            (_, tl, sl), (_, tv, sv) = timed["libm"], timed["vec"]
            print(f"| {name} | {n:.0e} | {tl / n * 1e9:.2f} | {sl:.0%} | {tv / n * 1e9:.2f} | {sv:.0%} | "
                  f"{tl / tv:.2f} |", flush=True)
            if "extra" in timed:
                _, te, se = timed["extra"]
                print(f"| {EXTRA[name][0]} | {n:.0e} | {tl / n * 1e9:.2f} | {sl:.0%} | {te / n * 1e9:.2f} | {se:.0%} | "
                      f"{tl / te:.2f} |", flush=True)
    print(SPREAD_NOTE + "; single thread; first call of each loop (numba compile) not timed")


if __name__ == "__main__":
    main()
