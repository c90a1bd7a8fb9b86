"""The exported native library (adgrad export) against the numba kernel it was made from.

For each model, in one process: the numba kernel's lean call (kernel.compute, what `adgrad run` calls
per chunk: rows laid out, one workspace) and the library's batch call (lib<name>.so through ctypes,
preallocated rows and workspace), on one thread and on two, into the same preallocated outputs, for
the library built for a baseline x86-64 (the default) and for this machine's CPU (--cpu host).
Medians of --repeats calls after a warm-up, calls interleaved round-robin (benchmarks/_harness.py);
ns per point and the ratio library / numba (target: <= 1.1). Before timing, every library's results
are checked bit for bit against the numba kernel's.

    python benchmarks/native.py                 # the models below at their default point counts
    python benchmarks/native.py --quick         # a tenth of the points
    python benchmarks/native.py --models eam,j2_voce --repeats 9
    python benchmarks/native.py --startup --repeats 11    # start-up only (below)

Start-up (issue 26 item 5), in fresh processes, interleaved, median wall and CPU seconds of --repeats:
the floors (the interpreter; numpy; the libraries of `adgrad run`: click, h5py, numpy, yaml), a
process that evaluates configs/eam_model.yaml's E and dE/dx at 2000 points once through the numba
kernel (compile cache warm) and through the exported library (load_library), and `adgrad run
configs/eam.yaml` warm with numba and with --native (its record made by a first run); then the
imports of the --native run (python -X importtime). Targets: the library's process under 0.2 s,
the --native run under 0.5 s. Every process finds adgrad's modules compiled to bytecode, as an
installed package has them (in a cache of the benchmark's own, PYTHONPYCACHEPREFIX, whatever
PYTHONDONTWRITEBYTECODE says: without it each process compiles adgrad's source again, 0.15-0.2 s).
"""
import argparse
import ctypes
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import print_command, time_calls  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# name: (model file, derivatives, points)
MODELS = {
    "eam": ("configs/eam_model.yaml", [("E", "x")], 200_000),
    "cu_eam": ("configs/cu_eam_model.yaml", [("E", "R")], 100_000),
    "neo_hooke_WP": ("configs/models/neo_hooke.yaml", [("W", "F")], 1_000_000),
    "neo_hooke_WPA": ("configs/models/neo_hooke.yaml", [("W", "F"), ("W", ["F", "F"])], 1_000_000),
    "j2_voce": ("configs/models/j2_voce.yaml", [("sigma", "eps")], 1_000_000),
}
CPUS = ("x86-64", "host")


def points(name, kernel, m, rng):
    """Inputs (m, *shape): uniform in each input's sample range (F about I), Cu's atoms tiled."""
    if name == "cu_eam":
        import h5py
        with h5py.File(ROOT / "data/cu_points.h5") as f:
            return {n: np.ascontiguousarray(np.resize(f[n][:], (m,) + f[n].shape[1:]))
                    for n in ("R", "valid", "s", "sn")}
    out = {}
    for n, v in kernel.graph.inputs.items():
        lo, hi, center = kernel.model.spec.inputs[n].sample or (0.0, 1.0, 0.0)
        out[n] = rng.uniform(lo, hi, (m,) + v.shape) + (np.eye(3) if center == "identity" else center or 0.0)
    return out


def native_call(lib, inputs, outputs, threads):
    """The library's batch call with everything prepared: a call is one ctypes call."""
    fn = getattr(lib.lib, f"{lib.name}_batch")
    D = ctypes.POINTER(ctypes.c_double)
    ins = (D * len(inputs))(*[a.ctypes.data_as(D) for a in inputs])
    outs = (D * len(outputs))(*[a.ctypes.data_as(D) for a in outputs])
    size = lib.fn["batch_workspace_size"](threads)
    work = np.empty(size)
    m = len(outputs[0])

    def call():
        lib.check(fn(lib.ctx, m, ins, None, outs, None, threads, work.ctypes.data_as(D), size, None))
    return call


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def bench(name, args, tmp):
    from adgrad.engine import compile_model, load_model
    from adgrad.engine.export import export
    from adgrad.engine.export.loader import NativeModel
    path, derivs, full = MODELS[name]
    m = full // 10 if args.quick else full
    kernel = compile_model(load_model(ROOT / path), derivatives=derivs)
    inputs = points(name, kernel, m, np.random.default_rng(0))
    rows = [np.ascontiguousarray(inputs[n], dtype=np.float64) for n in kernel.graph.inputs]
    libs = {cpu: NativeModel(export(kernel, os.path.join(tmp, f"{name}-{cpu}"), cpu=cpu).library) for cpu in CPUS}
    ref = kernel.evaluate(inputs)
    out = {n: np.empty((m,) + s) for n, s in kernel.output_shapes.items()}
    for cpu, lib in libs.items():
        got = lib.evaluate(inputs, threads=2)
        bad = [n for n in ref if not np.array_equal(ref[n].view(np.int64), got[n].view(np.int64))]
        if bad:
            raise SystemExit(f"{name}: the {cpu} library's {bad} differ from the numba kernel's")
    table = []
    for threads in (1, 2):
        work = kernel.workspace(threads)
        runners = {"numba": (lambda: kernel.compute(inputs, out, work), None)}
        for cpu, lib in libs.items():
            runners[cpu] = (native_call(lib, rows, list(out.values()), threads), None)
        times = time_calls(runners, (), args.repeats)
        base = times["numba"][1]
        table.append((name, m, threads, base / m * 1e9,
                      *[(times[cpu][1] / m * 1e9, times[cpu][1] / base, times[cpu][2]) for cpu in CPUS]))
    return table


EVAL = ("import numpy as np\nx = np.random.default_rng(0).uniform(0, 1, (2000, 100))\n{load}\n"
        "out = kernel.evaluate({{'x': x}})\nassert out['dE_dx'].shape == (2000, 100)\n")
NUMBA_LOAD = ("from adgrad.engine import compile_model, load_model\n"
              "kernel = compile_model(load_model({model!r}), [('E', 'x')])")
NATIVE_LOAD = "from adgrad.engine import load_library\nkernel = load_library({lib!r})"


def startup_commands(tmp, env):
    """(label, argv) of the processes timed, after the export and the first runs they need."""
    from adgrad.engine import compile_model, load_model
    from adgrad.engine.export import export
    model = str(ROOT / "configs/eam_model.yaml")
    export(compile_model(load_model(model), [("E", "x")]), os.path.join(tmp, "api"))
    run = ["-m", "adgrad.cli.entry", "run", str(ROOT / "configs/eam.yaml"), "-q", "--overwrite", "-o"]
    export_cmd = [sys.executable, "-m", "adgrad.cli.entry", "export", str(ROOT / "configs/eam.yaml"), "-o",
                  os.path.join(tmp, "run")]
    subprocess.run(export_cmd, check=True, capture_output=True, env=env)
    native = run + [os.path.join(tmp, "native.h5"), "--native", os.path.join(tmp, "run")]
    for argv in (run + [os.path.join(tmp, "numba.h5")], native):       # compile cache, --native's record
        subprocess.run([sys.executable, *argv], check=True, capture_output=True, env=env)
    return [("python -c pass (the interpreter)", ["-c", "pass"]),
            ("import numpy (the library's floor)", ["-c", "import numpy"]),
            ("import click, h5py, numpy, yaml (run's floor)", ["-c", "import click, h5py, numpy, yaml"]),
            ("evaluate once: numba kernel (cached)", ["-c", EVAL.format(load=NUMBA_LOAD.format(model=model))]),
            ("evaluate once: load_library", ["-c", EVAL.format(load=NATIVE_LOAD.format(
                lib=os.path.join(tmp, "api")))]),
            ("adgrad run configs/eam.yaml (numba, warm)", run + [os.path.join(tmp, "numba.h5")]),
            ("adgrad run configs/eam.yaml --native DIR", native)], native


def timed(argv, env):
    """(wall, CPU) seconds of one process of `python argv` (its user + system time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


IMPORTS = ("numpy", "h5py", "click", "yaml", "importlib.metadata", "adgrad.engine.spec", "adgrad.engine.export.native",
           "adgrad.engine.store.output", "numba")


def import_costs(argv, env):
    """{module of IMPORTS: cumulative seconds of its import} in one `python -X importtime argv` (the
    first time each is imported, whoever imports it; nested ones are inside their importer's)."""
    res = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True,
                         env=env)
    costs = {}
    for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| *(\S+)$", res.stderr, re.M):
        if m.group(2) in IMPORTS:
            costs.setdefault(m.group(2), int(m.group(1)) / 1e6)
    return costs


def startup(args):
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        commands, native = startup_commands(tmp, env)
        times = {label: [] for label, _ in commands}
        for _ in range(args.repeats):                   # interleaved: the machine's load hits every row alike
            for label, argv in commands:
                times[label].append(timed(argv, env))
        imports = import_costs(native, env)
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after: "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; {os.cpu_count()} cores; {args.repeats} runs each")
    print(f"{'process':<48}{'wall median':>12}{'wall min':>10}{'CPU median':>12}")
    for label, rows in times.items():
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        print(f"{label:<48}{statistics.median(walls):>12.3f}{min(walls):>10.3f}{statistics.median(cpus):>12.3f}")
    print("imports of the --native run (python -X importtime, cumulative s, each where first imported): "
          + ", ".join(f"{name} {t:.3f}" for name, t in imports.items()))
    if "numba" in imports:
        print("(numba: imported by adgrad.engine.store.output through engine/numeric/exactsum.py, for summed results)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per kernel (median)")
    parser.add_argument("--quick", action="store_true", help="a tenth of each model's points")
    parser.add_argument("--startup", action="store_true", help="only the start-up table")
    args = parser.parse_args(argv)
    print_command()
    if args.startup:
        return startup(args)
    print(f"cpu: {cpu_model()} ({os.cpu_count()} cores); numbers: median ns per point (spread); "
          f"ratio = library / numba kernel")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows += bench(name.strip(), args, tmp)
    head = f"{'model':<15}{'points':>10}{'threads':>8}{'numba':>10}"
    for cpu in CPUS:
        head += f"{'lib ' + cpu:>16}{'ratio':>7}"
    print(head)
    for name, m, threads, base, *libs in rows:
        line = f"{name:<15}{m:>10,}{threads:>8}{base:>10.1f}"
        for ns, ratio, spread in libs:
            line += f"{ns:>9.1f} ({spread:4.0%}){ratio:>6.2f}x"
        print(line)


if __name__ == "__main__":
    main()
