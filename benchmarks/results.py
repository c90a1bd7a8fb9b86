"""Regenerate benchmarks/RESULTS.md: run every benchmark script, one after another, and write what each
printed under its command, with the date, the commit, the CPU and the load average around it.

    python benchmarks/results.py                 # every script at its default size (about an hour on 2 cores)
    python benchmarks/results.py --quick         # each script's --quick size where it has one
    python benchmarks/results.py --only eam j2   # these sections, the others kept as they are in RESULTS.md

RESULTS.md holds the present only (the history is git's): each script's tables and targets (condense leaves
out its accuracy checks, first calls and progress lines); a section that was not run is kept from the
file as it was, with its own date; a script that fails is shown failing, with the end of its stderr.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import cpu_model  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"

# name -> (title, arguments of the script, extra arguments with --quick). The order is the file's.
SECTIONS = {
    "eam": ("EAM, seed 000 (adgrad, hand-written numba, JAX)", ["eam.py", "--repeats", "11"], ["--quick"]),
    "potentials": ("Cu EAM from LAMMPS's tables, against LAMMPS's pair time", ["potentials.py", "--repeats", "7"],
                   ["--quick"]),
    "neohookean": ("Neo-Hookean stress and tangent", ["neohookean.py"], ["--quick"]),
    "continuum": ("Ogden stress and tangent (hand-written, felupe, hyperelastic)", ["continuum.py", "--repeats", "9"],
                  ["--quick"]),
    "j2": ("J2 plasticity with Voce hardening (a local Newton solve)", ["j2.py"], ["--quick"]),
    "formulations": ("Seed 001 formulations", ["formulations.py"], ["--quick"]),
    "gaussian": ("Seed 002 Gaussian residual", ["gaussian.py"], ["--quick"]),
    "vecmath": ("Vectorized elementary functions against libm", ["vecmath.py"], ["--sizes", "1000000"]),
    "endtoend": ("End-to-end `adgrad run` against compute only", ["endtoend.py"], ["--points", "200000"]),
    "resume": ("What `--resume` pays to verify its input", ["resume.py"], ["--points", "200000"]),
    "simulations": ("adgrad's ASE calculator per MD step, against LAMMPS's fix nve (the felupe material: below)",
                    ["simulations.py", "--md-only"], ["--quick"]),
    "felupe_material": ("The felupe material", ["felupe_material.py"], ["--quick"]),
    "direct": ("Kernels translated by codegen/direct.py against numba's front end (run time)", ["direct.py",
               "--repeats", "31"], []),
    "compile_times": ("Cold compile times, as a new install pays them", ["compile_times.py"], []),
    "native": ("The exported native library against the numba kernel", ["native.py"], ["--quick"]),
    "kim_lammps": ("adgrad's KIM models in LAMMPS against LAMMPS's own pair styles", ["kim_lammps.py"],
                   ["--steps", "50", "--repeats", "2"]),
    "neighbours": ("Neighbour lists: adgrad's cell list, the ASE calculator's, matscipy's, LAMMPS's",
                   ["neighbours.py"], []),
    "calculix": ("A CalculiX job with the exported J2 UMAT against CalculiX's own", ["calculix.py"],
                 ["--size", "6", "--repeats", "3"]),
}



# lines of a script's output that the file leaves out: per-kernel accuracy checks and first calls (each
# script fails when a check does), its command (the section gives it), notes repeated in every table,
# compile_times's progress lines (its table has them)
NOISE = re.compile(r"^\s+check |first call|^command: |^\s+JAX rows skipped|^spread = |^each in a fresh process"
                   r"|^  \S+: cold [0-9.]+ s$")


def condense(text):
    return "\n".join(line for line in text.splitlines() if not NOISE.search(line))


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commit():
    r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def run_section(name, quick, timeout):
    title, args, quick_args = SECTIONS[name]
    argv = [sys.executable, str(HERE / args[0]), *args[1:], *(quick_args if quick else [])]
    shown = "python " + shlex.join(["benchmarks/" + args[0], *argv[2:]])
    before, t0 = load_average(), time.time()
    try:
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        out, status = r.stdout.rstrip(), r.returncode
        err = r.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace").rstrip() if isinstance(exc.stdout, bytes) else (
            exc.stdout or "").rstrip()
        status, err = None, f"stopped after {timeout} s (--timeout)"
    head = (f"## {name}: {title}\n\n`{shown}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}, "
            f"{time.time() - t0:.0f} s, load average {before} before and {load_average()} after")
    if status != 0:
        tail = "\n".join(err.strip().splitlines()[-15:])
        head += f"\n\n**Failed** ({'timeout' if status is None else f'exit {status}'}):\n\n```\n{tail}\n```"
    return f"{head}\n\n```\n{out}\n```\n" if out else head + "\n"


def kept_sections(text):
    """name -> section text of RESULTS.md as it is (sections start with '## name: ')."""
    parts = re.split(r"(?m)^(?=## )", text)
    return {m.group(1): p.rstrip() + "\n" for p in parts if (m := re.match(r"## (\w+): ", p))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run these sections; keep the others")
    ap.add_argument("--quick", action="store_true", help="each script's quick size (noted in its command)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per script (default 3600)")
    ap.add_argument("-o", "--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    old = kept_sections(args.output.read_text()) if args.output.exists() else {}
    sections = {}
    for name in SECTIONS:
        if args.only and name not in args.only:
            if name in old:
                sections[name] = old[name]
            continue
        print(f"results: {name} ...", file=sys.stderr, flush=True)
        sections[name] = run_section(name, args.quick, args.timeout)
    cmd = "python benchmarks/results.py" + (" --quick" if args.quick else "") + (
        f" --only {' '.join(args.only)}" if args.only else "")
    kept = " (the other sections kept from the file before, each with its date)" if args.only else ""
    header = "# Benchmark results\n\n" + textwrap.fill(
        f"Regenerated by `{cmd}`{kept} on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit "
        f"{commit()}, on {cpu_model()} ({os.cpu_count()} cores), shared and noisy: each section gives its own "
        f"date and load average. Every figure is a median of its script's timed calls; ratios compare rows of "
        f"one run. Earlier figures are in git's history of this file.", 100) + "\n"
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(header + "".join("\n" + condense(s).rstrip() + "\n" for s in sections.values()))
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
