"""adgrad.felupe (an adgrad model as a felupe material) and the calls it rests on.

felupe solves of uniaxial tension on a small cube, once with adgrad's material compiled from a model
file and once with felupe's own law (the neo-Hookean: felupe.NeoHooke; Ogden: the `hyperelastic`
package's exact Ogden & felupe.Volumetric, the oracle tests/felupe_oracle.py uses for stretch-based
laws), give the same displacements and nodal forces (reactions included) to 1e-10 relative, after
the same number of Newton iterations. Small-strain laws (strain="small"): the library's J2 plasticity
equals felupe's LinearElasticPlasticIsotropicHardening over a loading-unloading path from a stress-free
start, a linear-elastic energy W(eps) felupe's LinearElastic; an input named like a strain given F is
refused. The kernel calls underneath: the serial path (small calls,
threads=1) and the strided driver (outputs in felupe's layout, points last) give the same bits as
the parallel row driver; threads= applies to one call only; out= buffers are reused in place; params
change between calls without a recompile.
"""
from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import felupe as fem
import hyperelastic as hel
import numba
import numpy as np
import pytest
from adgrad.felupe import Material, trailing

MODELS = Path(__file__).resolve().parents[1] / "configs" / "models"
RTOL = 1e-10
WARM = """
import sys
import numpy as np
from adgrad.felupe import Material
umat = Material(sys.argv[1])
x = [np.eye(3)[:, :, None, None] + np.zeros((3, 3, 8, 2)), np.zeros((0, 8, 2))]
umat.gradient(x), umat.hessian(x)       # the strided drivers felupe's layout takes
"""


@pytest.fixture(scope="module")
def materials():
    """neo_hooke's and ogden's materials. numba compiles on one core: a second process compiles
    Ogden's kernels (and their strided drivers) meanwhile, and this one then loads them from adgrad's
    cache."""
    helper = subprocess.Popen([sys.executable, "-c", WARM, str(MODELS / "ogden.yaml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        neo = Material(MODELS / "neo_hooke.yaml")
    finally:
        helper.wait()
    return {"neo_hooke": neo, "ogden": Material(MODELS / "ogden.yaml")}


def uniaxial(umat, n=4, move=0.4):
    """felupe's uniaxial tension of a unit cube (clamped ends) of n^3 nodes: the Newton result."""
    mesh = fem.Cube(n=n)
    field = fem.FieldContainer([fem.Field(fem.RegionHexahedron(mesh), dim=3)])
    _, loadcase = fem.dof.uniaxial(field, clamped=True, move=move, return_loadcase=True)
    solid = fem.SolidBody(umat, field)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fem.newtonrhapson(items=[solid], **loadcase, verbose=0, tol=1e-10)


def assert_same_solve(ours, theirs):
    assert ours.success and theirs.success
    assert ours.iterations == theirs.iterations
    u, v = ours.x[0].values, theirs.x[0].values
    assert np.abs(u - v).max() <= RTOL * np.abs(v).max()
    f, g = np.asarray(ours.fun).ravel(), np.asarray(theirs.fun).ravel()   # nodal forces, reactions too
    assert np.abs(f - g).max() <= RTOL * np.abs(g).max()


class Sum:
    """Two felupe materials' stresses and tangents added (felupe's `&` wants felupe materials)."""

    def __init__(self, *umats):
        self.umats, self.x = umats, [np.eye(3), np.zeros(0)]

    def gradient(self, x):
        return [sum(u.gradient([x[0], None])[0] for u in self.umats), x[-1]]

    def hessian(self, x):
        return [sum(u.hessian([x[0], None])[0] for u in self.umats)]


def test_neo_hooke_solve_equals_felupe(materials):
    assert_same_solve(uniaxial(materials["neo_hooke"]), uniaxial(fem.NeoHooke(mu=1.0, bulk=2.0)))


def test_ogden_solve_equals_hyperelastic(materials):
    ogden = hel.DistortionalSpace(hel.StretchesFramework(hel.models.stretches.Ogden(mu=[1.0, 0.2],
                                                                                     alpha=[1.7, -1.5])))
    assert_same_solve(uniaxial(materials["ogden"]), uniaxial(Sum(ogden, fem.Volumetric(bulk=2.0))))


def test_material_params_change_without_recompile(materials):
    """Material(bulk=...) and material.params between solves: felupe's NeoHooke of those params."""
    umat = materials["neo_hooke"]
    kernels = dict(umat.kernels)
    try:
        umat.params = {"mu": 0.5, "bulk": 5.0}
        assert_same_solve(uniaxial(umat, n=3), uniaxial(fem.NeoHooke(mu=0.5, bulk=5.0), n=3))
    finally:
        umat.params = {}
    assert umat.kernels == kernels


def test_material_says_when_it_compiles(monkeypatch, capsys):
    """A kernel not in the compile cache (here: every kernel, as on a first use) is announced through
    log= before it compiles and with its time after, each line naming which kernel; by default on
    stderr; log=None says nothing."""
    monkeypatch.setattr("adgrad.engine.compile.is_cold", lambda module: True)
    lines = []
    umat = Material(MODELS / "neo_hooke.yaml", log=lines.append)
    umat.function([felupe_points(c=2), None])
    start = "adgrad: compiling neo_hooke (first use of this model and these derivatives): "
    kernels = ["the stress P for gradient()", "the tangent A for hessian()", "W for function()"]
    assert lines[::2] == [start + k for k in kernels]
    assert all(re.fullmatch(rf"adgrad: compiled neo_hooke in \d+\.\d s: {re.escape(k)}", line)
               for k, line in zip(kernels, lines[1::2])), lines
    Material(MODELS / "neo_hooke.yaml")
    assert capsys.readouterr().err.splitlines()[::2] == [start + k for k in kernels[:2]]
    Material(MODELS / "neo_hooke.yaml", log=None)
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ValueError, match="log=True: give a function of one line of text, or None"):
        Material(MODELS / "neo_hooke.yaml", log=True)


def felupe_points(q=8, c=300, seed=3):
    """F in felupe's layout (3, 3, q, c), about I."""
    rng = np.random.default_rng(seed)
    return np.ascontiguousarray(np.eye(3)[:, :, None, None] + 0.1 * rng.standard_normal((3, 3, q, c)))


def test_material_layout_and_out(materials):
    """gradient/hessian in felupe's layout equal the kernel's point-first results bit for bit, and
    felupe's out= arrays are written in place."""
    umat = materials["neo_hooke"]
    F = felupe_points()
    P, statevars = umat.gradient([F, np.zeros((0, 8, 300))])
    (A,) = umat.hessian([F, None])
    rows = np.ascontiguousarray(np.moveaxis(F.reshape(3, 3, -1), -1, 0))
    ref = {**umat.kernels["gradient"].evaluate({"F": rows}), **umat.kernels["hessian"].evaluate({"F": rows})}
    assert P.shape == (3, 3, 8, 300) and A.shape == (3, 3, 3, 3, 8, 300) and statevars.shape == (0, 8, 300)
    assert np.array_equal(trailing(P, (3, 3)), ref["dW_dF"])
    assert np.array_equal(trailing(A, (3, 3, 3, 3)), ref["d2W_dF_dF"])
    P2, _ = umat.gradient([F, None], out=P)
    (A2,) = umat.hessian([F, None], out=A)
    assert P2 is P and A2 is A
    assert np.array_equal(trailing(A, (3, 3, 3, 3)), ref["d2W_dF_dF"])
    (W,) = umat.function([F, None])
    J, trC = np.linalg.det(rows), np.einsum("mij,mij->m", rows, rows)
    want = (J ** (-2 / 3) * trC - 3) / 2 + (J - 1) ** 2         # mu = 1, bulk = 2
    assert np.abs(W.reshape(-1) - want).max() <= 1e-13


# -- small-strain laws: strain="small"

PLASTIC = MODELS / "linear_elastic_plastic_isotropic_hardening.yaml"
MOVES = [0.0, 0.01, 0.02, 0.03, 0.045, 0.06, 0.04, 0.02, 0.0, -0.02]     # yield near 0.019; unload at 0.04


def loading_path(umat, n=4):
    """felupe's uniaxial tension (clamped ends) of a unit cube of n^3 nodes, displaced by each of MOVES in
    turn, the state carried from step to step: per step (iterations, displacements, nodal forces, statevars)."""
    mesh = fem.Cube(n=n)
    field = fem.FieldContainer([fem.Field(fem.RegionHexahedron(mesh), dim=3)])
    boundaries = fem.dof.uniaxial(field, clamped=True, return_loadcase=False)
    solid = fem.SolidBody(umat, field)
    steps = []
    for move in MOVES:
        boundaries["move"].update(move)
        dof0, dof1 = fem.dof.partition(field, boundaries)
        ext0 = fem.dof.apply(field, boundaries, dof0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            res = fem.newtonrhapson(items=[solid], x0=field, dof1=dof1, dof0=dof0, ext0=ext0, verbose=0, tol=1e-13)
        assert res.success, move
        steps.append((res.iterations, res.x[0].values.copy(), np.asarray(res.fun).ravel().copy(),
                      solid.results.statevars.copy()))
    return steps


def test_small_strain_plasticity_solve_equals_felupe():
    """The library's J2 model (inputs eps, eps_p, alpha) with strain="small" and felupe's
    LinearElasticPlasticIsotropicHardening: the same iterations, displacements, nodal forces and
    hardening variable at every step of a path that yields (some cells only at some of their
    quadrature points), unloads elastically and reverses; at zero displacement the body is stress-free."""
    ours = loading_path(Material(PLASTIC, strain="small", log=None))
    theirs = loading_path(fem.LinearElasticPlasticIsotropicHardening(E=8 / 3, nu=1 / 3, sy=0.05, K=0.1))
    assert not ours[0][2].any()                              # stress-free start: no reaction at all
    for move, (its, u, f, state), (its_f, u_f, f_f, state_f) in zip(MOVES, ours, theirs):
        assert its == its_f, move
        assert np.abs(u - u_f).max() <= RTOL * max(np.abs(u_f).max(), 1e-3)
        assert np.abs(f - f_f).max() <= RTOL * max(np.abs(f_f).max(), 1e-3)
        assert np.abs(state[9] - state_f[0]).max() <= RTOL * 0.05     # alpha: ours after eps_p, felupe's first
    yielded = [step[3][9] > 0 for step in ours]
    assert not yielded[1].any() and 0 < yielded[2].sum() < yielded[2].size
    assert (yielded[2].any(0) & ~yielded[2].all(0)).any()    # a cell yielding at some of its points only
    assert ours[6][0] <= 2                                    # unloading is elastic: one Newton step (and a check)
    assert np.abs(ours[8][2]).max() > 1e-3                   # back at zero displacement: residual stresses


def test_small_strain_energy_equals_felupe_linear_elastic(tmp_path):
    """A small-strain energy W(eps): P = dW/dF and A = d2W/dF2 by the chain rule through sym(F) - I,
    the same solve as felupe's LinearElastic."""
    model = tmp_path / "linear_elastic.yaml"
    model.write_text("adgrad: 1\nname: linear_elastic\ninputs:\n  strain: {shape: [3, 3]}\n"
                     "params: {E: 2.0, nu: 0.3}\nlet:\n  mu: E/(2*(1 + nu))\n  lmbda: E*nu/((1 + nu)*(1 - 2*nu))\n"
                     "outputs:\n  W: mu*sum(strain*strain) + lmbda/2*trace(strain)**2\n")
    umat = Material(model, strain="small", log=None)
    assert (umat.F, umat.energy, umat.state) == ("F", "W", [])
    assert_same_solve(uniaxial(umat, n=3, move=0.01), uniaxial(fem.LinearElastic(E=2.0, nu=0.3), n=3, move=0.01))


def test_a_strain_given_F_is_refused(tmp_path):
    """A model whose input is named like a strain, given F (felupe's default), would start prestressed
    (eps = I): refused, naming the input and the remedy; so are strain="small" for an input named F and
    strain values other than None and "small"."""
    with pytest.raises(ValueError, match=r"input 'eps' of model 'linear_elastic_plastic_isotropic_hardening' is "
                                         r"named like a strain, but felupe gives the deformation gradient F: "
                                         r"Material\(\.\.\., strain='small'\) gives it sym\(F\) - I"):
        Material(PLASTIC, log=None)
    for name in ("eps", "epsilon", "e", "E", "eps_total", "total_strain", "strain"):
        model = tmp_path / f"{name}.yaml"
        model.write_text(f"adgrad: 1\ninputs:\n  {name}: {{shape: [3, 3]}}\noutputs:\n  W: sum({name}*{name})\n")
        with pytest.raises(ValueError, match=f"input '{name}' of model '{name}' is named like a strain"):
            Material(model, log=None)
        with pytest.raises(ValueError, match="named like a strain"):
            Material(model, F=name, log=None)
    with pytest.raises(ValueError, match="strain='small' gives input 'F' of model 'neo_hooke' the small strain"):
        Material(MODELS / "neo_hooke.yaml", strain="small", log=None)
    with pytest.raises(ValueError, match=r"strain='finite': give None \(the input is the deformation gradient F\) "
                                         r"or 'small'"):
        Material(MODELS / "neo_hooke.yaml", strain="finite", log=None)
    with pytest.raises(ValueError, match="F='G': model 'neo_hooke' has no input 'G' \\(its inputs: F\\)"):
        Material(MODELS / "neo_hooke.yaml", F="G", log=None)


# -- the kernel calls


@pytest.fixture(scope="module")
def neo(materials):
    """neo_hooke's Hessian kernel (the adapter's), with many points."""
    rng = np.random.default_rng(0)
    return materials["neo_hooke"].kernels["hessian"], np.eye(3) + 0.1 * rng.standard_normal((3000, 3, 3))


def test_serial_and_parallel_paths_are_bit_identical(neo):
    kernel, F = neo
    parallel = kernel.evaluate({"F": F}, threads=2)
    serial = kernel.evaluate({"F": F}, threads=1)
    below = kernel.serial_below
    try:
        kernel.serial_below = 10**9                         # every call serial, on all threads
        small = kernel.evaluate({"F": F})
    finally:
        kernel.serial_below = below
    for name, value in parallel.items():
        assert np.array_equal(value, serial[name]) and np.array_equal(value, small[name])


def test_threads_apply_to_the_call_only(neo):
    kernel, F = neo
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        kernel.evaluate({"F": F}, threads=2)
        assert numba.get_num_threads() == 1
        numba.set_num_threads(2)
        kernel.evaluate({"F": F}, threads=1)
        kernel.evaluate({"F": F[:10]}, threads=2)
        assert numba.get_num_threads() == 2
        with pytest.raises(ValueError):                     # more threads than numba has: refused,
            kernel.evaluate({"F": F}, threads=10**6)        # the setting untouched
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(before)


def test_trailing_axis_outputs_are_written_in_place(neo):
    """An out array with the points last (a view of it with the points first), a strided input, a
    broadcast input, and float32 outputs (one copy): the same bits as point-first rows, serial or not."""
    kernel, F = neo
    ref = kernel.evaluate({"F": F})["d2W_dF_dF"]
    F_last = np.ascontiguousarray(np.moveaxis(F, 0, -1))              # (3, 3, M)
    for threads in (1, 2):
        A = np.full((3, 3, 3, 3, len(F)), np.nan)
        view = np.moveaxis(A, -1, 0)
        got = kernel.evaluate({"F": np.moveaxis(F_last, -1, 0)}, out={"d2W_dF_dF": view}, threads=threads)
        assert got["d2W_dF_dF"] is view and np.array_equal(view, ref)
    every_other = np.empty((2 * len(F), 3, 3, 3, 3))[::2]            # a point-first, strided out
    kernel.evaluate({"F": F}, out={"d2W_dF_dF": every_other})
    assert np.array_equal(every_other, ref)
    one = kernel.evaluate({"F": np.broadcast_to(F[7], F.shape)})["d2W_dF_dF"]
    assert np.array_equal(one, np.broadcast_to(ref[7], ref.shape))
    single = np.empty(ref.shape, np.float32)
    kernel.evaluate({"F": F}, out={"d2W_dF_dF": single})
    assert np.array_equal(single, ref.astype(np.float32))
    bad = np.ones(len(F), bool)
    kernel.evaluate({"F": np.moveaxis(F_last, -1, 0)}, out={"d2W_dF_dF": view}, nonfinite=bad)
    assert not bad.any() and np.array_equal(view, ref)


def test_out_reuse_and_params_between_calls(neo):
    """The same out buffers every call, other params each call, no recompile; A is linear in
    (mu, bulk) for neo-Hooke, so A(mu, bulk) = mu A(1, 0) + bulk A(0, 1)."""
    kernel, F = neo
    module, compiled = kernel.module, len(kernel.module.batch.overloads)
    out = {"d2W_dF_dF": np.empty((len(F), 3, 3, 3, 3))}
    dev = kernel.evaluate({"F": F}, params={"mu": 1.0, "bulk": 0.0})["d2W_dF_dF"]
    vol = kernel.evaluate({"F": F}, params={"mu": 0.0, "bulk": 1.0})["d2W_dF_dF"]
    for mu, bulk in [(1.0, 2.0), (0.3, 50.0), (2.0, 0.5)]:
        got = kernel.evaluate({"F": F}, out=out, params={"mu": mu, "bulk": bulk})
        assert got["d2W_dF_dF"] is out["d2W_dF_dF"]
        want = mu * dev + bulk * vol
        assert np.abs(got["d2W_dF_dF"] - want).max() <= 1e-12 * np.abs(want).max()
    assert kernel.module is module and len(kernel.module.batch.overloads) == compiled
    assert np.array_equal(kernel.evaluate({"F": F})["d2W_dF_dF"], kernel.evaluate({"F": F}, params={})["d2W_dF_dF"])


def by_point(kernel, inputs, outputs):
    """kernel.point_kernel called point by point from a numba loop (a caller's own code), on C-contiguous
    point-first rows: {name: (m, *shape)} in, float64 rows out."""
    rows = [np.ascontiguousarray(inputs[n], dtype=np.float64).reshape(len(inputs[n]), -1) for n in kernel.graph.inputs]
    outs = [outputs[n].reshape(len(outputs[n]), -1) for n in kernel.graph.outputs]
    params = kernel.param_rows()
    names = [f"a{k}" for k in range(len(rows) + len(params) + len(outs))]
    ins, ps, os_ = names[:len(rows)], names[len(rows):len(rows) + len(params)], names[len(rows) + len(params):]
    call = ", ".join([f"{a}[i]" for a in ins] + ps + [f"{a}[i]" for a in os_])
    scope = {}
    exec(f"def loop(point, {', '.join(names)}, work):\n    for i in range(a0.shape[0]):\n"
         f"        point({call}, work)\n", scope)
    numba.njit(scope["loop"])(kernel.point_kernel, *rows, *params, *outs, kernel.workspace(1)[0])


@pytest.mark.parametrize("name", ["neo_hooke", "ogden", "j2_voce"])
def test_the_point_kernel_gives_the_drivers_bits(materials, name):
    """P (and the new state) and A as felupe gets them (the strided driver on its (3, 3, q, c) arrays, a
    lanes kernel for neo_hooke's and J2's tangents too: compile_model's points_last) equal, bit for bit,
    kernel.point_kernel's point by point and the batch driver's on point-first rows; W (function()) too."""
    umat = materials.get(name) or Material(MODELS / f"{name}.yaml", strain="small", log=None)
    assert [k.lanes for k in umat.kernels.values()] == [name != "ogden"] * 2     # Ogden's eigenvalues: sin, cos
    rng = np.random.default_rng(4)
    q, c = 8, 13                                        # 104 points: three full blocks and a partial one
    F = np.eye(3)[:, :, None, None] + 0.2 * rng.standard_normal((3, 3, q, c))
    statevars = 0.01 * np.abs(rng.standard_normal((sum(umat.sizes) if umat.state else 0, q, c)))
    x = [F, statevars]
    P, new = umat.gradient(x)
    cases = [(umat.kernels["gradient"], {umat.P: P}), (umat.kernels["hessian"], {umat.A: umat.hessian(x)[0]})]
    if umat.energy:
        W = umat.function(x)[0]
        cases.append((umat._function, {umat.energy: W}))
    offset = 0
    for n, size in zip(umat.state, umat.sizes):         # felupe's statevars_new: each state's rows in turn
        cases[0][1][f"{n}_new"] = new[offset:offset + size].reshape(*umat.model.graph.inputs[n].shape, q, c)
        offset += size
    _, _, inputs = umat._inputs(x)
    for kernel, felupe_layout in cases:
        rows = {n: np.full((q * c, *s), np.nan) for n, s in kernel.output_shapes.items()}
        by_point(kernel, inputs, rows)
        batch = kernel.evaluate({n: np.ascontiguousarray(v) for n, v in inputs.items()})
        assert set(felupe_layout) == set(rows)
        for n, value in rows.items():
            assert np.array_equal(batch[n], value), n
            shape = kernel.output_shapes[n]
            assert np.array_equal(trailing(felupe_layout[n], shape).reshape(value.shape), value), n
