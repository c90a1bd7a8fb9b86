"""engine/tools/atoms.py: neighbour lists (cell lists equal brute force), forces assembled from dE_dR
equal -dE/dx of the total energy, and the per-atom virials sum to -dE/d(strain)."""
from __future__ import annotations

import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from adgrad.engine import api
from adgrad.engine.tools import atoms

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))
from make_crystal import crystal  # noqa: E402

CUTOFF = 6.0       # data/Cu_zhou04.eam.alloy's
WIDTH = 96         # neighbour slots: enough for a strained fcc crystal within 6 A


@pytest.fixture(scope="module")
def kernel():
    """The shipped copper model (configs/cu_eam_model.yaml) with room for strained crystals."""
    model = api.load_model(str(ROOT / "configs" / "cu_eam_model.yaml"),
                           input_shapes={"R": [WIDTH, 3], "valid": [WIDTH], "sn": [WIDTH]})
    return api.compile_model(model, derivatives=[("E", "R")])


def energy_and_gradient(kernel, x, cell):
    nb = atoms.neighbours(x, cell, CUTOFF, max_neighbours=WIDTH)
    out = kernel.evaluate({"R": nb["R"], "valid": nb["valid"], "s": nb["species"].astype(float),
                           "sn": nb["neighbour_species"].astype(float)})
    return out["E"].sum(), out["dE_dR"], nb


@pytest.mark.parametrize("lattice, a, reps", [("fcc", 3.615, 4), ("diamond", 5.431, 3)])
def test_cell_lists_equal_brute_force(lattice, a, reps):
    x, cell = crystal(lattice, a, reps, 0.3, seed=1)
    binned = atoms.neighbours(x, cell, 4.0)
    # a cell too small for cell lists takes the brute-force path; compare on the same atoms
    brute = atoms._images(x, cell, 4.0)
    for i, (d, j) in enumerate(brute):
        k = len(j)
        np.testing.assert_array_equal(binned["index"][i, :k], j)
        np.testing.assert_allclose(binned["R"][i, :k], d, atol=1e-12)
        assert np.all(binned["index"][i, k:] == -1) and np.all(binned["valid"][i, k:] == 0)


def test_forces_are_minus_the_gradient_of_the_total_energy(kernel):
    x, cell = crystal("fcc", 3.615, 4, 0.15, seed=2)
    _, g, nb = energy_and_gradient(kernel, x, cell)
    f = atoms.forces(g, nb["index"])
    h = 1e-5
    for atom in (0, 17, 200):
        for c in range(3):
            up, dn = x.copy(), x.copy()
            up[atom, c] += h
            dn[atom, c] -= h
            fd = -(energy_and_gradient(kernel, up, cell)[0] - energy_and_gradient(kernel, dn, cell)[0]) / (2 * h)
            assert f[atom, c] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert np.abs(f.sum(axis=0)).max() < 1e-10          # Newton's third law


def test_virials_sum_to_minus_the_strain_derivative(kernel):
    x, cell = crystal("fcc", 3.615, 4, 0.15, seed=3)
    _, g, nb = energy_and_gradient(kernel, x, cell)
    W = atoms.virial(g, nb["R"]).sum(axis=0)
    h = 1e-6
    for a in range(3):
        for b in range(3):
            eps = np.zeros((3, 3))
            eps[a, b] = h
            up = energy_and_gradient(kernel, x @ (np.eye(3) + eps).T, cell @ (np.eye(3) + eps).T)[0]
            dn = energy_and_gradient(kernel, x @ (np.eye(3) - eps).T, cell @ (np.eye(3) - eps).T)[0]
            assert W[b, a] == pytest.approx(-(up - dn) / (2 * h), rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(W, W.T, atol=1e-8)     # no torque: the virial is symmetric


def test_forces_in_parts_equal_a_plain_scatter_on_any_thread_count():
    """atoms.forces adds PARTS partial scatters in order: numpy's np.add.at to round-off, and the same
    bits on 1 and 2 threads; with natoms, rows may name atoms beyond themselves (n < natoms)."""
    x, cell = crystal("fcc", 3.615, 4, 0.2, seed=4)
    nb = atoms.neighbours(x, cell, 5.0)
    g = np.random.default_rng(0).normal(size=nb["R"].shape)
    index = nb["index"]
    want = np.zeros((len(x), 3))
    rows, slots = np.nonzero(index >= 0)
    np.add.at(want, rows, g[rows, slots])
    np.add.at(want, index[rows, slots], -g[rows, slots])
    before = numba.get_num_threads()
    try:
        got = []
        for threads in (1, 2):
            numba.set_num_threads(threads)
            got.append(atoms.forces(g, index))
    finally:
        numba.set_num_threads(before)
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-12)
    assert got[0].tobytes() == got[1].tobytes()
    first = atoms.forces(g[:5], index[:5], natoms=len(x))      # five atoms' site energies only
    assert first.shape == (len(x), 3) and np.count_nonzero(first.any(axis=1)) > 5
    np.testing.assert_allclose(first.sum(axis=0), 0.0, atol=1e-12)    # every pair term: +g and -g
