"""engine/tools/atoms.py: neighbour lists (cell lists equal brute force), forces assembled from dE_dR
equal -dE/dx of the total energy, and the per-atom virials sum to -dE/d(strain)."""
from __future__ import annotations

import itertools
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


def brute_force(x, cell, pbc, cutoff):
    """Per atom: (neighbour indices, vectors) of every image of every atom within the cutoff, from every
    image shift within reach, by numpy."""
    periodic = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,))
    reach = [0, 0, 0]
    if periodic.any():
        h = 1.0 / np.linalg.norm(np.linalg.inv(np.where(periodic[:, None], cell, np.eye(3))), axis=0)
        reach = [int(np.ceil(cutoff / h[c])) + 2 if periodic[c] else 0 for c in range(3)]
    shifts = np.array(list(itertools.product(*[range(-k, k + 1) for k in reach])), dtype=np.float64)
    vectors = shifts @ np.where(periodic[:, None], cell, 0.0)
    out = []
    for i in range(len(x)):
        d = x[None, :, :] + vectors[:, None, :] - x[i]
        r = np.linalg.norm(d, axis=2)
        keep = r < cutoff
        keep[np.flatnonzero(~shifts.any(axis=1)), i] = False        # the atom itself
        img, j = np.nonzero(keep)
        out.append((j, d[img, j]))
    return out


def canonical(j, d):
    order = np.lexsort((d[:, 2].round(9), d[:, 1].round(9), d[:, 0].round(9), j))
    return j[order], d[order]


def assert_equal_brute_force(x, cell, pbc, cutoff, species=None):
    nb = atoms.neighbours(x, cell, cutoff, species, pbc=pbc)
    counts = (nb["index"] >= 0).sum(axis=1)
    for i, (j, d) in enumerate(brute_force(x, cell, pbc, cutoff)):
        k = counts[i]
        assert k == len(j), f"atom {i}: {k} neighbours, brute force {len(j)}"
        got = canonical(nb["index"][i, :k], nb["R"][i, :k])
        want = canonical(j, d)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-11)
        r = np.linalg.norm(nb["R"][i, :k], axis=1)
        assert np.all(np.diff(r) >= -1e-12)                              # nearest first
        assert np.all(nb["valid"][i, :k] == 1) and np.all(nb["valid"][i, k:] == 0)
        assert np.all(nb["index"][i, k:] == -1) and np.all(nb["R"][i, k:] == 0)
        s = np.zeros(len(x), dtype=int) if species is None else species
        np.testing.assert_array_equal(nb["neighbour_species"][i], np.where(nb["index"][i] >= 0, s[nb["index"][i]], 0))
    return nb


SKEW = np.array([[1.0, 0.0, 0.0], [0.45, 0.9, 0.0], [-0.3, 0.35, 0.8]])
CELLS = {   # name: (cell, pbc, atoms, cutoff)
    "cubic": (np.eye(3) * 14.0, True, 300, 4.5),
    "skewed": (SKEW * 16.0, True, 300, 4.5),
    "thinner than the cutoff": (np.diag([15.0, 14.0, 2.5]), True, 60, 4.0),
    "tiny skewed, many images": (SKEW * 2.2, True, 3, 5.0),
    "free cluster": (np.zeros((3, 3)), False, 200, 4.0),
    "skewed slab": (np.array([[12.0, 0, 0], [5.0, 11.0, 0], [0, 0, 0]]), (True, True, False), 150, 4.0),
    "wire": (np.array([[0, 0, 0], [0, 0, 0], [1.0, 2.0, 9.0]]), (False, False, True), 80, 3.5),
    "sparse, large": (np.eye(3) * 1e4, True, 5, 6.0),
}


@pytest.mark.parametrize("name", sorted(CELLS))
@pytest.mark.parametrize("seed", [0, 1])
def test_cell_lists_equal_brute_force(name, seed):
    """Random atoms in periodic, skewed, thin, free and mixed cells, some outside the cell: every
    neighbour and vector of brute force over the images, nearest first, padding after."""
    cell, pbc, n, cutoff = CELLS[name]
    rng = np.random.default_rng(seed)
    f = rng.uniform(-0.3, 1.3, (n, 3))                       # also beyond the cell's faces
    box = np.where(np.broadcast_to(np.asarray(pbc), (3,))[:, None], cell, np.eye(3) * 10.0)
    x = f @ box
    assert_equal_brute_force(x, cell, pbc, cutoff, rng.integers(0, 3, n))


def test_crystals_equal_brute_force_and_sizes():
    """fcc and diamond crystals (exact ties of distances) as data/make_crystal.py writes them; padding
    to max_neighbours; no atoms; a refused cell, positions and species."""
    for lattice, a, reps in (("fcc", 3.615, 3), ("diamond", 5.431, 2)):
        x, cell = crystal(lattice, a, reps, 0.0, seed=1)
        nb = assert_equal_brute_force(x, cell, True, 4.0)
        assert nb["R"].shape[1] == (18 if lattice == "fcc" else 16)
    nb = atoms.neighbours(x, cell, 3.0, max_neighbours=20)
    assert nb["R"].shape == (len(x), 20, 3) and np.all(nb["index"][:, 16:] == -1)
    with pytest.raises(ValueError, match="more than max_neighbours=3"):
        atoms.neighbours(x, cell, 3.0, max_neighbours=3)
    empty = atoms.neighbours(np.zeros((0, 3)), cell, 3.0)
    assert empty["R"].shape == (0, 0, 3) and empty["species"].shape == (0,)
    for args, phrase in (((x, cell * [[1], [1], [0]], 3.0), "zero or linearly dependent"),
                         ((x + np.nan, cell, 3.0), "with NaN or infinity"),
                         ((x, cell, 0.0), "cutoff: a finite distance > 0"),
                         ((x, cell, 3.0, np.zeros(2)), "species: one index per atom"),
                         ((x[:2], np.eye(3) * 1e-6, 3.0), "too thin for the cutoff")):
        with pytest.raises(ValueError, match=phrase):
            atoms.neighbours(*args)


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


def test_the_same_lists_on_any_number_of_threads():
    """The search runs in parts of at least cell_list.PART atoms, one per thread: each atom's list, and so
    every array, is the same bits on one thread or two."""
    from adgrad.engine.tools import cell_list
    x, cell = crystal("fcc", 3.615, 13, 0.2, seed=5)
    assert len(x) >= 2 * cell_list.PART
    before = numba.get_num_threads()
    try:
        got = []
        for threads in (1, 2):
            numba.set_num_threads(threads)
            assert len(cell_list.pairs(x, cell, np.ones(3, bool), 4.0).parts) == threads + 1
            got.append(atoms.neighbours(x, cell, 4.0, np.arange(len(x)) % 3))
    finally:
        numba.set_num_threads(before)
    for key in got[0]:
        assert got[0][key].tobytes() == got[1][key].tobytes(), key


@pytest.mark.parametrize("pbc", [(True, True, True), (True, False, True)])
def test_atom_pairs_are_the_lists_of_pairs_in_atom_order(pbc):
    """cell_list.atom_pairs (the ASE calculator's list) searches atom by atom and writes each list in place:
    every atom's neighbours (as atoms) and image codes are the bits of pairs' list (searched in bin order),
    on one thread or two, with the atoms in no spatial order in a triclinic cell."""
    from adgrad.engine.tools import cell_list
    rng = np.random.default_rng(7)
    x, cell = crystal("fcc", 3.615, 13, 0.2, seed=5)
    cell = cell + rng.normal(size=(3, 3)) * 0.3
    x = x[rng.permutation(len(x))] @ np.linalg.solve(np.eye(3) * 3.615 * 13, cell)
    before = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            ref = cell_list.pairs(x, cell, np.array(pbc), 4.0)
            got = cell_list.atom_pairs(x, cell, np.array(pbc), 4.0)
            assert len(ref.parts) == threads + 1
            assert got.j.dtype == got.code.dtype == np.int32 and got.first[0] == 0
            np.testing.assert_array_equal(np.diff(got.first), ref.count)
            assert got.p.tobytes() == ref.p.tobytes() and got.shifts.tobytes() == ref.shifts.tobytes()
            j, code = np.empty_like(got.j), np.empty_like(got.code)
            for w in range(len(ref.parts) - 1):
                for i in ref.order[ref.parts[w]:ref.parts[w + 1]]:
                    s, o, m = ref.start[i], got.first[i], ref.count[i]
                    j[o:o + m], code[o:o + m] = ref.order[ref.u[w][s:s + m]], ref.code[w][s:s + m]
            assert got.j.tobytes() == j.tobytes() and got.code.tobytes() == code.tobytes()
            assert len(j) > 10 * len(x)
    finally:
        numba.set_num_threads(before)


def test_the_candidates_sort_is_numpys_stable_sort():
    """cell_list._sort (a counting sort into buckets, then an insertion sort) orders squared distances as
    np.argsort(kind="stable"): exact ties kept in their order, keys crowded into one bucket or a few
    shells, at 0 and just below the cutoff squared, no candidates and one."""
    from adgrad.engine.tools import cell_list
    rng = np.random.default_rng(11)
    cutsq = 36.0
    cases = [np.zeros(0), np.array([3.0]), np.full(50, 7.25), np.array([np.nextafter(cutsq, 0), 0.0] * 20),
             rng.choice([6.5, 13.0, 19.6, 26.1, 32.7], 200) + rng.normal(0, 1e-3, 200),
             rng.uniform(0, cutsq, 300), np.repeat(rng.uniform(0, cutsq, 40), 3), 1e-3 * rng.random(100)]
    bound = 300
    rank, key, slot = np.empty(bound, np.int64), np.empty(bound), np.empty(bound, np.int64)
    bucket = np.empty(2 * bound + 1, np.int64)
    for cr in cases:
        m = len(cr)
        buffer = np.concatenate([cr, rng.uniform(0, 100, bound - m)])      # beyond m: what _atom left there
        cell_list._sort(buffer, m, cutsq, rank, key, bucket, slot)
        np.testing.assert_array_equal(rank[:m], np.argsort(cr, kind="stable"))


def test_atoms_crowded_in_a_periodic_cell_grow_the_lists():
    """The lists' arrays are sized for the cell's mean density with little room; 300 atoms crowded into a
    tenth of a periodic cell's width have ~1000x the pairs expected: the arrays grow, and each atom's list
    is every pair of brute force, nearest first (no images: the cluster is far from the faces)."""
    from adgrad.engine.tools import cell_list
    rng = np.random.default_rng(12)
    x = 30.0 + rng.uniform(0, 6.0, (300, 3))
    d = np.linalg.norm(x[None] - x[:, None], axis=-1)
    found = cell_list.atom_pairs(x, np.eye(3) * 60.0, np.ones(3, bool), 4.0)
    for i in range(len(x)):
        j = found.j[found.first[i]:found.first[i + 1]]
        want = np.flatnonzero((d[i] < 4.0) & (np.arange(len(x)) != i))
        np.testing.assert_array_equal(j, want[np.argsort(d[i, want], kind="stable")])
    assert np.all(found.code == len(found.shifts) // 2) and found.first[-1] > 100 * len(x)


def test_the_binning_is_a_stable_sort_by_bin():
    """cell_list._bin's counting sort: each atom's bin as numpy's floor (coordinates at 1.0 and beyond
    the last bin by rounding in the last bin, below the first in the first), the atoms in the order of
    np.argsort(kind="stable") of their flat bin (a bin's atoms in atom order), where its inverse."""
    from adgrad.engine.tools import cell_list
    rng = np.random.default_rng(13)
    nb = np.array([3, 4, 5])
    low, width = np.array([0.0, 0.0, -0.5]), np.array([1 / 3, 0.25, 0.3])
    f = rng.choice([0.0, 0.25, 0.5, 1.0, np.nextafter(1.0, 2), -1e-17, 0.9999999], (400, 3))
    f[:, 2] = rng.uniform(-0.5, 1.0 + 1e-16, 400)
    f[:5, 2] = [-0.5, 1.0, np.nextafter(-0.5, -1), 1.0 + 1e-15, 0.4]
    p = rng.normal(size=(400, 3))
    cells, order, where, starts, ps = cell_list._bin(f, low, width, nb, p)
    want = np.maximum(np.minimum(np.floor((f - low) / width), nb - 1).astype(np.int64), 0)
    np.testing.assert_array_equal(cells, want)
    flat = (want[:, 2] * nb[1] + want[:, 1]) * nb[0] + want[:, 0]
    np.testing.assert_array_equal(order, np.argsort(flat, kind="stable"))
    np.testing.assert_array_equal(where[order], np.arange(400))
    np.testing.assert_array_equal(starts, np.searchsorted(flat[order], np.arange(nb.prod() + 1)))
    assert ps.tobytes() == p[order].tobytes()
