"""Hostile potential files: one reader contract for every format (engine/potentials/base.py).

Corrupted copies of the shipped files (data/Cu_zhou04.eam.alloy, Si_sw85.sw, Si_tersoff88.tersoff)
and of the LAMMPS package's own (Cu_u3.eam, Fe_mm.eam.fs, CuNi.eam.alloy, SiC.tersoff, PdHHe.eam.he):
every number finite, every count a positive integer within the limit of a param's elements, every
spacing and cutoff positive, what LAMMPS's SW and Tersoff readers refuse refused, nothing before
the header's end or after the last table; each refusal a SpecError at the file, line and column of
the offending token (exit 2 through the CLI, with no output written)."""
from __future__ import annotations

import math
import re
import shutil
import tempfile
import textwrap
from pathlib import Path

import lammps_oracle as lo
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from adgrad.cli.main import cli
from adgrad.engine import api, potentials
from adgrad.engine.errors import SpecError
from adgrad.engine.limits import MAX_ELEMENTS, MAX_LINE

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"

# format -> (source file, line of the element header (atomic number, mass), line of the grid, first table line)
EAM = {
    "eam": (lo.potential("Cu_u3.eam"), 2, 3, 4),
    "eam/alloy": (str(DATA / "Cu_zhou04.eam.alloy"), 6, 5, 7),
    "eam/fs": (lo.potential("Fe_mm.eam.fs"), 6, 5, 7),
}
SUFFIX = {"eam": ".eam", "eam/alloy": ".eam.alloy", "eam/fs": ".eam.fs", "sw": ".sw", "tersoff": ".tersoff"}
SW = ("epsilon", "sigma", "a", "lam", "gamma", "costheta0", "A", "B", "p", "q", "tol")
TERSOFF = ("m", "gamma", "lam3", "c", "d", "h", "n", "beta", "lam2", "B", "R", "D", "lam1", "A")
# What LAMMPS's read_file refuses when negative (pair_sw.cpp, pair_tersoff.cpp), written out here
# rather than imported, so that the reader's own list is tested
SW_NONNEGATIVE = ("epsilon", "sigma", "a", "lam", "gamma", "A", "B", "p", "q", "tol")
TERSOFF_NONNEGATIVE = ("gamma", "c", "d", "n", "beta", "lam2", "B", "R", "D", "lam1", "A")
THREE_BODY = {"sw": (str(DATA / "Si_sw85.sw"), SW, "Stillinger-Weber"),
              "tersoff": (str(DATA / "Si_tersoff88.tersoff"), TERSOFF, "Tersoff")}


# ---- helpers ------------------------------------------------------------------------------------------
def lines_of(path):
    return Path(path).read_text().split("\n")


def last_line(lines):
    """The 1-based number of the last non-blank line."""
    return max(i for i, line in enumerate(lines, 1) if line.strip())


def put(lines, line, index, new):
    """Word `index` of line `line` (1-based; index -1 the last word) replaced by `new`: (lines, its column)."""
    lines = list(lines)
    word = list(re.finditer(r"\S+", lines[line - 1]))[index]
    lines[line - 1] = lines[line - 1][:word.start()] + new + lines[line - 1][word.end():]
    return lines, word.start() + 1


def write(tmp_path, fmt, lines, name="p"):
    path = tmp_path / f"{name}{SUFFIX[fmt]}"
    path.write_text("\n".join(lines) if isinstance(lines, list) else lines)
    return str(path)


def refused(path, fmt, line, col, phrase, elements=None):
    """The reader refuses the file at path:line:col with a message containing `phrase`."""
    with pytest.raises(SpecError) as err:
        potentials.read([path], fmt, elements)
    e = err.value
    assert phrase in e.message, e.message
    assert (e.path, e.line, e.col) == (path, line, col), str(e)
    assert str(e).startswith(f"{path}:{line}:{col}: ") and "None" not in str(e)
    return e.message


def corrupt(tmp_path, fmt, line, index, new, source=None):
    source = source or (EAM[fmt][0] if fmt in EAM else THREE_BODY[fmt][0])
    lines, col = put(lines_of(source), line, index, new)
    return write(tmp_path, fmt, lines), col


# ---- the error's place: never None -------------------------------------------------------------------
def test_a_spec_error_without_a_column_prints_no_none():
    assert str(SpecError("bad", "f.eam", 3)) == "f.eam:3: bad"
    assert str(SpecError("bad", "f.eam", 3, 7)) == "f.eam:3:7: bad"
    assert str(SpecError("bad", "f.eam")) == "f.eam: bad"


# ---- item 5: non-finite numbers in tables ------------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(EAM))
@pytest.mark.parametrize("bad", ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1.5e400"])
@pytest.mark.parametrize("where", ["first table", "last table"])
def test_a_non_finite_table_value_is_refused_at_its_token(tmp_path, fmt, bad, where):
    source, _, _, first = EAM[fmt]
    lines = lines_of(source)
    line, index = (first, 1) if where == "first table" else (last_line(lines), -1)
    path, col = corrupt(tmp_path, fmt, line, index, bad)
    refused(path, fmt, line, col, f"'{bad}' is not a finite number")


@pytest.mark.parametrize("fmt", sorted(EAM))
@pytest.mark.parametrize("bad", ["x21", "1_0", "1.0d0", "0x10", "1e", "--1", "\uff11", "1.0.0"])
def test_a_word_that_is_no_number_is_refused_at_its_token(tmp_path, fmt, bad):
    """As LAMMPS's tokenizer: Python's float() would read 1_0 and the full-width digit."""
    source, _, _, first = EAM[fmt]
    path, col = corrupt(tmp_path, fmt, first + 2, 2, bad)
    refused(path, fmt, first + 2, col, f"'{bad}' is not a number")


# ---- the grid line: Nrho drho Nr dr cutoff -------------------------------------------------------------
COUNT_BAD = [("nan", "must be an integer"), ("inf", "must be an integer"), ("1e3", "must be an integer"),
             ("5.5", "must be an integer"), ("500.0", "must be an integer"), ("0", "must be a positive integer"),
             ("-500", "must be a positive integer"), ("4", "a table needs at least 5 points"),
             ("16777217", "more than the limit of 16,777,216"), ("1" + "0" * 30, "more than the limit"),
             ("9" * 5000, "more than the limit")]
SPACING_BAD = [("nan", "is not a finite number"), ("inf", "is not a finite number"),
               ("-inf", "is not a finite number"), ("1e999", "is not a finite number (it overflows)"),
               ("0", "must be positive"), ("0.0", "must be positive"), ("-0.0", "must be positive"),
               ("-0.01", "must be positive"), ("1e-320", "too small to divide by"), ("x", "is not a number")]
GRID = {"Nrho": (0, COUNT_BAD), "drho": (1, SPACING_BAD + [("1e306", "grid's end")]),
        "Nr": (2, COUNT_BAD), "dr": (3, SPACING_BAD + [("1e306", "grid's end")]), "the cutoff": (4, SPACING_BAD)}


@pytest.mark.parametrize("fmt", sorted(EAM))
@pytest.mark.parametrize("field, index, bad, phrase",
                         [(f, i, b, p) for f, (i, bads) in GRID.items() for b, p in bads])
def test_every_grid_field_is_checked(tmp_path, fmt, field, index, bad, phrase):
    _, _, grid, _ = EAM[fmt]
    path, col = corrupt(tmp_path, fmt, grid, index, bad)
    if fmt == "eam" and bad == "4":     # file2array resamples a funcfl file onto one point fewer
        phrase = "a table needs at least 6 points"
    message = refused(path, fmt, grid, col, phrase)
    assert message.startswith(field)


def test_dr_inf_no_longer_gives_every_point_the_same_energy(tmp_path):
    """The issue's case, through the CLI: `adgrad run` exits 2 naming the token, and writes nothing."""
    shutil.copy(ROOT / "configs" / "cu_eam_model.yaml", tmp_path / "model.yaml")
    model = (tmp_path / "model.yaml").read_text().replace("../data/Cu_zhou04.eam.alloy", "p.eam.alloy")
    (tmp_path / "model.yaml").write_text(model)
    path, col = corrupt(tmp_path, "eam/alloy", 5, 3, "inf")
    config = (ROOT / "configs" / "cu_eam.yaml").read_text().replace("cu_eam_model.yaml", "model.yaml").replace(
        "../data/cu_points.h5", str(DATA / "cu_points.h5")).replace("cu_eam_out.h5", "out.h5")
    (tmp_path / "config.yaml").write_text(config)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml")])
    assert res.exit_code == 2, res.output
    assert f"{path}:5:{col}: dr: 'inf' is not a finite number" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("fmt", ["eam/alloy", "eam/fs"])
def test_a_sixth_grid_value_is_refused_not_dropped(fmt):
    """An eam/he file has rhomax as a sixth value, which changes F above it: read as eam/fs it is refused."""
    path = lo.potential("PdHHe.eam.he")
    word = list(re.finditer(r"\S+", lines_of(path)[4]))[5]
    refused(path, fmt, 5, word.start() + 1, f"5 values, but the line goes on with '{word.group()}'")


# ---- the element headers: atomic number (an integer) and mass (positive) --------------------------------
HEADER_BAD = [(0, "nan", "must be an integer"), (0, "29.0", "must be an integer"), (0, "1e3", "must be an integer"),
              (1, "nan", "is not a finite number"), (1, "inf", "is not a finite number"),
              (1, "1e999", "is not a finite number"), (1, "0", "must be positive"), (1, "-63.5", "must be positive"),
              (1, "abc", "is not a number")]


@pytest.mark.parametrize("fmt", sorted(EAM))
@pytest.mark.parametrize("index, bad, phrase", HEADER_BAD)
def test_atomic_number_and_mass_are_checked(tmp_path, fmt, index, bad, phrase):
    _, header, _, _ = EAM[fmt]
    path, col = corrupt(tmp_path, fmt, header, index, bad)
    message = refused(path, fmt, header, col, phrase)
    assert message.startswith("the atomic number" if index == 0 else "the mass")


def test_the_second_elements_header_is_checked_too(tmp_path):
    source = lo.potential("CuNi.eam.alloy")
    lines = lines_of(source)
    line = next(i for i, t in enumerate(lines, 1) if t.split()[:1] == ["29"])      # Cu, after Ni's tables
    path, col = corrupt(tmp_path, "eam/alloy", line, 1, "-63.55", source)
    assert "the mass of element Cu must be positive" in refused(path, "eam/alloy", line, col, "-63.55")


# ---- the element line of setfl and fs ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["eam/alloy", "eam/fs"])
@pytest.mark.parametrize("text, at, phrase", [
    ("0 X", 1, "the number of elements must be a positive integer, got '0'"),
    ("-1 X", 1, "must be a positive integer"),
    ("1.0 X", 1, "the number of elements must be an integer, got '1.0'"),
    ("nan X", 1, "must be an integer"),
    ("2 X", 1, "2 elements announced, 1 named"),
    ("1 X Y", 5, "1 elements announced, 2 named"),
    ("2 X X", 5, "element 'X' is named twice"),
])
def test_the_element_count_must_match_the_names(tmp_path, fmt, text, at, phrase):
    lines = lines_of(EAM[fmt][0])
    lines[3] = text
    refused(write(tmp_path, fmt, lines), fmt, 4, at, phrase)


def test_a_selected_element_must_be_in_the_file_and_none_is_no_selection(tmp_path):
    path = str(DATA / "Cu_zhou04.eam.alloy")
    refused(path, "eam/alloy", 4, 3, "element 'Ni' is not in this file (it has Cu)", ["Cu", "Ni"])
    with pytest.raises(ValueError, match="an empty list selects no element"):
        potentials.read([path], "eam/alloy", [])
    cu = potentials.read([path], "eam/alloy", ["Cu", "Cu"])       # two species of one element, as LAMMPS allows
    assert cu.tables["rho"].values.shape[:2] == (2, 2)
    assert np.array_equal(cu.tables["rho"].values[1, 0], cu.tables["rho"].values[0, 0])


# ---- truncated files and what follows the last table ---------------------------------------------------
LAST_TABLE = {"eam": "rho(r)", "eam/alloy": "r*phi(r) of Cu-Cu", "eam/fs": "r*phi(r) of Fe-Fe"}


@pytest.mark.parametrize("fmt", sorted(EAM))
@pytest.mark.parametrize("cut", ["empty", "before the grid", "in the first table", "last line", "last word"])
def test_a_truncated_file_is_refused_at_its_end(tmp_path, fmt, cut):
    source, _, grid, first = EAM[fmt]
    lines = lines_of(source)[:last_line(lines_of(source))]
    lines, phrase = {
        "empty": ([], "the file ends before"),
        "before the grid": (lines[:grid - 1], "the file ends in the grid line (Nrho, drho, Nr, dr, cutoff): 0 of 5"),
        "in the first table": (lines[:first + 4], "the file ends in F(rho)"),
        "last line": (lines[:-1], f"the file ends in {LAST_TABLE[fmt]}"),
        "last word": (re.sub(r"\s*\S+\s*$", "", "\n".join(lines)).split("\n"), "numbers read"),
    }[cut]
    path = write(tmp_path, fmt, lines)
    refused(path, fmt, *((len(lines), len(lines[-1]) + 1) if lines else (1, 1)), phrase)


@pytest.mark.parametrize("fmt", sorted(EAM))
def test_anything_after_the_last_table_is_refused_but_comments_and_blank_lines(tmp_path, fmt):
    source = EAM[fmt][0]
    lines = lines_of(source)[:last_line(lines_of(source))]
    want = potentials.read([source], fmt)
    same = potentials.read([write(tmp_path, fmt, lines + ["", "# the end", "   ", ""], "ok")], fmt)
    assert all(np.array_equal(want.tables[k].values, same.tables[k].values) for k in want.tables)
    refused(write(tmp_path, fmt, lines + ["", "0.0"]), fmt, len(lines) + 2, 1, "the file goes on after")
    lines[-1] += " 0.5"
    refused(write(tmp_path, fmt, lines, "extra"), fmt, len(lines), len(lines[-1]) - 2,
            "but its last line goes on with '0.5'")


def test_a_number_left_on_a_tables_last_line_is_a_misaligned_file(tmp_path):
    """Cu_zhou04's F has 2,001 numbers: its last line (407) holds one; LAMMPS would drop a second."""
    lines = lines_of(DATA / "Cu_zhou04.eam.alloy")
    assert len(lines[406].split()) == 1
    lines[406] += " -1.5"
    refused(write(tmp_path, "eam/alloy", lines), "eam/alloy", 407, len(lines[406]) - 3,
            "F(rho) of Cu ends after 2,001 numbers, but its last line goes on with '-1.5'")


def test_blank_lines_and_comments_inside_tables_read_as_lammps_reads_them(tmp_path):
    """TextFileReader skips blank lines and drops what follows a '#' on a line of numbers."""
    lines = lines_of(DATA / "Cu_zhou04.eam.alloy")
    lines[10] += "   # a comment"
    lines.insert(8, "")
    got = potentials.read([write(tmp_path, "eam/alloy", lines)], "eam/alloy")
    want = potentials.read([str(DATA / "Cu_zhou04.eam.alloy")], "eam/alloy")
    assert all(np.array_equal(want.tables[k].values, got.tables[k].values) for k in want.tables)


def test_a_huge_sparse_file_is_refused_after_its_first_mib(tmp_path):
    """A sparse file is terabytes of NULs on no disk space: one line, refused at the line limit before
    the rest is read (64 MiB here, so that a reader holding the whole file stays harmless)."""
    path = tmp_path / "p.eam.alloy"
    with open(path, "wb") as f:
        f.truncate(64 << 20)
    refused(str(path), "eam/alloy", 1, 1, f"line 1 is longer than the limit of {MAX_LINE:,} characters")
    lines = lines_of(DATA / "Cu_zhou04.eam.alloy")
    lines[1] = "c" * MAX_LINE           # a comment line at the limit is fine
    assert potentials.read([write(tmp_path, "eam/alloy", lines, "ok")], "eam/alloy").elements == ("Cu",)
    lines[1] += "c"
    refused(write(tmp_path, "eam/alloy", lines), "eam/alloy", 2, 1, "line 2 is longer than the limit")


def test_crlf_line_ends_read_as_lf(tmp_path):
    text = (DATA / "Cu_zhou04.eam.alloy").read_text()
    path = tmp_path / "p.eam.alloy"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    got = potentials.read([str(path)], "eam/alloy")
    want = potentials.read([str(DATA / "Cu_zhou04.eam.alloy")], "eam/alloy")
    assert all(np.array_equal(want.tables[k].values, got.tables[k].values) for k in want.tables)
    path.write_bytes(text.replace("\n", "\r\n").replace("2001 0.021175871000000002", "2001 nan").encode())
    refused(str(path), "eam/alloy", 5, 6, "drho: 'nan' is not a finite number")


def test_a_potential_file_that_is_not_a_regular_file_is_refused(tmp_path):
    with pytest.raises(SpecError, match="must be a regular file"):
        potentials.read([str(tmp_path)], "eam/alloy")
    with pytest.raises(SpecError, match="cannot read potential file"):
        potentials.read([str(tmp_path / "missing.eam.alloy")], "eam/alloy")


# ---- item 11: tables within the limit of a param's elements, refused from the header --------------------
def test_a_17_million_node_table_is_refused_before_it_is_read(tmp_path):
    path, col = corrupt(tmp_path, "eam/alloy", 5, 2, "17000000")
    refused(path, "eam/alloy", 5, col, "Nr is 17000000, more than the limit of 16,777,216 elements of a param")


def test_the_limit_counts_the_tables_of_every_species_pair(tmp_path):
    """CuNi: rho and z2r are 2 x 2 tables of Nr points, F 2 tables of Nrho: one param each."""
    source = lo.potential("CuNi.eam.alloy")
    quarter, half = MAX_ELEMENTS // 4, MAX_ELEMENTS // 2
    path, col = corrupt(tmp_path, "eam/alloy", 5, 2, str(quarter + 1), source)
    refused(path, "eam/alloy", 5, col, f"Nr = {quarter + 1:,} points in each of 4 tables (2 elements) make "
                                       f"{4 * quarter + 4:,} values, more than the limit of {MAX_ELEMENTS:,}")
    path, col = corrupt(tmp_path, "eam/alloy", 5, 0, str(half + 1), source)
    refused(path, "eam/alloy", 5, col, f"Nrho = {half + 1:,} points in each of 2 tables (2 elements)")
    # at the limit the header passes (rho of Ni then runs into Cu's header); one element: 4x as many
    path, _ = corrupt(tmp_path, "eam/alloy", 5, 2, str(quarter), source)
    with pytest.raises(SpecError, match=r"rho\(r\) of Ni: 'FCC' is not a number"):
        potentials.read([path], "eam/alloy")
    path, _ = corrupt(tmp_path, "eam/alloy", 5, 2, str(4 * quarter), source)
    with pytest.raises(SpecError, match=r"rho\(r\) of Ni: 'FCC' is not a number"):
        potentials.read([path], "eam/alloy", ["Cu"])


def test_the_limit_counts_every_funcfl_file(tmp_path):
    ok = lo.potential("Cu_u3.eam")
    path, col = corrupt(tmp_path, "eam", 3, 2, str(MAX_ELEMENTS // 4 + 1))
    with pytest.raises(SpecError) as err:
        potentials.read([ok, path], "eam")
    assert (err.value.path, err.value.line, err.value.col) == (path, 3, col)
    assert "in each of 4 tables (2 elements)" in err.value.message


def test_three_body_files_of_more_than_256_elements_are_refused_before_any_array(tmp_path):
    names = [f"E{i}" for i in range(258)]
    text = "".join(f"{a} {b} {c} " + " ".join(["1.0"] * len(SW)) + "\n"
                   for a, b, c in zip(names[0::3], names[1::3], names[2::3]))
    path = write(tmp_path, "sw", text)
    # E256 is the 257th element, one too many: the entry on line 86 names it second
    refused(path, "sw", 86, 6, f"258 elements make {258 ** 3:,} triplets, more than the limit of 16,777,216")
    refused(path, "sw", 86, 6, "257 elements make", names[:257])
    with pytest.raises(SpecError, match="no entry for the triplet E0 E0 E0"):   # 256: arrays, then the check
        potentials.read([path], "sw", names[:256])


# ---- SW and Tersoff: every constant finite, and what LAMMPS refuses ------------------------------------
def three_body(tmp_path, fmt, name, new, source=None):
    """The file with parameter `name` of its first entry set to `new`: (path, line, col)."""
    source = source or THREE_BODY[fmt][0]
    names = THREE_BODY[fmt][1]
    lines = lines_of(source)
    line = next(i for i, t in enumerate(lines, 1) if t.strip() and not t.lstrip().startswith("#"))
    lines, col = put(lines, line, 3 + names.index(name), new)
    return write(tmp_path, fmt, lines), line, col


@pytest.mark.parametrize("fmt, name", [("sw", n) for n in SW] + [("tersoff", n) for n in TERSOFF])
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e999", "x"])
def test_every_three_body_constant_must_be_a_finite_number(tmp_path, fmt, name, bad):
    path, line, col = three_body(tmp_path, fmt, name, bad)
    message = refused(path, fmt, line, col, f"'{bad}' is not a {'number' if bad == 'x' else 'finite number'}")
    assert message.startswith(f"the {THREE_BODY[fmt][2]} parameter {name} of Si Si Si")


@pytest.mark.parametrize("fmt, name", [("sw", n) for n in SW] + [("tersoff", n) for n in TERSOFF if n != "m"])
def test_negative_constants_are_refused_where_lammps_refuses_them(tmp_path, fmt, name):
    path, line, col = three_body(tmp_path, fmt, name, "-0.5")
    if name in (SW_NONNEGATIVE if fmt == "sw" else TERSOFF_NONNEGATIVE):
        kind = THREE_BODY[fmt][2]
        refused(path, fmt, line, col, f"the {kind} parameter {name} of Si Si Si must not be negative, got -0.5 "
                                      f"(LAMMPS: Illegal {kind} parameter)")
    else:                               # costheta0, lam3, h: any sign
        assert potentials.read([path], fmt).constants[name] == -0.5


@pytest.mark.parametrize("m, ok", [("1", True), ("3.0", True), ("3e0", True), ("2", False), ("0", False),
                                   ("1.5", False), ("3.0000001", False), ("-3", False)])
def test_tersoff_m_is_1_or_3(tmp_path, m, ok):
    path, line, col = three_body(tmp_path, "tersoff", "m", m)
    if ok:
        assert potentials.read([path], "tersoff").constants["m"] == float(m)
    else:
        refused(path, "tersoff", line, col, f"the Tersoff parameter m of Si Si Si must be 1 or 3, got {m}")


def test_tersoff_d_may_not_exceed_r(tmp_path):
    path, line, col = three_body(tmp_path, "tersoff", "D", "3.5")      # R = 3.0
    refused(path, "tersoff", line, col, "D of Si Si Si must not exceed R = 3.0, got 3.5")
    path, _, _ = three_body(tmp_path, "tersoff", "D", "3.0")
    assert potentials.read([path], "tersoff").constants["cut"] == 6.0


@pytest.mark.parametrize("fmt, x, y", [("sw", "a", "sigma"), ("tersoff", "R", "D")])
def test_a_cutoff_whose_square_overflows_is_refused(tmp_path, fmt, x, y):
    path, line, _ = three_body(tmp_path, fmt, y, "1e200")
    lines, col = put(lines_of(path), line, 3 + THREE_BODY[fmt][1].index(x), "1e200")
    path = write(tmp_path, fmt, lines)
    refused(path, fmt, line, col, "the cutoff of Si Si Si overflows")


def test_the_constants_of_unselected_elements_are_checked_too(tmp_path):
    """SiC.tersoff read for Si alone: a NaN in a carbon entry is still a broken file."""
    source = lo.potential("SiC.tersoff")
    lines = lines_of(source)
    line = next(i for i, t in enumerate(lines, 1) if t.split()[:3] == ["C", "C", "C"]) + 1   # A ends the 2nd line
    lines, col = put(lines, line, -1, "nan")
    refused(write(tmp_path, "tersoff", lines), "tersoff", line, col, "'nan' is not a finite number", ["Si"])


def test_three_body_entries_are_checked_as_a_whole(tmp_path):
    source = THREE_BODY["tersoff"][0]
    lines = lines_of(source)
    entry = last_line(lines)
    refused(write(tmp_path, "tersoff", lines + [lines[entry - 1]], "twice"), "tersoff", len(lines) + 1, 1,
            f"the triplet Si Si Si is given twice (also on line {entry})")
    lines[entry - 1] += " 1.0"
    refused(write(tmp_path, "tersoff", lines), "tersoff", entry, 1, "this one has 18")
    lines[entry - 1] = lines[entry - 1].rsplit(None, 2)[0]
    refused(write(tmp_path, "tersoff", lines), "tersoff", entry, 1, "the file ends inside an entry (16 of 17 words)")
    with pytest.raises(ValueError, match="an empty list selects no element"):
        potentials.read([source], "tersoff", [])
    with pytest.raises(ValueError, match="a tersoff potential is one file, got 2"):
        potentials.read([source, source], "tersoff")
    two = potentials.read([source], "tersoff", ["Si", "Si"])      # two species of one element
    assert two.constants["A"].shape == (2, 2, 2) and np.all(two.constants["A"] == 3264.7)


# ---- through the CLI: exit 2 with file:line:column ------------------------------------------------------
@pytest.mark.parametrize("fmt, name, new, phrase", [
    ("sw", "epsilon", "nan", "the Stillinger-Weber parameter epsilon of Si Si Si: 'nan' is not a finite number"),
    ("tersoff", "D", "3.5", "the Tersoff parameter D of Si Si Si must not exceed R = 3.0, got 3.5"),
])
def test_three_body_refusals_exit_2_through_the_cli(tmp_path, fmt, name, new, phrase):
    model = (ROOT / "configs" / f"si_{fmt}_model.yaml").read_text()
    model = model.replace(f"../data/{Path(THREE_BODY[fmt][0]).name}", f"p{SUFFIX[fmt]}")
    (tmp_path / "model.yaml").write_text(model)
    path, line, col = three_body(tmp_path, fmt, name, new)
    res = CliRunner().invoke(cli, ["explain", str(tmp_path / "model.yaml")])
    assert res.exit_code == 2, res.output
    assert f"{path}:{line}:{col}: {phrase}" in res.output and "Traceback" not in res.output


def test_a_model_file_error_about_a_potential_names_the_model(tmp_path):
    """A wrong `elements:` or file count is the model's fault: the model file's line, not the potential's."""
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        adgrad: 1
        name: m
        inputs:
          r: []
        params:
          p: {{potential: [{DATA / 'Si_sw85.sw'}, {DATA / 'Si_sw85.sw'}]}}
        outputs:
          E: p.A * r
    """))
    with pytest.raises(SpecError) as err:
        api.load_model(str(tmp_path / "m.yaml"))
    assert err.value.path == str(tmp_path / "m.yaml") and err.value.line == 6
    assert "a sw potential is one file, got 2" in err.value.message


# ---- any token, anywhere in a table (hypothesis) --------------------------------------------------------
SMALL_SETFL = "c1\nc2\nc3\n1 X\n6 0.1 6 0.5 2.4\n1 1.0 3.0 fcc\n{F}\n{rho}\n{z2r}\n"
NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")     # LAMMPS's utils::is_double
NOT_A_NUMBER = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "+nan", "infinity", "1e999", "-1e309", "1_0", "0x1", "1d0", ".", "e5"]),
    st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="#"),
            min_size=1, max_size=8).filter(lambda t: t.split() == [t] and not NUMBER.fullmatch(t)))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=18, max_size=18),
       st.integers(0, 17), NOT_A_NUMBER)
def test_any_finite_table_reads_back_exactly_and_any_other_word_is_refused_where_it_is(values, k, bad):
    words = [repr(v) for v in values]
    text = SMALL_SETFL.format(**{name: " ".join(words[6 * i:6 * i + 6]) for i, name in enumerate(("F", "rho", "z2r"))})
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "p.eam.alloy")
        Path(path).write_text(text)
        pot = potentials.read([path], "eam/alloy")
        got = np.concatenate([pot.tables[n].values.ravel() for n in ("F", "rho", "z2r")])
        assert np.array_equal(got, np.array(values)) and all(math.copysign(1, a) == math.copysign(1, b)
                                                              for a, b in zip(got, values))
        words[k] = bad
        line = 7 + k // 6
        col = 1 + sum(len(w) + 1 for w in words[6 * (k // 6):k])
        Path(path).write_text(SMALL_SETFL.format(
            **{name: " ".join(words[6 * i:6 * i + 6]) for i, name in enumerate(("F", "rho", "z2r"))}))
        with pytest.raises(SpecError) as err:
            potentials.read([path], "eam/alloy")
        assert (err.value.line, err.value.col) == (line, col), str(err.value)
        assert f"'{bad}' is not a" in err.value.message
