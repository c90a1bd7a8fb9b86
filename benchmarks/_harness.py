"""What the benchmark scripts share: interleaved timing with medians, relative errors in row
blocks, compile times in fresh processes, and the lines every report prints (the command, the
environment, first calls, compile-time table)."""
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

# The hand-written kernels run on numba's OpenMP threads, adgrad's on its own (engine/kernel.py). By
# default OpenMP's threads spin for a while after each parallel loop, on the cores that the kernel timed
# next (round by round) needs, which made adgrad's rows up to 1.8x slower; passive threads sleep instead.
# libgomp reads this when numba first loads it, at the first parallel call, after this import.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba  # noqa: E402
import numpy as np

KERNEL_OPTS = dict(parallel=True, nogil=True, cache=False)     # as adgrad's kernels: IEEE, no fastmath
SETTLE = 0.05       # seconds between timed calls (time_calls)
SPREAD_NOTE = "spread = (max - min) / median of the timed calls"


def add_timing_options(parser):
    parser.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS,
                        help="numba threads for every kernel (default: all cores)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per kernel (median)")


def print_command():
    print("command: " + shlex.join([sys.executable] + sys.argv))


def start(parser, argv, full, quick, source_help):
    """The prologue of a script timed at one number of points: options (--threads, --repeats, --quick,
    --points, --no-compile-times, --show-source), numba's thread count, the command line printed.
    Returns (args, M)."""
    add_timing_options(parser)
    parser.add_argument("--quick", action="store_true", help=f"M = {quick:,}")
    parser.add_argument("--points", type=int, help=f"M (default {full:,}, or {quick:,} with --quick)")
    parser.add_argument("--no-compile-times", action="store_true", help="skip the cold/cached subprocesses")
    parser.add_argument("--show-source", action="store_true", help=source_help)
    args = parser.parse_args(argv)
    numba.set_num_threads(args.threads)
    print_command()
    return args, args.points or (quick if args.quick else full)


def time_calls(runners, inputs, repeats):
    """Warm up every kernel once, then time `repeats` rounds that call each kernel once in turn
    (interleaved, so slow drifts of a shared machine hit all kernels alike). `runners`: name ->
    (callable, outputs); each is called as fn(*inputs).
    Each call starts after a pause of SETTLE seconds: the thread pools of numba (OpenMP) and of XLA
    keep spinning for a while after a call, on the cores the next kernel needs.
    Returns name -> (warm-up seconds, median seconds, (max - min) / median)."""
    warm, times = {}, {name: [] for name in runners}
    for name, (fn, _) in runners.items():
        t0 = time.perf_counter()
        fn(*inputs)
        warm[name] = time.perf_counter() - t0
    for _ in range(repeats):
        for name, (fn, _) in runners.items():
            time.sleep(SETTLE)
            t0 = time.perf_counter()
            fn(*inputs)
            times[name].append(time.perf_counter() - t0)
    result = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        result[name] = (warm[name], med, (max(ts) - min(ts)) / med)
    return result


def max_rel_err(a, b, floor, rows=20_000):
    """max |a - b| / max(|b|, floor) elementwise, computed in row blocks to bound memory."""
    worst = 0.0
    for s in range(0, len(b), rows):
        bb = b[s:s + rows]
        err = np.abs(a[s:s + rows] - bb) / np.maximum(np.abs(bb), floor)
        worst = max(worst, float(err.max()))
    return worst


def check_error(what, err, tol, failure=None):
    """Print a checked error with its tolerance; exit with `failure` (or a default) when it exceeds it."""
    print(f"  check {what}: max rel err {err:.2e} (tol {tol:.0e})")
    if not err <= tol:
        sys.exit(failure or f"{what}: {err:.2e} > {tol:.0e}")


def print_first_calls(timed, compile_s):
    for name, (warm, _, _) in timed.items():
        extra = f", compile_model {compile_s[name]:.2f} s" if name in compile_s else ""
        what = "XLA" if name.startswith("JAX") else "numba"
        print(f"  {name}: first call (incl. {what} compile) {warm:.3f} s{extra}")


def cpu_model():
    """The CPU's model name (every figure is given with it: machines differ between sessions)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment():
    return (f"numba {numba.__version__}, numpy {np.__version__}, python {platform.python_version()}, "
            f"threads {numba.get_num_threads()}, "
            f"SVML {numba.config.USING_SVML}, {platform.processor() or platform.machine()}")


def compile_times(jobs):
    """jobs: name -> arguments after `python -c`, a snippet printing compile_model's seconds and the
    first call's. Each runs twice in fresh processes sharing one new, empty ADGRAD_CACHE_DIR.
    Returns name -> [(compile s, first call s) cold, the same cached]."""
    res = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ADGRAD_CACHE_DIR=cache)
        for name, args in jobs.items():
            runs = []
            for _ in range(2):
                p = subprocess.run([sys.executable, "-c", *args], env=env, capture_output=True, text=True,
                                   check=True)
                runs.append(tuple(float(x) for x in p.stdout.split()))
            res[name] = runs
    return res


def print_compile_table(ctimes):
    print("\n| kernel | compile_model cold (s) | first call cold (s) | "
          "compile_model cached (s) | first call cached (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, ((c0, f0), (c1, f1)) in ctimes.items():
        print(f"| {name} | {c0:.2f} | {f0:.2f} | {c1:.2f} | {f1:.2f} |")
    print("each in a fresh process with its own ADGRAD_CACHE_DIR; cold = empty cache")


# ---------------------------------------------------------------- JAX rows and JSON output

JAX_NOTE = ("JAX: jax.jit(jax.vmap(...)) in float64, inputs put on the device once (not timed), each call "
            "waits for its outputs (block_until_ready) and allocates them (JAX has no out=); XLA's own "
            "thread pool (all cores), whatever --threads says")


def add_jax_options(parser):
    """--no-jax and --json PATH, for the scripts with JAX rows."""
    parser.add_argument("--no-jax", action="store_true", help="skip the JAX rows")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the timed rows to PATH as JSON (benchmarks/chart.py draws them)")


def load_jax(skip=False):
    """The jax module with float64 enabled, or None after printing why the JAX rows are skipped."""
    if skip:
        print("  JAX rows skipped (--no-jax)")
        return None
    try:
        import jax
    except ImportError as exc:
        print(f"  JAX rows skipped: jax is not importable ({exc}); pip install -e '.[bench]'")
        return None
    jax.config.update("jax_enable_x64", True)
    print(f"  jax {jax.__version__} on {jax.devices()[0]}")
    return jax


def jax_runner(jax, fn, args, names):
    """(callable, outputs) for time_calls from a jitted `fn`: `args` are put on the device once, each
    call runs fn(*args) and blocks until every output is computed. `outputs` maps `names` to the last
    call's results (jax arrays, in the order of fn's output leaves); it is emptied before each call,
    so that the previous results are freed before the new ones are allocated."""
    dev = [jax.device_put(a) for a in args]
    outputs = {}

    def run(*_):
        outputs.clear()
        res = jax.block_until_ready(fn(*dev))
        outputs.update(zip(names, jax.tree_util.tree_leaves(res)))
    return run, outputs


def write_json(path, script, rows):
    """rows: dicts with model, kernel, impl (hand | adgrad | jax | floor), name, M, ns_per_point, spread."""
    import json
    doc = {"script": script, "command": shlex.join([sys.executable] + sys.argv), "environment": environment(),
           "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"rows written to {path}")


def row(model, kernel, impl, name, M, seconds, spread):
    """One timed row: `kernel` says what is computed (value, value+grad, ...), `impl` who computes it
    (hand, adgrad, JAX, floor, or a variant such as "adgrad (slices)"), `name` the kernel's label."""
    return {"model": model, "kernel": kernel, "impl": impl, "name": name, "M": M,
            "ns_per_point": seconds / M * 1e9, "spread": spread}


def ratio(rows, r, impl):
    """r's time over that of the row of `impl` computing the same model and kernel (None if none)."""
    for q in rows:
        if q["impl"] == impl and q["model"] == r["model"] and q["kernel"] == r["kernel"]:
            return r["ns_per_point"] / q["ns_per_point"]
    return None


def print_ratio_table(rows, refs=("hand", "adgrad", "floor")):
    """Markdown table of ns/point, with each row's ratio to the hand-written, adgrad and floor rows of
    the same model and kernel (the same outputs)."""
    print("\n| model | M | kernel | ns/point (median) | spread | " + " | ".join(f"/ {r}" for r in refs) + " |")
    print("|---|---:|---|---:|---:|" + "---:|" * len(refs))
    for r in rows:
        cells = [ratio(rows, r, ref) for ref in refs]
        cells = " | ".join("" if c is None else f"{c:.2f}" for c in cells)
        print(f"| {r['model']} | {r['M']:,} | {r['name']} | {r['ns_per_point']:.1f} | {r['spread']:.0%} | {cells} |")
    print(SPREAD_NOTE + "; / X = this row's time over X's for the same outputs")


def print_target(what, value, limit, at_most=True):
    """One target line: `value` (a ratio) against `limit`, met or MISSED."""
    if value is None:
        print(f"target: {what}: not measured")
        return
    ok = value <= limit if at_most else value >= limit
    print(f"target: {what} {'<=' if at_most else '>='} {limit:g}: {value:.2f} ({'met' if ok else 'MISSED'})")
