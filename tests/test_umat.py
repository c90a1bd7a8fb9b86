"""adgrad export --umat: the Abaqus UMAT inside a real finite-element code (CalculiX 2.20 built with
external behaviours by .ci/calculix.sh) and called from Fortran.

- linear_elastic_plastic_isotropic_hardening.yaml as a UMAT equals CalculiX's own *ELASTIC +
  *PLASTIC in every printed stress, strain, displacement and reaction force, with the same Newton
  iterations per increment (uniaxial with unloading, simple shear, several elements, fixed increments);
- j2_voce.yaml (no built-in) equals adgrad's API along the strain path CalculiX took, to 1e-12 in
  stress and state (every UMAT call is recorded at full precision by a pass-through library), and
  CalculiX needs no more iterations per increment than with the built-in linear hardening;
- neo_hooke.yaml through the finite-strain route (@ABAQUSNL) equals *HYPERELASTIC, NEO HOOKE, its
  STRESS and DDSDDE those numpy computes from P and dP/dF; a Saint Venant-Kirchhoff model written with
  each stress measure gives the same;
- a point whose local solve fails cuts the increment (PNEWDT), and a deck's wrong NPROPS or NSTATV
  prints one line and cuts it; the deck in docs/native.md runs as written;
- a gfortran program calling the UMAT gets kernel.evaluate's bits;
- a model that cannot be a UMAT is refused at its line (exit 2), and a config's section replaces the model's.
The CalculiX tests are skipped, saying why, only where no ccx with external behaviours is found."""
from __future__ import annotations

import os
import re
import shutil
import sys
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from calculix_jobs import environment, find_ccx, mesh, user_material

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "native.md").read_text()
MODELS = ROOT / "configs" / "models"


CCX, WHY = find_ccx()
needs_ccx = pytest.mark.skipif(CCX is None, reason=WHY or "")


def export(model, out, *args):
    res = CliRunner().invoke(cli, ["export", str(model), "--umat", "-o", str(out), *map(str, args)])
    assert res.exit_code == 0, res.output
    return out


# ---- CalculiX jobs -------------------------------------------------------------------------------------

# the load cases: TOP's dof moved to `value` times an amplitude that goes up to 1 and back to 0 in one
# step, yielding again in reverse on the way (a new step would make CalculiX's first iteration ask its
# own materials, not a UMAT, for an elastic tangent: docs/native.md); BOTTOM is clamped, TOP's other
# dofs are free (uniaxial) or held (simple shear)
UNIAXIAL = {"hold": (), "dof": 3, "value": 0.02}
SHEAR = {"hold": (2, 3), "dof": 1, "value": 0.01}
PATH = "0., 0., 1., 1., 2., 0."


def deck(material, section, case, increments=8, nlgeom=False, size=(2, 1, 2), direct=True, tight=True):
    """The input deck of a block (size) of material `material` (a *MATERIAL block naming `section`),
    under `case` along PATH, in `increments` fixed increments (direct) or automatic ones; tight:
    Newton's iterations go on to a residual of 1e-9 of the average force (CalculiX's default: 0.005)."""
    lines = [mesh(*size), material, f"*SOLID SECTION, ELSET=EALL, MATERIAL={section}",
             "*AMPLITUDE, NAME=PATH", PATH, "*BOUNDARY", "BOTTOM, 1, 3"]
    lines += [f"TOP, {dof}, {dof}, 0." for dof in case["hold"]]
    lines += [f"*STEP, INC=1000{', NLGEOM' if nlgeom else ''}",
              "*STATIC, DIRECT" if direct else "*STATIC", f"{2 / increments}, 2.{'' if direct else ', 1e-5, 2.'}",
              *(["*CONTROLS, PARAMETERS=FIELD", "1e-9, 1e-9"] if tight else []),
              "*BOUNDARY, AMPLITUDE=PATH", f"TOP, {case['dof']}, {case['dof']}, {case['value']}",
              "*NODE PRINT, NSET=NALL", "U, RF", "*EL PRINT, ELSET=EALL", "S, E", "*END STEP"]
    return "\n".join(lines) + "\n"


class Job:
    """A finished ccx run: its printed results (read_dat), [(step, increment, attempt, Newton
    iterations)] of its .sta file, and its output."""

    def __init__(self, directory, name, proc):
        self.dat = read_dat(directory / f"{name}.dat") if (directory / f"{name}.dat").exists() else []
        sta = directory / f"{name}.sta"
        self.iterations = [tuple(int(v) for v in line.split()[:4]) for line in sta.read_text().splitlines()
                           if re.match(r"\s+\d+\s+\d+\s+\d+\s+\d+\s", line)] if sta.exists() else []
        self.stdout, self.stderr, self.returncode = proc.stdout, proc.stderr, proc.returncode


def ccx(text, directory, name="job", libs=(), threads=1, env=None):
    """Run CalculiX on the deck `text` in `directory`, with the libraries of `libs` found through
    LD_LIBRARY_PATH (how CalculiX finds lib<LIB>.so of a material @ABAQUS_<LIB>_<FUNC>)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.inp").write_text(text)
    proc = subprocess.run([CCX, "-i", name], cwd=directory, env=environment(libs, threads, env), capture_output=True,
                          text=True, timeout=600)
    return Job(directory, name, proc)


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
            labels = 1 if blocks[-1][0] in ("displacements", "forces") else 2    # node; element and point
            blocks[-1][3].append(numbers[labels:])
    return [(q, s, t, np.array(rows)) for q, s, t, rows in blocks]


def assert_same_printed(a, b, rtol=1e-6):
    """Every printed number of two jobs equal to the printed digits (7): within rtol of each other,
    noise below 1e-8 of the largest value of the quantity in the job aside (the zeros of the residual
    forces at free nodes, which Newton's method leaves at up to 1e-9 of the average force)."""
    assert [x[:3] for x in a.dat] == [x[:3] for x in b.dat] and a.dat
    scale = {}
    for q, _, _, x in a.dat:
        scale[q] = max(scale.get(q, 0.0), np.abs(x).max())
    for (q, s, t, x), (_, _, _, y) in zip(a.dat, b.dat):
        bad = np.abs(x - y) > rtol * np.abs(x) + 1e-8 * scale[q]
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


# ---- J2 with Voce hardening: adgrad's API along CalculiX's strain path --------------------------------

SPY = r"""
/* A pass-through UMAT: calls the UMAT of the library $SPY_LIB and appends every call, its inputs and
   outputs, to the file $SPY_LOG as one record of doubles (test_umat.py: Calls). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void umat_fn(double *, double *, double *, double *, double *, double *, double *, double *, double *,
                     double *, const double *, const double *, const double *, const double *, const double *,
                     const double *, const double *, const double *, const char *, const int *, const int *,
                     const int *, const int *, const double *, const int *, const double *, const double *, double *,
                     const double *, const double *, const double *, const int *, const int *, const int *,
                     const int *, const int *, const int *, int);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static umat_fn *real;
static FILE *out;

void UMAT(double *STRESS, double *STATEV, double *DDSDDE, double *SSE, double *SPD, double *SCD, double *RPL,
          double *DDSDDT, double *DRPLDE, double *DRPLDT, const double *STRAN, const double *DSTRAN,
          const double *TIME, const double *DTIME, const double *TEMP, const double *DTEMP, const double *PREDEF,
          const double *DPRED, const char *CMNAME, const int *NDI, const int *NSHR, const int *NTENS,
          const int *NSTATV, const double *PROPS, const int *NPROPS, const double *COORDS, const double *DROT,
          double *PNEWDT, const double *CELENT, const double *DFGRD0, const double *DFGRD1, const int *NOEL,
          const int *NPT, const int *LAYER, const int *KSPT, const int *JSTEP, const int *KINC, int length) {
    pthread_mutex_lock(&lock);
    if (!real) {
        void *lib = dlopen(getenv("SPY_LIB"), RTLD_NOW | RTLD_LOCAL);
        real = lib ? (umat_fn *)dlsym(lib, "UMAT") : NULL;
        out = fopen(getenv("SPY_LOG"), "ab");
        if (!real || !out) {
            fprintf(stderr, "spy: cannot load %s or open %s\n", getenv("SPY_LIB"), getenv("SPY_LOG"));
            exit(3);
        }
    }
    pthread_mutex_unlock(&lock);
    int n = *NSTATV;
    double head[4] = {*NOEL, *NPT, JSTEP[0], *KINC}, statev[n + 1], stress[6], dfgrd1[9];
    memcpy(statev, STATEV, sizeof(double) * n);
    memcpy(stress, STRESS, sizeof stress);
    memcpy(dfgrd1, DFGRD1, sizeof dfgrd1);
    real(STRESS, STATEV, DDSDDE, SSE, SPD, SCD, RPL, DDSDDT, DRPLDE, DRPLDT, STRAN, DSTRAN, TIME, DTIME, TEMP, DTEMP,
         PREDEF, DPRED, CMNAME, NDI, NSHR, NTENS, NSTATV, PROPS, NPROPS, COORDS, DROT, PNEWDT, CELENT, DFGRD0, DFGRD1,
         NOEL, NPT, LAYER, KSPT, JSTEP, KINC, length);
    pthread_mutex_lock(&lock);
    fwrite(head, sizeof(double), 4, out);
    fwrite(STRAN, sizeof(double), 6, out);
    fwrite(DSTRAN, sizeof(double), 6, out);
    fwrite(dfgrd1, sizeof(double), 9, out);
    fwrite(statev, sizeof(double), n, out);
    fwrite(stress, sizeof(double), 6, out);
    fwrite(STRESS, sizeof(double), 6, out);
    fwrite(STATEV, sizeof(double), n, out);
    fwrite(DDSDDE, sizeof(double), 36, out);
    fwrite(PNEWDT, sizeof(double), 1, out);
    fflush(out);
    pthread_mutex_unlock(&lock);
}
"""


@pytest.fixture(scope="module")
def spy(tmp_path_factory):
    """The directory of libSPY.so (SPY above): a material @ABAQUS_SPY_UMAT records every call."""
    d = tmp_path_factory.mktemp("spy")
    (d / "spy.c").write_text(SPY)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", d / "libSPY.so", d / "spy.c", "-ldl", "-lpthread"],
                   check=True)
    return d


class Calls:
    """The UMAT calls a SPY recorded, as arrays over calls."""

    def __init__(self, path, nstatv):
        n = nstatv
        fields = [("head", 4), ("stran", 6), ("dstran", 6), ("dfgrd1", 9), ("statev_in", n), ("stress_in", 6),
                  ("stress", 6),
                  ("statev", n), ("ddsdde", 36), ("pnewdt", 1)]
        raw = np.fromfile(path).reshape(-1, sum(size for _, size in fields))
        k = 0
        for name, size in fields:
            setattr(self, name, raw[:, k:k + size])
            k += size
        self.noel, self.npt, self.step, self.kinc = (self.head[:, j].astype(int) for j in range(4))


def spied(text, directory, real, spy, **kwargs):
    """ccx on a deck whose material is @ABAQUS_SPY_UMAT, passing every call to the UMAT of `real`."""
    log = directory / "calls.bin"
    job = ccx(text, directory, libs=[spy], env={"SPY_LIB": str(real), "SPY_LOG": str(log)}, **kwargs)
    return job, log


VOCE = (210000.0, 0.3, 250.0, 20000.0, 150.0, 300.0)   # E, nu, sy, K, q, b: PROPS of the exported j2_voce
VOIGT = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]


def tensors(voigt):
    """Voigt rows with engineering shears -> (M, 3, 3) tensors, as the UMAT builds its strain."""
    t = np.empty((len(voigt), 3, 3))
    for v, (a, b) in enumerate(VOIGT):
        t[:, a, b] = t[:, b, a] = voigt[:, v] if v < 3 else 0.5 * voigt[:, v]
    return t


def voigt_stress(s):
    return np.stack([s[:, a, b] for a, b in VOIGT], axis=1)


def voigt_tangent(t):
    """dsigma/deps (M, 3, 3, 3, 3) -> DDSDDE (M, 36) column-major, as the UMAT writes it."""
    d = np.empty((len(t), 6, 6))
    for i, (a, b) in enumerate(VOIGT):
        for j, (c, e) in enumerate(VOIGT):
            d[:, i, j] = t[:, a, b, c, c] if j < 3 else 0.5 * (t[:, a, b, c, e] + t[:, a, b, e, c])
    return d.transpose(0, 2, 1).reshape(-1, 36)


def j2_kernel(path):
    from adgrad.engine import compile_model, load_model
    return compile_model(load_model(path), [("sigma", "eps")], values=["sigma", "eps_p_new", "alpha_new"])


@pytest.fixture(scope="module")
def voce_kernel():
    return j2_kernel(MODELS / "j2_voce.yaml")


def voce_api(kernel, eps, statev, props=VOCE):
    """kernel.evaluate (of a j2_voce) at strains eps (M, 3, 3) and states statev (M, 10), params `props`."""
    params = dict(zip(("E", "nu", "sy", "K", "q", "b"), props))
    return kernel.evaluate({"eps": eps, "eps_p": statev[:, :9].reshape(-1, 3, 3), "alpha": statev[:, 9]},
                           params=params)


def j2_state(out):
    return np.concatenate([out["eps_p_new"].reshape(-1, 9), out["alpha_new"][:, None]], 1)


def assert_api_path(calls, kernel, points, increments):
    """The converged increments (each point's last call in an increment) equal the API driven along
    their strains from a virgin state, to 1e-12 in stress and state. Returns the last state."""
    last = {(s, k, e, p): i for i, (s, k, e, p) in enumerate(zip(calls.step, calls.kinc, calls.noel, calls.npt))}
    keys = sorted({(e, p) for _, _, e, p in last})
    steps = sorted({(s, k) for s, k, _, _ in last})
    assert len(keys) == points and len(steps) == increments
    state = np.zeros((len(keys), 10))
    for s, k in steps:
        rows = [last[s, k, e, p] for e, p in keys]
        assert np.abs(calls.statev_in[rows] - state).max() <= 1e-12 * np.abs(state).max()
        out = voce_api(kernel, tensors(calls.stran[rows] + calls.dstran[rows]), state)
        state, sigma = j2_state(out), voigt_stress(out["sigma"])
        assert np.abs(calls.stress[rows] - sigma).max() <= 1e-12 * np.abs(sigma).max()
        assert np.abs(calls.statev[rows] - state).max() <= 1e-12 * np.abs(state).max()
    return state


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


@needs_ccx
@pytest.mark.parametrize("case", ["uniaxial", "shear"])
def test_j2_voce_in_calculix_is_adgrads_api_along_its_strain_path(libs, spy, voce_kernel, case, tmp_path):
    load = {"uniaxial": UNIAXIAL, "shear": SHEAR}[case]
    name = "@ABAQUS_SPY_UMAT"
    job, log = spied(deck(user_material(name, VOCE, 10), name, load, tight=False), tmp_path / "voce",
                     libs["voce"] / "libJ2VOCE.so", spy)
    assert job.returncode == 0 and "*ERROR" not in job.stdout, job.stdout[-2000:]
    calls = Calls(log, 10)
    # every call CalculiX made: the bits of the API at the strain and the state it passed
    ref = voce_api(voce_kernel, tensors(calls.stran + calls.dstran), calls.statev_in)
    assert same_bits(calls.stress, voigt_stress(ref["sigma"]))
    assert same_bits(calls.statev, j2_state(ref))
    assert same_bits(calls.ddsdde, voigt_tangent(ref["dsigma_deps"]))
    assert (calls.pnewdt == -1).all()                  # nothing asked: CalculiX's "not set"
    state = assert_api_path(calls, voce_kernel, 32, 8)      # 4 elements of 8 points, 8 increments
    assert state[:, 9].max() * VOCE[5] > 0.3           # b alpha: hardened into the exponential's bend
    # Newton converges as fast as with CalculiX's own J2 with linear hardening on the same job (with an
    # elastic DDSDDE it takes up to 10 iterations an increment)
    builtin = ccx(deck(*builtin_j2(), load, tight=False), tmp_path / "builtin")
    assert len(job.iterations) == len(builtin.iterations) == 8
    assert all(a[3] <= b[3] for a, b in zip(job.iterations, builtin.iterations)), (job.iterations, builtin.iterations)


@needs_ccx
def test_a_local_solve_that_fails_cuts_the_increment(spy, tmp_path):
    """j2_voce with 3 Newton iterations for its plastic multiplier: too few for the first, large
    increment, which CalculiX then repeats smaller as the UMAT asks; never a NaN or a wrong stress."""
    model = tmp_path / "j2_few.yaml"
    model.write_text((MODELS / "j2_voce.yaml").read_text().replace("max_iter: 12", "max_iter: 3"))
    lib = export(model, tmp_path / "few", "--name", "J2FEW") / "libJ2FEW.so"
    name = "@ABAQUS_SPY_UMAT"
    job, log = spied(deck(user_material(name, VOCE, 10), name, UNIAXIAL, increments=2, size=(1, 1, 1), direct=False),
                     tmp_path / "job", lib, spy)
    assert job.returncode == 0 and "*ERROR" not in job.stdout, job.stdout[-2000:]
    assert job.stdout.count("increment size decrease requested by a material user routine (through pnewdt)") >= 2
    calls = Calls(log, 10)
    cut = calls.pnewdt[:, 0] == 0.5
    assert cut.any() and (calls.pnewdt[~cut] == -1).all()
    assert same_bits(calls.stress[cut], calls.stress_in[cut]) and same_bits(calls.statev[cut], calls.statev_in[cut])
    assert np.isfinite(calls.ddsdde).all() and np.isfinite(calls.stress).all() and np.isfinite(calls.statev).all()
    ref = voce_api(j2_kernel(model), tensors(calls.stran + calls.dstran), calls.statev_in)
    assert np.isnan(ref["sigma"][cut]).all() and np.isfinite(ref["sigma"][~cut]).all()
    assert same_bits(calls.stress[~cut], voigt_stress(ref["sigma"][~cut]))
    assert_api_path(calls, j2_kernel(model), 8, len(job.iterations))
    assert job.iterations[0][2] > 2                    # the .sta's attempt that passed, after the cuts


@needs_ccx
@pytest.mark.parametrize("props, nstatv, line", [
    (VOCE[:5], 10, "the deck gives 5 material constants (NPROPS, *USER MATERIAL CONSTANTS=), the model reads 6: "
                   "E, nu, sy, K, q, b; cutting the increment"),
    (VOCE, 9, "the deck gives 9 state variables (NSTATV, *DEPVAR), the model keeps 10: eps_p (9), alpha; "
              "cutting the increment")])
def test_a_deck_with_wrong_props_or_state_prints_one_line_and_cuts(libs, props, nstatv, line, tmp_path):
    name = "@ABAQUS_J2VOCE_UMAT"
    job = ccx(deck(user_material(name, props, nstatv), name, UNIAXIAL, increments=2, size=(1, 1, 1), direct=False),
              tmp_path, libs=[libs["voce"]])
    assert job.stderr == f"adgrad UMAT J2VOCE (model 'j2_voce'): {line}\n"
    assert job.stdout.count("increment size decrease requested by a material user routine") >= 5
    assert "*ERROR: too many cutbacks" in job.stdout and job.returncode != 0


@needs_ccx
def test_several_threads_call_the_umat_at_once(libs, tmp_path):
    name = "@ABAQUS_J2VOCE_UMAT"
    text = deck(user_material(name, VOCE, 10), name, SHEAR, size=(4, 4, 4))
    one = ccx(text, tmp_path / "one", libs=[libs["voce"]])
    two = ccx(text, tmp_path / "two", libs=[libs["voce"]], threads=2)
    assert "Using up to 2 cpu(s) for the stress calculation" in two.stdout
    assert_same_printed(one, two)
    assert two.iterations == one.iterations


# ---- Fortran -------------------------------------------------------------------------------------------

DRIVER = """\
! A material point driven through a strain path by the UMAT of libJ2VOCE.so: each row of path.bin
! (RESET, NPROPS, PROPS(6), STRAN(6), DSTRAN(6)) is one converged increment, STATEV and STRESS carried
! on (or zeroed first, RESET = 1); out.bin gets STRESS, STATEV, DDSDDE, PNEWDT and SSE of each.
program drive
  implicit none
  integer, parameter :: dp = kind(1d0)
  integer :: n, k, reset, nprops, ndi, nshr, ntens, nstatv, noel, npt, layer, kspt, jstep(4), kinc
  real(dp) :: stress(6), statev(10), ddsdde(6, 6), sse, spd, scd, rpl, ddsddt(6), drplde(6), drpldt
  real(dp) :: stran(6), dstran(6), time(2), dtime, temp, dtemp, predef(1), dpred(1), props(6), coords(3)
  real(dp) :: drot(3, 3), pnewdt, celent, dfgrd0(3, 3), dfgrd1(3, 3)
  character(len=80) :: cmname
  cmname = '@ABAQUS_J2VOCE_UMAT'
  ndi = 3; nshr = 3; ntens = 6; nstatv = 10; noel = 1; npt = 1; layer = 1; kspt = 1; jstep = 1; kinc = 1
  time = 0; dtime = 1; temp = 0; dtemp = 0; predef = 0; dpred = 0; coords = 0; drot = 0; celent = 1
  dfgrd0 = 0; dfgrd1 = 0; stress = 0; statev = 0; sse = 0
  open(10, file='path.bin', access='stream', form='unformatted', status='old')
  open(11, file='out.bin', access='stream', form='unformatted', status='replace')
  read(10) n
  do k = 1, n
    read(10) reset, nprops, props, stran, dstran
    if (reset == 1) then
      stress = 0
      statev = 0
    end if
    pnewdt = 1d36
    call umat(stress, statev, ddsdde, sse, spd, scd, rpl, ddsddt, drplde, drpldt, stran, dstran, time, dtime, &
              temp, dtemp, predef, dpred, cmname, ndi, nshr, ntens, nstatv, props, nprops, coords, drot, pnewdt, &
              celent, dfgrd0, dfgrd1, noel, npt, layer, kspt, jstep, kinc)
    write(11) stress, statev, ddsdde, pnewdt, sse
  end do
end program drive
"""


def test_a_fortran_program_calling_the_umat_gets_evaluates_bits(libs, voce_kernel, tmp_path):
    gfortran = shutil.which("gfortran")
    if gfortran is None:
        pytest.skip("no gfortran on PATH (apt-get install gfortran)")
    lib = libs["voce"]
    (tmp_path / "drive.f90").write_text(DRIVER)
    subprocess.run([gfortran, "-O2", "-o", tmp_path / "drive", tmp_path / "drive.f90", f"-L{lib}", "-lJ2VOCE",
                    f"-Wl,-rpath,{lib}"], check=True, cwd=tmp_path)
    # a strain path: tension, reversed into compression, shear, each in steps; then a row whose local
    # solve fails (softening so fast that Newton's first step leaves the yield function's domain), and
    # a row with one PROPS too few
    rng = np.random.default_rng(7)
    pull, shear = np.array([0.01, -0.004, -0.004, 0, 0, 0]), np.array([0, 0, 0, 0.02, 0.01, 0])
    total = np.concatenate([np.linspace(0, 1, 13)[1:, None] * pull, np.linspace(1, -1, 16)[1:, None] * pull,
                            -pull + np.linspace(0, 1, 13)[1:, None] * shear])
    total += rng.uniform(-1e-4, 1e-4, total.shape)
    stran = np.concatenate([np.zeros((1, 6)), total[:-1]])
    rows = [(0, 6, VOCE, s, t - s) for s, t in zip(stran, total)]
    bad = [0.01, -0.003, -0.003, 0, 0, 0]
    rows.append((1, 6, (*VOCE[:4], -300.0, 1000.0), np.zeros(6), bad))    # from a virgin state
    rows.append((0, 5, VOCE, total[-1], np.zeros(6)))
    with open(tmp_path / "path.bin", "wb") as f:
        np.array(len(rows), np.int32).tofile(f)
        for reset, nprops, props, s, d in rows:
            np.array([reset, nprops], np.int32).tofile(f)
            np.array([*props, *s, *d], np.float64).tofile(f)
    run = subprocess.run([tmp_path / "drive"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})       # no Python in its environment
    assert run.returncode == 0, run.stderr
    out = np.fromfile(tmp_path / "out.bin").reshape(len(rows), 6 + 10 + 36 + 2)
    stress, statev, ddsdde, pnewdt = out[:, :6], out[:, 6:16], out[:, 16:52], out[:, 52]
    m = len(total)
    state = np.zeros((m, 10))
    strain = stran + (total - stran)   # the UMAT's STRAN + DSTRAN
    for k in range(m):                 # the API along the same path, its state carried on
        ref = voce_api(voce_kernel, tensors(strain[k:k + 1]), state[k - 1:k] if k else np.zeros((1, 10)))
        state[k] = j2_state(ref)[0]
        assert same_bits(stress[k], voigt_stress(ref["sigma"])[0]) and same_bits(statev[k], state[k])
        assert same_bits(ddsdde[k], voigt_tangent(ref["dsigma_deps"])[0])
    assert (pnewdt[:m] == 1e36).all() and state[:, 9].max() > 0.01
    fails = voce_api(voce_kernel, tensors(np.array([bad])), np.zeros((1, 10)), props=(*VOCE[:4], -300.0, 1000.0))
    assert np.isnan(fails["sigma"]).all()
    assert pnewdt[m] == 0.5 and not stress[m].any() and not statev[m].any()    # cut: STRESS and STATEV as they came
    assert pnewdt[m + 1] == 0.5 and not stress[m + 1].any() and not statev[m + 1].any()
    assert np.isfinite(ddsdde).all()
    assert run.stderr == ("adgrad UMAT J2VOCE (model 'j2_voce'): the deck gives 5 material constants (NPROPS, "
                          "*USER MATERIAL CONSTANTS=), the model reads 6: E, nu, sy, K, q, b; cutting the increment\n")


# ---- the deck in docs/native.md -------------------------------------------------------------------------

@needs_ccx
def test_the_docs_deck_runs_and_gives_the_apis_stresses(voce_kernel, tmp_path):
    (text,) = [b for b in re.findall(r"```text\n(.*?)```", DOC, re.S) if b.startswith("** j2.inp")]
    (commands,) = [b for b in re.findall(r"```sh\n(.*?)```", DOC, re.S) if "--umat" in b]
    export_line, run_line = commands.strip().splitlines()
    (tmp_path / "j2.inp").write_text(text)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run(export_line, shell=True, cwd=tmp_path, env=env, check=True)
    assert run_line.startswith("LD_LIBRARY_PATH=$PWD/build/j2voce ccx ")
    job = subprocess.run(run_line.replace(" ccx ", f" {CCX} "), shell=True, cwd=tmp_path, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert job.returncode == 0 and "*ERROR" not in job.stdout, job.stdout[-2000:]
    blocks = {(q, t): x for q, _, t, x in read_dat(tmp_path / "j2.dat")}
    times = sorted({t for _, t in blocks})
    assert times[-1] == 2.0 and 1.0 in times and len(times) >= 8
    state = np.zeros((8, 10))
    for t in times:                     # the API at the printed strains from the printed state before them
        strain = blocks["strains", t]
        sigma = voigt_stress(voce_api(voce_kernel, tensors(strain), state)["sigma"])
        # to the printed digits (7) of the strain (times E) and of the stress
        tol = 1e-6 * (VOCE[0] * np.abs(strain).max() + np.abs(sigma).max())
        assert np.abs(sigma - blocks["stresses", t]).max() < tol
        state = blocks["internal state variables", t]
    assert blocks["stresses", 1.0][:, 2].min() > 400 and blocks["stresses", 2.0][:, 2].max() < -250


# ---- finite strain: neo_hooke.yaml through @ABAQUSNL ---------------------------------------------------

RUBBER = (80.0, 400.0)          # mu, bulk: PROPS of the exported neo_hooke


def builtin_neo_hooke(mu=RUBBER[0], bulk=RUBBER[1]):
    """CalculiX's W = C10 (I1bar - 3) + (J - 1)^2 / D1: the model's mu/2 (I1bar - 3) + bulk/2 (J - 1)^2
    with C10 = mu/2, D1 = 2/bulk."""
    return f"*MATERIAL, NAME=RUBBER\n*HYPERELASTIC, NEO HOOKE\n{mu / 2}, {2 / bulk}\n", "RUBBER"


def finite_strain(F, P, A):
    """(STRESS, DDSDDE) of the finite-strain UMAT from F, P and A = dP/dF (docs/native.md), by numpy:
    U from eigh, S = F^-1 P, dS along dF = F^-T dE; R^T sigma R = U S U / J, (U x U) : dS/dE : (U x U)."""
    G, J = np.linalg.inv(F), np.linalg.det(F)
    w, Q = np.linalg.eigh(np.einsum("mki,mkj->mij", F, F))
    U = np.einsum("mik,mk,mjk->mij", Q, np.sqrt(w), Q)
    S = G @ P
    sym = lambda M: voigt_stress((M + M.transpose(0, 2, 1)) / 2)     # noqa: E731
    ddsdde = np.empty((len(F), 6, 6))
    for col, (c, d) in enumerate(VOIGT):
        e = np.zeros((3, 3))
        e[c, d] += 0.5 if col >= 3 else 1.0
        e[d, c] += 0.5 if col >= 3 else 0.0
        dF = G.transpose(0, 2, 1) @ (U @ e @ U)
        dS = G @ np.einsum("mijkl,mkl->mij", A, dF) - G @ dF @ S
        ddsdde[:, :, col] = sym(U @ dS @ U)
    return sym(U @ S @ U) / J[:, None], ddsdde.transpose(0, 2, 1).reshape(-1, 36)


@needs_ccx
@pytest.mark.parametrize("case", ["uniaxial", "shear"])
def test_neo_hooke_through_abaqusnl_equals_calculix_hyperelastic(libs, spy, case, tmp_path):
    from adgrad.engine import compile_model, load_model
    load = dict({"uniaxial": UNIAXIAL, "shear": SHEAR}[case], value=1.0)     # a stretch of 1.5, a shear of 0.5
    builtin = ccx(deck(*builtin_neo_hooke(), load, nlgeom=True), tmp_path / "builtin")
    name = "@ABAQUSNL_SPY_UMAT"
    job, log = spied(deck(user_material(name, RUBBER, 0), name, load, nlgeom=True), tmp_path / "umat",
                     libs["neo"] / "libNEOHOOKE.so", spy)
    assert job.returncode == 0 and "*ERROR" not in job.stdout, job.stdout[-2000:]
    assert_same_printed(builtin, job)
    # the same Newton iterations, but in the step's first increment, where CalculiX asks its own
    # materials for their elastic stiffness (docs/native.md)
    assert job.iterations[1:] == builtin.iterations[1:] and len(job.iterations) == 8
    assert job.iterations[0][3] <= builtin.iterations[0][3] + 1
    # every call: the rotated Cauchy stress and the tangent CalculiX 2.20 maps back to S and dS/dE
    calls = Calls(log, 0)
    F = calls.dfgrd1.reshape(-1, 3, 3).transpose(0, 2, 1)            # DFGRD1 is column-major
    kernel = compile_model(load_model(MODELS / "neo_hooke.yaml"), [("W", "F"), ("W", ["F", "F"])])
    ref = kernel.evaluate({"F": F}, params=dict(zip(("mu", "bulk"), RUBBER)))
    stress, ddsdde = finite_strain(F, ref["dW_dF"], ref["d2W_dF_dF"])
    assert np.abs(calls.stress - stress).max() <= 1e-12 * np.abs(stress).max()
    assert np.abs(calls.ddsdde - ddsdde).max() <= 1e-12 * np.abs(ddsdde).max()
    assert (calls.pnewdt == -1).all() and np.linalg.svd(F, compute_uv=False).max() > 1.3


def call_umat(lib, F0=None, F1=None, stran=None, dstran=None, props=(), statev=(), stress=None, nprops=None,
              nstatv=None, ndi=3):
    """One call of the UMAT of `lib` (a ctypes.CDLL) -> (STRESS, STATEV, DDSDDE, PNEWDT, SSE)."""
    import ctypes
    d = lambda a: np.ascontiguousarray(a, dtype=np.float64)          # noqa: E731
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)                # noqa: E731
    i32 = lambda v: ctypes.byref(ctypes.c_int(v))                    # noqa: E731
    stress = d(np.zeros(6) if stress is None else stress).copy()
    statev, ddsdde = d(list(statev) + [0.0]).copy(), np.full(36, np.nan)
    col = lambda F: d((np.eye(3) if F is None else np.asarray(F)).T.ravel())     # noqa: E731  column-major
    stran, dstran = d(np.zeros(6) if stran is None else stran), d(np.zeros(6) if dstran is None else dstran)
    f0, f1, pr = col(F0), col(F1), d(list(props) + [0.0])
    sse, pnewdt, scalars = d([0.0]), d([1e36]), d(np.zeros(16))
    s = lambda k: ptr(scalars[k:])                                   # noqa: E731
    jstep = (ctypes.c_int * 4)(1, 1, 0, 0)
    lib.UMAT(ptr(stress), ptr(statev), ptr(ddsdde), ptr(sse), s(0), s(1), s(2), s(3), s(4), s(5), ptr(stran),
             ptr(dstran), s(6), s(8), s(9), s(10), s(11), s(12), ctypes.c_char_p(b"M" * 80), i32(ndi), i32(3),
             i32(6), i32(len(statev) - 1 if nstatv is None else nstatv), ptr(pr),
             i32(len(pr) - 1 if nprops is None else nprops),
             s(13), ptr(np.eye(3)), ptr(pnewdt), s(14), ptr(f0), ptr(f1), i32(1), i32(1), i32(1), i32(1), jstep,
             i32(1), ctypes.c_int(80))
    return stress, statev[:-1], ddsdde, pnewdt[0], sse[0]


SVK = """adgrad: 1
name: svk
inputs:
  F: {shape: [3, 3], sample: {low: -0.2, high: 0.2, center: identity}}
params:
  lmbda: 120.0
  mu: 80.0
let:
  E: (F.T @ F - eye(3))/2
  S: lmbda*trace(E)*eye(3) + 2*mu*E
outputs:
  T: %s
export:
  umat:
    F: F
    stress: T
    measure: %s
    props: [lmbda, mu]
"""
MEASURES = {"second_piola": "S", "first_piola": "F @ S", "kirchhoff": "F @ S @ F.T", "cauchy": "F @ S @ F.T / det(F)"}


@pytest.mark.parametrize("measure", list(MEASURES))
def test_every_finite_strain_measure_gives_the_same_stress_and_tangent(measure, tmp_path):
    """Saint Venant-Kirchhoff written with each stress measure: the UMAT turns each into the same
    rotated Cauchy stress and tangent, those of numpy from P and dP/dF."""
    import ctypes
    from adgrad.engine import compile_model
    from adgrad.engine.model import build
    from adgrad.engine.spec import load_model_file
    model = tmp_path / "svk.yaml"
    model.write_text(SVK % (MEASURES[measure], measure))
    lib = ctypes.CDLL(str(export(model, tmp_path / "svk") / "libSVK.so"))
    (tmp_path / "p.yaml").write_text(SVK % (MEASURES["first_piola"], "first_piola"))
    kernel = compile_model(build(load_model_file(str(tmp_path / "p.yaml"))), [("T", "F")])
    F = np.eye(3) + np.random.default_rng(3).uniform(-0.3, 0.3, (20, 3, 3))
    props = (100.0, 60.0)
    ref = kernel.evaluate({"F": F}, params={"lmbda": props[0], "mu": props[1]})
    stress, ddsdde = finite_strain(F, ref["T"], ref["dT_dF"])
    for k in range(len(F)):
        got = call_umat(lib, F1=F[k], props=props)
        assert np.abs(got[0] - stress[k]).max() <= 1e-12 * np.abs(stress[k]).max()
        assert np.abs(got[2] - ddsdde[k]).max() <= 1e-12 * np.abs(ddsdde[k]).max()
        assert got[3] == 1e36
    # an F with det F <= 0: cut, STRESS as it came, the tangent at DFGRD0
    flipped = np.diag([1.0, 1.0, -1.0]) @ F[0]
    got = call_umat(lib, F0=F[1], F1=flipped, props=props, stress=np.arange(6.0))
    assert got[3] == 0.5 and (got[0] == np.arange(6.0)).all() and np.allclose(got[2], ddsdde[1], rtol=1e-12)


def test_an_energys_umat_gives_its_energy_as_sse(libs):
    import ctypes
    from adgrad.engine import compile_model, load_model
    lib = ctypes.CDLL(str(libs["neo"] / "libNEOHOOKE.so"))
    F = np.array([[1.2, 0.1, 0.0], [0.05, 0.9, 0.02], [0.0, 0.1, 1.05]])
    kernel = compile_model(load_model(MODELS / "neo_hooke.yaml"), [("W", "F")])
    W = kernel.evaluate({"F": F[None]}, params=dict(zip(("mu", "bulk"), RUBBER)))["W"][0]
    assert call_umat(lib, F1=F, props=RUBBER)[4] == W


def test_a_configs_export_section_replaces_the_models(tmp_path):
    import ctypes
    import json
    config = tmp_path / "j2.yaml"
    config.write_text(f"adgrad: 1\nmodel: {MODELS / 'j2_voce.yaml'}\nparams: {{q: 0.0}}\nexport:\n  umat:\n"
                      f"    strain: eps\n    stress: sigma\n    state: {{alpha_new: alpha, eps_p_new: eps_p}}\n"
                      f"    props: [sy, E]\n")
    out = export(config, tmp_path / "out", "--name", "J2CONFIG")
    umat = json.loads((out / "adgrad-export.json").read_text())["umat"]
    assert umat["props"] == [{"param": "sy", "first": 1, "size": 1}, {"param": "E", "first": 2, "size": 1}]
    assert [(s["input"], s["first"]) for s in umat["statev"]] == [("alpha", 1), ("eps_p", 2)]
    assert umat["material"] == "@ABAQUS_J2CONFIG_UMAT" and umat["nstatv"] == 10 and umat["nprops"] == 2
    lib = ctypes.CDLL(str(out / "libJ2CONFIG.so"))
    strain = [0.02, -0.01, -0.01, 0.0, 0.0, 0.0]
    stress, statev, *_ = call_umat(lib, dstran=strain, props=(250.0, 210000.0), statev=np.zeros(10))
    kernel = j2_kernel(MODELS / "j2_voce.yaml")
    ref = voce_api(kernel, tensors(np.array([strain])), np.zeros((1, 10)),
                   props=(210000.0, 1 / 3, 250.0, 0.1, 0.0, 20.0))     # PROPS, the others the config's
    assert same_bits(stress, voigt_stress(ref["sigma"])[0]) and statev[0] == ref["alpha_new"][0] > 0
