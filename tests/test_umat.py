"""adgrad export --umat: the Abaqus UMAT inside a real finite-element code (CalculiX 2.20 built with
external behaviours by .ci/calculix.sh) and called from Fortran.

- linear_elastic_plastic_isotropic_hardening.yaml as a UMAT equals CalculiX's own *ELASTIC +
  *PLASTIC in every printed stress, strain, displacement and reaction force, with the same Newton
  iterations per increment (uniaxial with unloading, simple shear, several elements, fixed increments);
- j2_voce.yaml (no built-in) equals adgrad's API along the strain path CalculiX took, to 1e-12 in
  stress and state (every UMAT call is recorded at full precision by a pass-through library), and
  CalculiX needs no more iterations per increment than with the built-in linear hardening;
- neo_hooke.yaml through the finite-strain route (@ABAQUSNL) equals *HYPERELASTIC, NEO HOOKE;
- a point whose local solve fails cuts the increment (PNEWDT), and a deck's wrong NPROPS or NSTATV
  prints one line and cuts it; the deck in docs/native.md runs as written;
- a gfortran program calling the UMAT gets kernel.evaluate's bits.
The CalculiX tests are skipped, saying why, only where no ccx with external behaviours is found."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "native.md").read_text()
MODELS = ROOT / "configs" / "models"


def find_ccx():
    """(path of a ccx with external behaviours, None) or (None, why not)."""
    cache = os.environ.get("ADGRAD_CI_CACHE") or os.path.expanduser("~/.cache/adgrad-ci")
    path = os.environ.get("ADGRAD_CCX") or os.path.join(cache, "calculix", "bin", "ccx")
    if not os.access(path, os.X_OK):
        return None, f"no CalculiX at {path}: run .ci/calculix.sh (or set ADGRAD_CCX to a ccx with external behaviours)"
    with open(path, "rb") as f:
        if b"unable to load function" not in f.read():      # external.c's message: only with the flag
            return None, (f"{path} is built without -DCALCULIX_EXTERNAL_BEHAVIOURS_SUPPORT (its @ABAQUS materials "
                          f"call an empty stub): build one with .ci/calculix.sh")
    return path, None


CCX, WHY = find_ccx()
needs_ccx = pytest.mark.skipif(CCX is None, reason=WHY or "")


def export(model, out, *args):
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(out), *map(str, args)])
    assert res.exit_code == 0, res.output
    return out


# ---- CalculiX jobs -------------------------------------------------------------------------------------

def mesh(nx, ny, nz):
    """A block of nx x ny x nz unit C3D8 elements: nodes, elements and the sets NALL, EALL, BOTTOM (z = 0), TOP."""
    def node(i, j, k):
        return 1 + i + (nx + 1) * (j + (ny + 1) * k)
    lines = ["*NODE, NSET=NALL"]
    lines += [f"{node(i, j, k)}, {i}, {j}, {k}" for k in range(nz + 1) for j in range(ny + 1) for i in range(nx + 1)]
    lines.append("*ELEMENT, TYPE=C3D8, ELSET=EALL")
    e = 0
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                e += 1
                corners = [(i, j, k), (i + 1, j, k), (i + 1, j + 1, k), (i, j + 1, k)]
                ids = [node(a, b, c) for a, b, c in corners] + [node(a, b, c + 1) for a, b, c in corners]
                lines.append(f"{e}, " + ", ".join(map(str, ids)))
    for name, k in (("BOTTOM", 0), ("TOP", nz)):
        ids = [node(i, j, k) for j in range(ny + 1) for i in range(nx + 1)]
        lines.append(f"*NSET, NSET={name}")
        lines += [", ".join(map(str, ids[a:a + 8])) for a in range(0, len(ids), 8)]
    return "\n".join(lines)


def user_material(name, props, nstatv):
    lines = [f"*MATERIAL, NAME={name}", f"*USER MATERIAL, CONSTANTS={len(props)}"]
    lines += [", ".join(repr(float(p)) for p in props[a:a + 8]) for a in range(0, len(props), 8)]
    if nstatv:
        lines += ["*DEPVAR", str(nstatv)]
    return "\n".join(lines)


# the load cases: TOP's dof moved to `value` times an amplitude that goes up to 1 and back to 0 in one
# step, yielding again in reverse on the way (a new step would make CalculiX's first iteration ask its
# own materials, not a UMAT, for an elastic tangent: docs/native.md); BOTTOM is clamped, TOP's other
# dofs are free (uniaxial) or held (simple shear)
UNIAXIAL = {"hold": (), "dof": 3, "value": 0.02}
SHEAR = {"hold": (2, 3), "dof": 1, "value": 0.01}
PATH = "0., 0., 1., 1., 2., 0."


def deck(material, section, case, increments=8, nlgeom=False, size=(2, 1, 2), direct=True):
    """The input deck of a block (size) of material `material` (a *MATERIAL block naming `section`),
    under `case` along PATH, in `increments` fixed increments (direct) or automatic ones."""
    lines = [mesh(*size), material, f"*SOLID SECTION, ELSET=EALL, MATERIAL={section}",
             "*AMPLITUDE, NAME=PATH", PATH, "*BOUNDARY", "BOTTOM, 1, 3"]
    lines += [f"TOP, {dof}, {dof}, 0." for dof in case["hold"]]
    lines += [f"*STEP, INC=1000{', NLGEOM' if nlgeom else ''}",
              "*STATIC, DIRECT" if direct else "*STATIC", f"{2 / increments}, 2.{'' if direct else ', 1e-5, 2.'}",
              "*CONTROLS, PARAMETERS=FIELD", "1e-9, 1e-9",
              "*BOUNDARY, AMPLITUDE=PATH", f"TOP, {case['dof']}, {case['dof']}, {case['value']}",
              "*NODE PRINT, NSET=NALL", "U, RF", "*EL PRINT, ELSET=EALL", "S, E", "*END STEP"]
    return "\n".join(lines) + "\n"


class Job:
    def __init__(self, directory, name, proc):
        self.dat = read_dat(directory / f"{name}.dat") if (directory / f"{name}.dat").exists() else []
        sta = directory / f"{name}.sta"
        self.sta = [tuple(int(v) for v in line.split()[:4]) for line in sta.read_text().splitlines()
                    if re.match(r"\s+\d+\s+\d+\s+\d+\s+\d+\s", line)] if sta.exists() else []
        self.stdout, self.stderr, self.returncode = proc.stdout, proc.stderr, proc.returncode

    @property
    def iterations(self):
        """[(step, increment, attempt, Newton iterations)] of the .sta file."""
        return self.sta


def ccx(text, directory, name="job", libs=(), threads=1, env=None):
    """Run CalculiX on the deck `text` in `directory`, with the libraries of `libs` found through
    LD_LIBRARY_PATH (how CalculiX finds lib<LIB>.so of a material @ABAQUS_<LIB>_<FUNC>)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.inp").write_text(text)
    threads = str(threads)
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(str(d) for d in libs), "OMP_NUM_THREADS": threads,
           "CCX_NPROC_STIFFNESS": threads, "CCX_NPROC_RESULTS": threads, "CCX_NPROC_EQUATION_SOLVER": threads,
           **(env or {})}
    proc = subprocess.run([CCX, "-i", name], cwd=directory, env=env, capture_output=True, text=True, timeout=600)
    job = Job(directory, name, proc)
    return job


def read_dat(path):
    """[(quantity, set, time, rows)] of a CalculiX .dat file; rows without their node or element and
    integration point numbers."""
    blocks = []
    for line in path.read_text().splitlines():
        m = re.match(r"\s*(\w[\w ]*?) \(([^)]*)\) for set (\S+) and time\s+(\S+)", line)
        if m:
            blocks.append((m.group(1), m.group(3), float(m.group(4)), []))
        elif blocks and line.strip():
            numbers = [float(v) for v in line.split()]
            labels = 2 if blocks[-1][0] in ("stresses", "strains") else 1
            blocks[-1][3].append(numbers[labels:])
    return [(q, s, t, np.array(rows)) for q, s, t, rows in blocks]


def assert_same_printed(a, b, rtol=1e-6):
    """Every printed number of two jobs equal to the printed digits (7): within rtol of each other,
    round-off noise of 1e-10 of the largest such value aside."""
    assert [x[:3] for x in a.dat] == [x[:3] for x in b.dat] and a.dat
    for (q, s, t, x), (_, _, _, y) in zip(a.dat, b.dat):
        scale = np.abs(x).max()
        bad = np.abs(x - y) > rtol * np.abs(x) + 1e-10 * scale
        assert not bad.any(), f"{q} of {s} at time {t}: {x[bad][:4]} vs {y[bad][:4]}"


def builtin_j2(E=210000.0, nu=0.3, sy=250.0, K=20000.0):
    """*ELASTIC + *PLASTIC with linear isotropic hardening sy + K ep (the table's last point far out)."""
    return (f"*MATERIAL, NAME=STEEL\n*ELASTIC\n{E}, {nu}\n*PLASTIC\n{sy}, 0.\n{sy + K * 10.0}, 10.\n", "STEEL")


STEEL = (210000.0, 0.3, 250.0, 20000.0)     # E, nu, sy, K: PROPS of the exported J2


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """The UMAT exports of the three library models (a directory each)."""
    d = tmp_path_factory.mktemp("umat")
    return {"lin": export(MODELS / "linear_elastic_plastic_isotropic_hardening.yaml", d / "lin", "--name", "LINJ2"),
            "voce": export(MODELS / "j2_voce.yaml", d / "voce"),
            "neo": export(MODELS / "neo_hooke.yaml", d / "neo")}


@needs_ccx
@pytest.mark.parametrize("case", ["uniaxial", "shear"])
def test_linear_hardening_umat_equals_calculix_builtin_plasticity(libs, case, tmp_path):
    load = {"uniaxial": UNIAXIAL, "shear": SHEAR}[case]
    builtin = ccx(deck(*builtin_j2(), load), tmp_path / "builtin")
    name = "@ABAQUS_LINJ2_UMAT"
    umat = ccx(deck(user_material(name, STEEL, 10), name, load), tmp_path / "umat", libs=[libs["lin"]])
    assert umat.returncode == 0 and "*ERROR" not in umat.stdout, umat.stdout[-2000:]
    assert_same_printed(builtin, umat)
    assert umat.iterations == builtin.iterations and len(umat.iterations) == 8
    assert max(mises(x).max() for q, _, _, x in umat.dat if q == "stresses") > 1.05 * STEEL[2]     # it yielded


def mises(s):
    """The von Mises stress of rows sxx syy szz sxy sxz syz."""
    return np.sqrt(0.5 * ((s[:, 0] - s[:, 1]) ** 2 + (s[:, 1] - s[:, 2]) ** 2 + (s[:, 2] - s[:, 0]) ** 2)
                   + 3 * (s[:, 3] ** 2 + s[:, 4] ** 2 + s[:, 5] ** 2))


# ---- a model that cannot be a UMAT: exit 2 at its line, nothing written ---------------------------------

LINEAR = (MODELS / "linear_elastic_plastic_isotropic_hardening.yaml").read_text()
BASE = LINEAR[:LINEAR.index("export:")]
GOOD = {"strain": "eps", "stress": "sigma", "state": "{eps_p_new: eps_p, alpha_new: alpha}", "props": "[E, nu, sy, K]"}


def umat_section(**keys):
    """export: umat: with GOOD's entries, changed by keys (None drops one)."""
    entries = {**GOOD, **keys}
    return "export:\n  umat:\n" + "".join(f"    {k}: {v}\n" for k, v in entries.items() if v is not None)


BAD = [   # (model text, the line's text where the error points, phrase)
    (BASE + umat_section(strain=None), "  umat:", "name the input a UMAT fills, the strain (strain:"),
    (BASE + umat_section(F="eps"), "    F: eps", "one of them"),
    (BASE + umat_section(strain="sigma"), "    strain: sigma", "'sigma' is not an input of model"),
    (BASE.replace("alpha: {shape: []", "alpha: {shape: [3, 3]").replace("eps: {shape: [3, 3]", "eps: {shape: [6]")
     + umat_section(), "    strain: eps", "input 'eps' has shape [6]; the strain of a UMAT is a 3x3 tensor"),
    (BASE + umat_section(stress="tau"), "    stress: tau", "'tau' is not an output of model"),
    (BASE + umat_section(stress="alpha_new", state="{eps_p_new: eps_p, sigma: alpha}"), "    stress: alpha_new",
     "output 'alpha_new' has shape []; a UMAT's stress is a 3x3 tensor"),
    (BASE + umat_section(state="{eps_p_new: eps_q, alpha_new: alpha}"), "    state:",
     "its old value 'eps_q' is not an input of model"),
    (BASE + umat_section(state="{eps_p_new: eps_p, alpha_new: eps}"), "    state:",
     "its old value 'eps' is not an input of model 'linear_elastic_plastic_isotropic_hardening' other than the strain"),
    (BASE + umat_section(state="{eps_p_new: alpha, alpha_new: eps_p}"), "    state:",
     "output 'eps_p_new' has shape [3, 3] but its old value 'alpha' has shape []"),
    (BASE + umat_section(state="{eps_p_new: eps_p}"), "    state:",
     "input 'alpha' of model 'linear_elastic_plastic_isotropic_hardening' is neither the strain input nor"),
    (BASE + umat_section(state="{eps_p_new: eps_p, alpha_new: alpha, sigma: alpha}"), "    state:",
     "'sigma' is the stress"),
    (BASE + umat_section(props="[E, nu, zz]"), "    props:", "'zz' is not a param of model"),
    (BASE + umat_section(props="[E, E]"), "    props:", "'E' is listed twice"),
    (BASE + umat_section(measure="cauchy"), "    measure:", "a measure is for a finite-strain UMAT"),
    (BASE + umat_section(tangent="dsigma_deps"), "    tangent:", "unknown key 'tangent'"),
    (BASE + "export:\n  kim: {}\n", "  kim:", "export: unknown key 'kim'"),
]


@pytest.mark.parametrize("text, at, phrase", BAD, ids=[b[2][:40] for b in BAD])
def test_a_model_that_cannot_be_a_umat_is_refused_at_its_line(text, at, phrase, tmp_path):
    model = tmp_path / "model.yaml"
    model.write_text(text)
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith(at))) + 1
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert f"{model}:{line}:" in res.output and phrase in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_a_finite_strain_stress_output_needs_its_measure(tmp_path):
    text = (MODELS / "neo_hooke.yaml").read_text()
    text = text[:text.index("export:")].replace("outputs:\n", "outputs:\n  P: F @ F.T\n")
    model = tmp_path / "model.yaml"
    model.write_text(text + "export:\n  umat:\n    F: F\n    stress: P\n")
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "say which stress the output 'P' is: measure: first_piola" in res.output
    model.write_text(text + "export:\n  umat:\n    F: F\n    stress: dW_dF\n    measure: cauchy\n")
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "the gradient of an energy wrt F is the first Piola-Kirchhoff" in res.output
    assert not (tmp_path / "out").exists()


def test_umat_needs_an_export_section_and_a_calculix_name(tmp_path):
    model = tmp_path / "model.yaml"
    model.write_text(BASE)
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and f"{model}: model 'linear_elastic_plastic_isotropic_hardening' has no export: " \
                                  f"umat: section" in res.output, res.output
    for name in ("j2", "J2_VOCE", "2J"):
        res = CliRunner().invoke(cli, ["export", str(MODELS / "j2_voce.yaml"), "--umat", "--name", name,
                                       "-o", str(tmp_path / "out")])
        assert res.exit_code == 2 and f"--name {name!r}: a UMAT's library is named for CalculiX" in res.output
    assert not (tmp_path / "out").exists()
