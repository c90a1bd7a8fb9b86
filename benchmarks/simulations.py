"""adgrad in simulation loops: ms per MD step of adgrad's ASE calculator (adgrad.ase.AdgradCalculator on
the shipped copper model) against LAMMPS's own `fix nve`, ASE's EMT and matscipy's EAM calculator, and
optionally the calculator of an earlier commit (--baseline REV, in the same run), then seconds per felupe
material evaluation at 512k points against felupe's own (benchmarks/felupe_material.py, also run alone;
--md-only skips it).

A step is what an MD integrator asks of a calculator: new positions, then get_forces() and get_stress(),
the neighbour list included. Every calculator replays the same trajectory of --steps frames (fcc Cu
displaced by up to 0.05 A, then velocity Verlet at 600 K with 2 fs steps, run once beforehand with
adgrad), one pass = all frames in order; passes are interleaved across calculators and the median
pass is reported per step. The potential is Cu_u3.eam from the installed lammps package for both
adgrad (configs/cu_eam_model.yaml reading it) and matscipy (matscipy.calculators.eam.EAM, kind
"eam"); EMT is ASE's own Cu (a different potential, for scale). Rows:
  adgrad, skin 0       adgrad's neighbour list (adapters/ase/neighbours.py) rebuilt at every step, as
                       matscipy's EAM rebuilds its own
  adgrad, skin 0.5 A   the list kept until an atom moves 0.25 A (the calculator's default): rebuilt once
                       per pass here, when the replay jumps from the last frame back to the first
  matscipy neighbour_list alone   neighbour_list("ijS") within 4.95 A: the floor of a rebuilt list
  adgrad neighbour list alone     adgrad.ase's list within 4.95 A (what the calculator builds), for scale
  adgrad @REV, skin 0 / 0.5 A     --baseline REV: adapters/ase as committed at REV (git archive), the same
                                  engine and kernels
  LAMMPS fix nve, skin 0.5 A      LAMMPS (the lammps package) integrating the same crystal with Cu_u3.eam:
                                  velocity 600 K, 2 fs, `neighbor 0.5 bin`, `run {steps} pre no post no`
                                  per pass (a whole step: forces, integration, neighbour list when due);
                                  on --threads OpenMP threads (-sf omp) when more than 1
adgrad runs on --threads numba threads; matscipy, EMT and the neighbour lists are single-threaded. The
CPU model and the load average (before and after) are printed with the table.

    python benchmarks/simulations.py                # 500 and 4000 atoms
    python benchmarks/simulations.py --quick        # 500 atoms
    python benchmarks/simulations.py --md-only --baseline 1d54b1a     # before/after in one run
adgrad's kernels run on threads of its own (engine/kernel.py run_threads), not numba's OpenMP threads.
"""
import argparse
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
from pathlib import Path

import numba
import numpy as np
from ase import units
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.md.verlet import VelocityVerlet
from matscipy.calculators.eam import EAM
from matscipy.neighbours import neighbour_list

from _harness import SPREAD_NOTE, add_timing_options, environment, print_command, time_calls

ROOT = Path(__file__).resolve().parents[1]
_saved, _here = sys.path[:], Path(__file__).resolve().parent
# tests/lammps_oracle.py loads the lammps package, which benchmarks/lammps.py would shadow from this directory
sys.path[:] = [str(ROOT / "tests")] + [d for d in sys.path if Path(d or ".").resolve() != _here]
try:
    import lammps_oracle as lo  # noqa: E402
finally:
    sys.path[:] = _saved

from adgrad.ase import AdgradCalculator  # noqa: E402
from adgrad.ase.neighbours import lattice, neighbour_list as adgrad_neighbour_list  # noqa: E402

CUTOFF = 4.95       # Cu_u3.eam's


def trajectory(calc, reps, steps):
    """`steps` frames of velocity Verlet (600 K, 2 fs) of reps^3 conventional fcc Cu cells."""
    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat(reps)
    rng = np.random.default_rng(0)
    atoms.positions += rng.uniform(-0.05, 0.05, atoms.positions.shape)
    v = rng.normal(size=(len(atoms), 3)) * np.sqrt(600 * units.kB / atoms.get_masses())[:, None]
    atoms.set_velocities(v - v.mean(axis=0))
    atoms.calc = calc
    frames = []
    md = VelocityVerlet(atoms, timestep=2.0 * units.fs)
    md.attach(lambda: frames.append(atoms.positions.copy()), interval=1)
    md.run(steps - 1)
    return atoms, frames


def replay(atoms, frames):
    """One pass: each frame's positions, then forces and stress."""
    def run():
        for x in frames:
            atoms.positions = x
            atoms.get_forces()
            atoms.get_stress()
    return run


def lammps_nve(reps, steps, threads):
    """A callable running `steps` steps of LAMMPS's fix nve on reps^3 fcc Cu cells (Cu_u3.eam, 600 K, 2 fs,
    skin 0.5 A), set up once: each call continues the run without setup (pre no)."""
    args = ["-screen", "none", "-log", "none", "-nocite"]
    if threads > 1:
        args += ["-sf", "omp", "-pk", "omp", str(threads)]
    lmp = lo.lammps.lammps(cmdargs=args)
    lmp.commands_string(f"""
        units metal
        atom_style atomic
        lattice fcc 3.615
        region box block 0 {reps} 0 {reps} 0 {reps}
        create_box 1 box
        create_atoms 1 box
        mass 1 63.546
        displace_atoms all random 0.05 0.05 0.05 4271 units box
        pair_style eam
        pair_coeff 1 1 {lo.potential("Cu_u3.eam")}
        velocity all create 600.0 376847 loop geom
        neighbor 0.5 bin
        neigh_modify every 1 delay 0 check yes
        fix 1 all nve
        timestep 0.002
        thermo 0
        run 0
    """)
    return lambda: lmp.command(f"run {steps} pre no post no")


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


def bench(model, reps, args, before):
    """name -> (warm-up s, median pass s, spread), atoms, frames."""
    calcs = {"adgrad, skin 0": AdgradCalculator(model, CUTOFF, {"Cu": 0}, skin=0.0),
             "adgrad, skin 0.5 A": AdgradCalculator(model, CUTOFF, {"Cu": 0}, skin=0.5)}
    if before is not None:
        calcs[f"adgrad @{args.baseline}, skin 0"] = before(model, CUTOFF, {"Cu": 0}, skin=0.0)
        calcs[f"adgrad @{args.baseline}, skin 0.5 A"] = before(model, CUTOFF, {"Cu": 0}, skin=0.5)
    calcs.update({"matscipy EAM": EAM(lo.potential("Cu_u3.eam"), kind="eam"), "ASE EMT": EMT()})
    atoms, frames = trajectory(AdgradCalculator(model, CUTOFF, {"Cu": 0}), reps, args.steps)
    moved = np.linalg.norm(frames[-1] - frames[0], axis=1).max()
    print(f"\n{len(atoms):,} atoms, {args.steps} frames, largest displacement over the trajectory {moved:.2f} A")
    copies = {name: atoms.copy() for name in calcs}
    for name, calc in calcs.items():
        copies[name].calc = calc
    runners = {name: (replay(copies[name], frames), None) for name in calcs}
    runners["LAMMPS fix nve, skin 0.5 A"] = (lammps_nve(reps, args.steps, args.threads), None)
    runners["matscipy neighbour_list alone"] = (
        lambda: [neighbour_list("ijS", copies["ASE EMT"], CUTOFF) for _ in frames], None)
    basis, inverse = lattice(atoms.cell.array, atoms.pbc)
    runners["adgrad neighbour list alone"] = (
        lambda: [adgrad_neighbour_list(x, basis, inverse, atoms.pbc, CUTOFF) for x in frames], None)
    timed = time_calls(runners, (), args.repeats)
    ours, theirs = copies["adgrad, skin 0"], copies["matscipy EAM"]
    energy = relative(ours.get_potential_energy(), theirs.get_potential_energy())
    print(f"  adgrad {calcs['adgrad, skin 0'].width} neighbour slots; adgrad vs matscipy EAM on the last frame "
          f"(different interpolation of the same table): energy {energy:.1e}, "
          f"forces {relative(ours.get_forces(), theirs.get_forces()):.1e}, "
          f"stress {relative(ours.get_stress(), theirs.get_stress()):.1e} relative")
    return timed, len(atoms)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_timing_options(p)
    p.add_argument("--quick", action="store_true", help="500 atoms only")
    p.add_argument("--baseline", metavar="REV", help="also time adapters/ase as committed at REV")
    p.add_argument("--steps", type=int, default=20, help="frames per pass (default 20)")
    p.add_argument("--md-only", action="store_true", help="skip the felupe material benchmark")
    args = p.parse_args(argv)
    numba.set_num_threads(args.threads)
    print_command()
    load = machine()
    with tempfile.TemporaryDirectory() as tmp:      # the shipped copper model, on LAMMPS's Cu_u3 tables
        model = Path(tmp) / "cu.yaml"
        text = (ROOT / "configs" / "cu_eam_model.yaml").read_text()
        model.write_text(re.sub(r"\{potential: [^}]*\}", "{potential: %s}" % lo.potential("Cu_u3.eam"), text))
        before = baseline(args.baseline, tmp) if args.baseline else None
        results = [bench(model, reps, args, before) for reps in ((5,) if args.quick else (5, 10))]
    print(f"\n{environment()}\n{load} (before); {machine().split(', load average ')[1]} (after)\n")
    print("| atoms | calculator | ms/step (median pass) | spread | / adgrad skin 0 |")
    print("|---:|---|---:|---:|---:|")
    for timed, n in results:
        base = timed["adgrad, skin 0"][1]
        for name, (_, med, spread) in timed.items():
            print(f"| {n:,} | {name} | {med / args.steps * 1e3:.2f} | {spread:.0%} | {med / base:.2f} |")
    print(SPREAD_NOTE + " (passes)")
    for timed, n in results:
        ratio = timed["matscipy EAM"][1] / timed["adgrad, skin 0"][1]
        print(f"target at {n:,} atoms: matscipy EAM / adgrad, skin 0 (each rebuilds its list every step) >= 3: "
              f"{ratio:.2f}")
        ratio = timed["adgrad, skin 0.5 A"][1] / timed["LAMMPS fix nve, skin 0.5 A"][1]
        print(f"target at {n:,} atoms (issue 29): adgrad, skin 0.5 A / LAMMPS fix nve <= 1.0: {ratio:.2f}")
    if not args.md_only:
        import felupe_material
        print()
        felupe_material.main(["--threads", str(args.threads), "--repeats", str(args.repeats)] +
                             (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
