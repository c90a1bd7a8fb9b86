"""Write the input of a site-energy run: a periodic crystal with displaced atoms and its padded
neighbour arrays (adgrad.engine.tools.atoms.neighbours), one point per atom.

Datasets (M = atoms, N = the largest neighbour count): R (M, N, 3) neighbour vectors x_j - x_i,
valid (M, N), s (M,) species, sn (M, N) neighbour species, index (M, N) neighbour atom (-1: padding);
and, for assembling forces, positions (M, 3) and cell (3, 3) as attributes of the root.

    python data/make_crystal.py                          # data/cu_points.h5: fcc Cu, 4x4x4 cells
    python data/make_crystal.py --lattice diamond --a 5.431 --cutoff 3.77 -o si_points.h5
"""
import argparse
from pathlib import Path

import h5py
import numpy as np
from adgrad.engine.tools.atoms import neighbours

BASES = {"fcc": [[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]}
BASES["diamond"] = BASES["fcc"] + [[x + 0.25, y + 0.25, z + 0.25] for x, y, z in BASES["fcc"]]


def crystal(lattice, a, reps, jitter, seed):
    base = np.array(BASES[lattice])
    cells = np.array([[i, j, k] for i in range(reps) for j in range(reps) for k in range(reps)])
    x = ((cells[:, None, :] + base[None]) * a).reshape(-1, 3)
    x += np.random.default_rng(seed).uniform(-jitter, jitter, x.shape)
    return np.mod(x, a * reps), np.eye(3) * a * reps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lattice", choices=sorted(BASES), default="fcc")
    p.add_argument("--a", type=float, default=3.615, help="lattice constant (A)")
    p.add_argument("--reps", type=int, default=4, help="cells along each axis")
    p.add_argument("--jitter", type=float, default=0.1, help="random displacement, +- (A)")
    p.add_argument("--cutoff", type=float, default=6.0, help="neighbour cutoff (A)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default=str(Path(__file__).resolve().parent / "cu_points.h5"))
    args = p.parse_args()
    x, cell = crystal(args.lattice, args.a, args.reps, args.jitter, args.seed)
    nb = neighbours(x, cell, args.cutoff)
    with h5py.File(args.output, "w") as f:
        f["R"], f["valid"], f["index"] = nb["R"], nb["valid"], nb["index"]
        f["s"], f["sn"] = nb["species"].astype(float), nb["neighbour_species"].astype(float)
        f["positions"] = x
        f.attrs["cell"] = cell
    print(f"wrote {args.output}: {len(x)} atoms, {nb['R'].shape[1]} neighbour slots")


if __name__ == "__main__":
    main()
