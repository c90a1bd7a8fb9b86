"""Cold compile times as a new install pays them (issue 27, item 1): every shipped example config as
`adgrad run` compiles it, every library model of configs/models/ with the derivatives its users ask
(W, P = dW/dF, A = d2W/dF2; sigma, the state and the consistent tangent dsigma/deps), the site
energies E and dE/dR of EAM, SW and Tersoff at 8 to 112 neighbour slots (the ASE calculator's
kernels: it compiles E and dE/dR at a multiple of 8 slots), and the felupe Material's two kernels.

Each case runs in a fresh process with its own empty ADGRAD_CACHE_DIR (so adgrad's cache=True numba
helpers in its helpers/ directory compile too) and NUMBA_CACHE_DIR, then once more from the caches
that run filled. Reported in CPU seconds (user + system), which a busy machine changes far less than
wall time: `compile` is compile_model's (time.process_time around it in the child; for felupe, each of
the Material's two kernels, P and A, until its log line says it is compiled, the bar, and beside it the
whole first use: construction and a first gradient and hessian call), `process` the whole child's
(resource.getrusage(RUSAGE_CHILDREN): Python, imports, compile).
Rounds are interleaved across the cases; the table gives medians.

    python benchmarks/compile_times.py                            # every case, 1 round
    python benchmarks/compile_times.py --rounds 3 --only hencky ogden si_sw:8
    python benchmarks/compile_times.py --list                     # the case names
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import cpu_model, print_command

ROOT = Path(__file__).resolve().parent.parent
TARGET = 3.0          # CPU seconds of a cold compile, every case of issue 27 item 1
TARGET_LINALG = 10.0  # the 16x16 det/inv gradients (issue 12)
HYPERELASTIC = ["arruda_boyce", "extended_tube", "gent", "hencky", "mooney_rivlin", "neo_hooke", "ogden",
                "saint_venant_kirchhoff", "third_order_deformation", "van_der_waals", "yeoh"]
PLASTIC = ["j2_voce", "linear_elastic_plastic_isotropic_hardening"]
POTENTIALS = {"cu_eam": "configs/cu_eam_model.yaml", "si_sw": "configs/si_sw_model.yaml",
              "si_tersoff": "configs/si_tersoff_model.yaml"}
SLOTS = (8, 16, 32, 64, 112)
FELUPE = {"neo_hooke": {}, "ogden": {}, "j2_voce": {"strain": "small"}}     # name -> Material's arguments
LINALG = {
    "det16": "adgrad: 1\nname: det16\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  D: det(A)\n",
    "inv16": "adgrad: 1\nname: inv16\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  S: sum(inv(A))\n",
}

CHILD = """\
import json, sys, time
case = json.loads(sys.argv[1])
from adgrad.engine import compile_model, load_model
from adgrad.engine.model import build
from adgrad.engine.spec import load_config_file
if case["kind"] == "config":
    from adgrad.engine.tools.bench import requests
    config = load_config_file(case["path"])
    model = build(config.model).with_params(config.params)
    derivatives, mode, values, math = requests(model, config)
    args = dict(mode=mode, values=values, math=math)
elif case["kind"] == "model":
    model = load_model(case["path"], sizes=case.get("sizes"))
    derivatives, args = [tuple(d) for d in case["derivatives"]], dict(values=case.get("values"))
else:
    import numpy as np
    from adgrad.felupe import Material
t = time.process_time()
out = {}
if case["kind"] == "felupe":           # first use: the kernels, then a gradient and a hessian call
    done = [t]                          # CPU time at the start and as each kernel is compiled (its log line)
    umat = Material(case["path"], log=lambda line: line.startswith("adgrad: compiled ") and
                    done.append(time.process_time()), **case["arguments"])
    F = np.eye(3)[:, :, None, None] + 0.01 * np.random.default_rng(0).standard_normal((3, 3, 4, 10))
    x = [F, np.zeros((sum(umat.sizes) if umat.state else 1, 4, 10))]
    umat.gradient(x)
    umat.hessian(x)
    if len(done) == 3:
        out["kernels"] = [b - a for a, b in zip(done, done[1:])]
else:
    compile_model(model, derivatives, **args)
print(json.dumps({"compile": time.process_time() - t, **out}))
"""


def cases(folder):
    """name -> (case for CHILD, target, what it is)."""
    out = {}
    for p in sorted((ROOT / "configs").glob("*.yaml")):
        if not p.stem.endswith("_model") and "model:" in p.read_text():
            out[p.stem] = ({"kind": "config", "path": str(p)}, TARGET,
                           "configs/" + p.name + " as `adgrad run` compiles it")
    wpa = [["W", "F"], ["W", ["F", "F"]]]
    for name in HYPERELASTIC:
        out[name] = ({"kind": "model", "path": str(ROOT / "configs/models" / f"{name}.yaml"), "derivatives": wpa},
                     TARGET, "W, P, A")
    for name in PLASTIC:
        out[name] = ({"kind": "model", "path": str(ROOT / "configs/models" / f"{name}.yaml"),
                      "derivatives": [["sigma", "eps"]]}, TARGET, "sigma, eps_p_new, alpha_new, dsigma/deps")
    for name, path in POTENTIALS.items():
        for n in SLOTS:
            out[f"{name}:{n}"] = ({"kind": "model", "path": str(ROOT / path), "sizes": {"N": n},
                                   "derivatives": [["E", "R"]], "values": ["E"]}, TARGET, f"E, dE/dR, {n} slots")
    for name, arguments in FELUPE.items():
        out[f"felupe:{name}"] = ({"kind": "felupe", "path": str(ROOT / "configs/models" / f"{name}.yaml"),
                                  "arguments": arguments}, TARGET,
                                 "adgrad.felupe.Material's kernels P and A, each (first use: both and a first "
                                 "gradient and hessian call)")
    for name, text in LINALG.items():
        path = Path(folder) / f"{name}.yaml"
        path.write_text(text)
        out[name] = ({"kind": "model", "path": str(path), "derivatives": [[next(iter(_outputs(text))), "A"]]},
                     TARGET_LINALG, "gradient of " + ("det" if name == "det16" else "sum(inv)") + " of 16x16")
    return out


def _outputs(text):
    return [line.split(":")[0].strip() for line in text.split("outputs:\n")[1].splitlines()]


def run_case(case):
    """(compile CPU s, process CPU s) of `case` in a fresh process, cold then cached: an empty
    ADGRAD_CACHE_DIR (with its helpers/) and NUMBA_CACHE_DIR, then the same ones again."""
    with tempfile.TemporaryDirectory(prefix="adgrad-compile-") as cache:
        env = {**os.environ, "ADGRAD_CACHE_DIR": cache, "NUMBA_CACHE_DIR": os.path.join(cache, "numba")}
        out = []
        for _ in range(2):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], env=env, capture_output=True,
                                 text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if res.returncode != 0:
                sys.exit(f"case {case} failed:\n{res.stderr.strip()}")
            process = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            got = json.loads(res.stdout.splitlines()[-1])
            out.append((got["compile"], process, got.get("kernels")))
    return out



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="fresh-process compiles per case (median)")
    parser.add_argument("--only", nargs="*", help="case names (--list); a name ending in ':' takes every "
                                                  "case it starts (si_sw: for every slot count)")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        every = cases(folder)
        if args.list:
            print("\n".join(f"{n}: {what}" for n, (_, _, what) in every.items()))
            return 0
        only = args.only or []
        todo = {n: c for n, c in every.items()
                if not only or n in only or any(o.endswith(":") and n.startswith(o) for o in only)}
        unknown = [o for o in only if not o.endswith(":") and o not in every]
        if unknown:
            sys.exit(f"unknown case {unknown}; --list names them")
        print_command()
        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; python {platform.python_version()}; "
              f"load average at start {', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        runs = {n: [] for n in todo}
        for _ in range(args.rounds):
            for name, (case, _, _) in todo.items():
                runs[name].append(run_case(case))
                print(f"  {name}: cold {runs[name][-1][0][0]:.2f} s", file=sys.stderr, flush=True)
    print(f"\n| case | what | cold compile (CPU s) | cold process (CPU s) | cached compile (CPU s) | target |")
    print("|---|---|---:|---:|---:|---|")
    met = 0
    for name, (_, target, what) in todo.items():
        cold = statistics.median(r[0][0] for r in runs[name])
        process = statistics.median(r[0][1] for r in runs[name])
        cached = statistics.median(r[1][0] for r in runs[name])
        spread = "" if args.rounds == 1 else \
            f" ({min(r[0][0] for r in runs[name]):.2f}-{max(r[0][0] for r in runs[name]):.2f})"
        if runs[name][0][0][2]:         # a Material: the bar is each kernel's compile, the first use is shown too
            kernels = [statistics.median(r[0][2][k] for r in runs[name]) for k in range(2)]
            what = f"{what}: P {kernels[0]:.2f}, A {kernels[1]:.2f}, first use {cold:.2f}"
            cold, spread = max(kernels), ""
        met += cold < target
        print(f"| {name} | {what} | {cold:.2f}{spread} | {process:.2f} | {cached:.2f} | "
              f"< {target:g} s: {'met' if cold < target else 'missed'} |")
    print(f"\n{met} of {len(todo)} cases met their target; load average at end "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; median of {args.rounds} round(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
