"""Tabulated functions: LAMMPS's interpolation bit for bit, derivatives of every order, the model
language's table params, and clear errors for bad tables and bad potential files."""
from __future__ import annotations

import functools
import math
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from adgrad.engine import api
from adgrad.engine.errors import SpecError
from adgrad.engine.numeric import scalar, tables


# ---- LAMMPS's PairEAM::interpolate and the lookup of its compute(), transliterated (1-based) ----------
def lammps_interpolate(f, delta):
    n = len(f)
    s = [[0.0] * 7 for _ in range(n + 1)]
    for m in range(1, n + 1):
        s[m][6] = f[m - 1]
    s[1][5] = s[2][6] - s[1][6]
    s[2][5] = 0.5 * (s[3][6] - s[1][6])
    s[n - 1][5] = 0.5 * (s[n][6] - s[n - 2][6])
    s[n][5] = s[n][6] - s[n - 1][6]
    for m in range(3, n - 1):
        s[m][5] = ((s[m - 2][6] - s[m + 2][6]) + 8.0 * (s[m + 1][6] - s[m - 1][6])) / 12.0
    for m in range(1, n):
        s[m][4] = 3.0 * (s[m + 1][6] - s[m][6]) - 2.0 * s[m][5] - s[m + 1][5]
        s[m][3] = s[m][5] + s[m + 1][5] - 2.0 * (s[m + 1][6] - s[m][6])
    s[n][4] = 0.0
    s[n][3] = 0.0
    for m in range(1, n + 1):
        s[m][2] = s[m][5] / delta
        s[m][1] = 2.0 * s[m][4] / delta
        s[m][0] = 3.0 * s[m][3] / delta
    return np.array(s[1:])


def lammps_lookup(s, x, rdx, xlin):
    """pair_eam compute() for F(rho): value and derivative (with the linear extension above xlin)."""
    n = len(s)
    p = x * rdx + 1.0
    m = int(p)
    m = max(1, min(m, n - 1))
    p -= m
    p = min(p, 1.0)
    c = s[m - 1]
    fp = (c[0] * p + c[1]) * p + c[2]
    phi = ((c[3] * p + c[4]) * p + c[5]) * p + c[6]
    if x > xlin:
        phi += fp * (x - xlin)
    return phi, fp


@pytest.mark.parametrize("n", [5, 6, 7, 50])
def test_coefficients_are_lammps_bits(n):
    rng = np.random.default_rng(n)
    f = rng.normal(size=n).cumsum()
    dx = 0.0371
    assert np.array_equal(tables.coefficients(f, dx), lammps_interpolate(list(f), dx))


def test_lookup_is_lammps_bits_inside_and_beyond_the_grid():
    rng = np.random.default_rng(1)
    f = np.cos(np.linspace(0, 2, 40)) * 3.0
    dx = 2.0 / 39
    s = tables.coefficients(f, dx)
    xlin = 39 * dx
    x = np.concatenate([rng.uniform(0, 2, 500), rng.uniform(2, 3, 50), np.arange(40) * dx, [0.0]])
    want = np.array([lammps_lookup(s, xi, 1.0 / dx, xlin) for xi in x])
    for order in (0, 1):
        got = tables.evaluate(s[None], x, 0.0, 0.0, 1.0 / dx, 40, xlin, order)
        assert np.array_equal(got, want[:, order])
        compiled = np.array([compiled_table(s.ravel(), xi, 0.0, 1.0 / dx, 40, xlin, order) for xi in x])
        assert np.array_equal(compiled, want[:, order])


def compiled_table(c, x, x0, rdx, n, xlin, order):
    """Table 0 of the flat coefficients c at x through the four compiled helpers, as generated kernels call
    them (engine/ir/ops/tables.py tabulated), from a numba function (they are intrinsics)."""
    return _compiled_lookup(order)(c, x, x0, rdx, n, xlin)


@functools.cache
def _compiled_lookup(order):
    @njit
    def lookup(c, x, x0, rdx, n, xlin):
        m = scalar.table_segment(x, x0, rdx, n)
        return scalar.table_at(c, x, scalar.table_fraction(x, m, x0, rdx), scalar.table_row(0.0, m, 1, n),
                               c.shape[0] - 7.0, rdx, xlin, order)
    return lookup


@pytest.mark.parametrize("order", [0, 1, 2])
def test_each_order_is_the_derivative_of_the_one_below(order):
    """Inside pieces (away from nodes, where the second derivative jumps) and above the grid."""
    f = np.exp(-np.linspace(0, 3, 31))
    dx = 0.1
    s = tables.coefficients(f, dx)[None]
    rng = np.random.default_rng(order)
    k = rng.integers(0, 30, 200)
    x = np.concatenate([(k + rng.uniform(0.1, 0.9, 200)) * dx, rng.uniform(3.2, 4.0, 20)])
    h = 1e-6
    for xlin in (3.0, math.inf):
        lo = tables.evaluate(s, x - h, 0.0, 0.0, 1 / dx, 31, xlin, order)
        hi = tables.evaluate(s, x + h, 0.0, 0.0, 1 / dx, 31, xlin, order)
        d = tables.evaluate(s, x, 0.0, 0.0, 1 / dx, 31, xlin, order + 1)
        inside = x < 3.0
        np.testing.assert_allclose(d[inside], ((hi - lo) / (2 * h))[inside], rtol=1e-6, atol=1e-7)
        if xlin == 3.0 or order >= 1:      # linear above xlin; a held table's slope is LAMMPS's (not d/dx)
            np.testing.assert_allclose(d[~inside], ((hi - lo) / (2 * h))[~inside], rtol=1e-6, atol=1e-7)


def test_invalid_table_index_and_nan_give_nan():
    s = tables.coefficients(np.arange(6.0) ** 2, 1.0)[None].repeat(2, axis=0)
    got = tables.evaluate(s, np.array([1.5, 1.5, 1.5, 1.5, np.nan]), np.array([0, 1, 2, 0.5, 0]),
                          0.0, 1.0, 6, math.inf, 0)
    assert np.isfinite(got[:2]).all() and np.isnan(got[2:]).all()


# ---- table params in the model language ------------------------------------------------------------
def write(tmp_path, text, name="model.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


MODEL = """
    adgrad: 1
    name: tab
    inputs:
      x: [6]
      s: [6]
    params:
      G: {table: [[0.0, 0.5, 1.8, 2.0, 1.1, 0.4, 0.2, 0.1], [1.0, 0.9, 0.7, 0.4, 0.2, 0.1, 0.05, 0.0]], x0: 0.5, dx: 0.25}
      H: {table: [3.0, 2.0, 1.5, 1.2, 1.0, 0.9], grid: [0.0, 0.5, 1.0, 1.5, 2.0, 2.5], beyond: hold}
    outputs:
      E: sum(G[s](x) * H(x)) + G[1](sum(x) / 6) ** 2
"""


@pytest.fixture(scope="module")
def tab_model(tmp_path_factory):
    return api.load_model(write(tmp_path_factory.mktemp("tab"), MODEL))


def _points(seed, m=5):
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 7, (m, 6))
    x = 0.5 + (k + rng.uniform(0.1, 0.9, (m, 6))) * 0.25      # inside pieces of G (and of H: 0.5 = 2 dx_G)
    x = np.where(np.abs((x / 0.5) - np.round(x / 0.5)) < 0.05, x + 0.06, x)
    return {"x": x, "s": rng.integers(0, 2, (m, 6)).astype(float)}


def test_table_model_value_matches_reference(tab_model):
    pts = _points(0)
    k = api.compile_model(tab_model)
    E = k.evaluate(pts)["E"]
    G = tables.TableData(np.array(tab_model.tables["G"].values), 0.5, 0.25, xlin=0.5 + 7 * 0.25)
    cg = G.coefficients()
    H = tab_model.tables["H"]
    ch = H.coefficients()
    for i in range(5):
        x, s = pts["x"][i], pts["s"][i]
        g = tables.evaluate(cg, x, s, 0.5, 4.0, 8, G.xlin, 0)
        h = tables.evaluate(ch, x, 0.0, 0.0, 2.0, 6, math.inf, 0)
        want = np.sum(g * h) + tables.evaluate(cg, np.sum(x) / 6, 1.0, 0.5, 4.0, 8, G.xlin, 0) ** 2
        assert E[i] == pytest.approx(float(want), rel=1e-14)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_table_model_gradient_and_hessian_match_differences(tab_model, mode):
    pts = _points(1)
    k = api.compile_model(tab_model, derivatives=[("E", "x"), ("E", ["x", "x"])], mode=mode)
    out = k.evaluate(pts)
    h = 1e-6
    for j in range(6):
        up, dn = dict(pts), dict(pts)
        up["x"] = pts["x"].copy()
        dn["x"] = pts["x"].copy()
        up["x"][:, j] += h
        dn["x"][:, j] -= h
        hi, lo = k.evaluate(up), k.evaluate(dn)
        np.testing.assert_allclose(out["dE_dx"][:, j], (hi["E"] - lo["E"]) / (2 * h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(out["d2E_dx_dx"][:, :, j], (hi["dE_dx"] - lo["dE_dx"]) / (2 * h),
                                   rtol=1e-5, atol=1e-7)


def test_forward_and_reverse_agree(tab_model):
    pts = _points(2)
    f = api.compile_model(tab_model, derivatives=[("E", "x")], mode="forward").evaluate(pts)
    r = api.compile_model(tab_model, derivatives=[("E", "x")], mode="reverse").evaluate(pts)
    np.testing.assert_allclose(f["dE_dx"], r["dE_dx"], rtol=1e-13, atol=1e-14)


def bad_model(tmp_path, params, expr):
    """A model of x with the given params lines (at line 7 on) and output y: expr."""
    lines = "\n".join(f"          {p}" for p in params)
    return write(tmp_path, f"""
        adgrad: 1
        name: bad
        inputs:
          x: []
        params:
{lines}
        outputs:
          y: {expr}
    """)


@pytest.mark.parametrize("param, message", [
    ("{table: [], dx: 0.1}", "at least 5 values"),
    ("{table: [1, 2, 3], dx: 0.1}", "at least 5 values"),
    ("{table: [1, 2, 3, 4, 5], dx: -0.1}", "must be positive"),
    ("{table: [1, 2, 3, 4, 5], grid: [0, 1, 2, 3.5, 4]}", "not uniform"),
    ("{table: [1, 2, 3, 4, 5], grid: [0, 1, 2, 3]}", "at least 5 grid points"),
    ("{table: [1, 2, 3, 4, 5, 6], grid: [0, 1, 2, 3, 4]}", "5 grid points but 6 values"),
    ("{table: [1, 2, .nan, 4, 5], dx: 1}", "NaN or an infinity"),
    ("{table: [1, 2, 3, 4, 5]}", "needs its grid"),
    ("{table: [1, 2, 3, 4, 5], dx: 1, beyond: wrap}", "'linear' or 'hold'"),
])
def test_bad_tables_are_refused_with_file_and_line(tmp_path, param, message):
    path = bad_model(tmp_path, [f"T: {param}"], "T(x)")
    with pytest.raises(SpecError) as err:
        api.load_model(path)
    assert message in err.value.message and err.value.path == path and err.value.line == 7


@pytest.mark.parametrize("expr, message", [
    ("T", "is a table; call it"),
    ("T(x, x)", "takes one argument"),
    ("U(x)", "select one with U[i](x)"),
    ("U[0, 1](x)", "takes 1 species index"),
])
def test_table_misuse_is_refused(tmp_path, expr, message):
    path = bad_model(tmp_path, ["T: {table: [1, 2, 3, 4, 5], dx: 1}",
                                "U: {table: [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6]], dx: 1}"], expr)
    with pytest.raises(SpecError) as err:
        api.load_model(path)
    assert message in err.value.message and err.value.line == 10


# ---- potential files: errors name the file and the line ---------------------------------------------
SETFL = """\
comment 1
comment 2
comment 3
1 Xx
6 0.1 6 0.5 2.4
1 1.0 3.0 fcc
0 -1 -1.5 -1.8 -1.9 -2.0
1.0 0.8 0.5 0.3 0.1 0.0
5.0 3.0 1.0 0.5 0.1 0.0
"""


def potential_model(tmp_path, pot_text, suffix=".eam.alloy", extra=""):
    (tmp_path / f"p{suffix}").write_text(pot_text)
    return write(tmp_path, f"""
        adgrad: 1
        name: pot
        inputs:
          r: [3]
        params:
          p: {{potential: p{suffix}{extra}}}
        outputs:
          E: p.F(sum(p.rho(r))) + 0.5 * sum(p.phi(r)) + p.cutoff
    """)


def test_a_small_setfl_file_loads_and_runs(tmp_path):
    m = api.load_model(potential_model(tmp_path, SETFL))
    assert m.tables["p"].elements == ("Xx",) and m.tables["p"].constants["cutoff"] == 2.4
    r = np.array([[0.7, 1.1, 1.9]])
    E = api.compile_model(m).evaluate({"r": r})["E"]
    z2r = tables.coefficients([5.0, 3.0, 1.0, 0.5, 0.1, 0.0], 0.5)[None]
    rho = tables.coefficients([1.0, 0.8, 0.5, 0.3, 0.1, 0.0], 0.5)[None]
    F = tables.coefficients([0, -1, -1.5, -1.8, -1.9, -2.0], 0.1)[None]
    dens = tables.evaluate(rho, r[0], 0.0, 0.0, 2.0, 6, math.inf, 0).sum()
    want = tables.evaluate(F, dens, 0.0, 0.0, 10.0, 6, 0.5, 0) + \
        0.5 * (tables.evaluate(z2r, r[0], 0.0, 0.0, 2.0, 6, math.inf, 0) / r[0]).sum() + 2.4
    assert E[0] == pytest.approx(float(want), rel=1e-14)


@pytest.mark.parametrize("mangle, line, message", [
    (lambda t: t.replace("1.0 0.8 0.5 0.3 0.1 0.0\n", "1.0 0.8 oops 0.3 0.1 0.0\n"), 8, "'oops' is not a number"),
    (lambda t: t.rsplit("\n", 2)[0] + "\n", 8, "the file ends in r*phi(r) of Xx-Xx"),
    (lambda t: t.replace("6 0.1 6 0.5 2.4", "3 0.1 6 0.5 2.4"), 5, "at least 5 points"),
    (lambda t: t.replace("1 Xx\n", "2 Xx\n"), 4, "2 elements announced, 1 named"),
])
def test_malformed_potential_files_name_file_and_line(tmp_path, mangle, line, message):
    path = potential_model(tmp_path, mangle(SETFL))
    with pytest.raises(SpecError) as err:
        api.load_model(path)
    assert message in err.value.message
    assert err.value.path == str(tmp_path / "p.eam.alloy") and err.value.line == line


def test_unknown_element_and_format_are_refused(tmp_path):
    with pytest.raises(SpecError, match="element 'Cu' is not in this file"):
        api.load_model(potential_model(tmp_path, SETFL, extra=", elements: [Cu]"))
    with pytest.raises(SpecError, match="unknown potential format"):
        api.load_model(potential_model(tmp_path, SETFL, suffix=".txt"))


SW_FILE = """\
# a comment
Si Si Si 2.1683 2.0951 1.80 21.0 1.20 -0.333333333333
         7.049556277 0.6022245584 4.0 0.0 0.0
"""


@pytest.mark.parametrize("text, line, message", [
    (SW_FILE.replace("21.0", "x21"), 2, "'x21' is not a number"),
    (SW_FILE.replace("0.0 0.0\n", "0.0\n"), 2, "the file ends inside an entry"),
    (SW_FILE.replace("0.0 0.0\n", "0.0 0.0 9\n"), 2, "this one has 15"),
    (SW_FILE + "Si Si C 1 1 1 1 1 1 1 1 1 1 1\n", 1, "no entry for the triplet"),
    (SW_FILE + SW_FILE.split("\n", 1)[1], 4, "given twice"),
    ("# nothing\n", 1, "no Stillinger-Weber entries"),
])
def test_malformed_three_body_files_name_file_and_line(tmp_path, text, line, message):
    (tmp_path / "p.sw").write_text(text)
    path = write(tmp_path, """
        adgrad: 1
        name: sw
        inputs:
          r: []
        params:
          p: {potential: p.sw}
        outputs:
          E: p.A * r
    """)
    with pytest.raises(SpecError) as err:
        api.load_model(path)
    assert message in err.value.message, err.value.message
    assert err.value.path == str(tmp_path / "p.sw") and err.value.line == line


def test_three_body_constants_by_species(tmp_path):
    text = "".join(f"{a} {b} {c} " + " ".join(str(v) for v in range(1, 12)) + " \n"
                   for a in ("X", "Y") for b in ("X", "Y") for c in ("X", "Y")).replace(
        "Y X Y 1 2", "Y X Y 100 2")
    (tmp_path / "p.sw").write_text(text)
    path = write(tmp_path, """
        adgrad: 1
        name: sw
        inputs:
          s: [4]
        params:
          p: {potential: p.sw, elements: [Y, X]}
        outputs:
          E: p.epsilon[s, 1, s] + p.cut[0, 0, 0]
    """)
    k = api.compile_model(api.load_model(path))
    E = k.evaluate({"s": np.array([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 2.0, 0.0], [0.0, 1.0, 0.5, 0.0],
                                   [-1.0, 1.0, 1.0, 0.0]])})["E"]
    # species 0 is Y: (Y, X, Y) has epsilon 100; a = 3, sigma = 2: cut 6
    assert E[0].tolist() == [106.0, 7.0, 7.0, 106.0]
    # an invalid index (2, 0.5, -1) anywhere in a point makes all of that point's results NaN
    assert np.isnan(E[1:]).all()


@njit
def _helpers(c, x, t, p, k, x0, rdx, n, ntab, last, xlin):
    """Every table helper the kernels call, at each (x[i], t[i], p[i], k[i]), in one numba loop."""
    out = np.empty((x.shape[0], 8))
    for i in range(x.shape[0]):
        m = scalar.table_segment(x[i], x0, rdx, n)
        out[i, 0] = m
        out[i, 1] = scalar.table_fraction(x[i], m, x0, rdx)
        out[i, 2] = scalar.table_row(t[i], m, ntab, n)
        out[i, 3] = scalar.table_at(c, x[i], p[i], k[i], last, rdx, xlin, 0)
        out[i, 4] = scalar.table_at(c, x[i], p[i], k[i], last, rdx, xlin, 1)
        out[i, 5] = scalar.table_at(c, x[i], p[i], k[i], last, rdx, xlin, 2)
        out[i, 6] = scalar.table_at(c, x[i], p[i], k[i], last, rdx, xlin, 3)
        out[i, 7] = scalar.take(c, t[i], c.shape[0])
    return out


ANY_FLOAT = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-3.0, 40.0),
                      st.integers(-3, 40).map(float), st.sampled_from([0.0, -0.0, 1.0, 7.0, 13.5, 2.0 ** 60]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT, ANY_FLOAT, ANY_FLOAT), min_size=1, max_size=40),
       st.one_of(st.sampled_from([0.0, 0.25, -1.0]), st.floats(-1.0, 1.0)),
       st.one_of(st.sampled_from([0.5, 2.0, 4.0]), st.floats(0.5, 8.0)), st.sampled_from([2.0, 5.0, math.inf]))
def test_compiled_helpers_are_the_references_bits(rows, x0, rdx, xlin):
    """table_segment, table_fraction, table_row, table (orders 0-3) and take, compiled as kernels call
    them, against engine/numeric/tables.py's references, bit for bit, on any floats: NaN, infinities,
    -0, the grid's nodes and their neighbours, offsets and species out of range or fractional,
    positions beyond a piece."""
    n, ntab = 6, 2
    c = np.random.default_rng(0).normal(size=ntab * n * 7)
    x, t, p, k = (np.array(col) for col in zip(*rows))
    nodes = x0 + np.arange(n + 1) / rdx
    x = np.concatenate([x, nodes, np.nextafter(nodes, -np.inf), np.nextafter(nodes, np.inf)])
    t, p, k = (np.resize(a, x.shape) for a in (t, p, k))
    got = _helpers(c, x, t, p, k, x0, rdx, n, ntab, c.shape[0] - 7.0, xlin)
    with np.errstate(all="ignore"):           # huge x overflow to inf in the references, as in the kernels
        m = tables.segment(x, x0, rdx, n)
        want = [m, tables.fraction(x, m, x0, rdx), tables.row(t, m, n, ntab),
                *(tables.evaluate_at(c, x, p, k, rdx, xlin, order) for order in range(4)),
                tables.take_reference(c, t)]
    for j, w in enumerate(want):
        assert np.array_equal(got[:, j], w, equal_nan=True), (j, got[:, j], w)
