"""Start-up of the command line (issue: adgrad inside simulation loops): `--version` and `--help` load
neither numba nor h5py; loading a kernel (`adgrad run`, the API) defers numba's BLAS probe (an import
of scipy.linalg, 0.15-0.25 s), as kernels call no BLAS, while a caller's numba np.dot still finds
BLAS. What is imported is read from `python -X importtime`, in fresh processes."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAIN = "import sys; from adgrad.cli.entry import main; sys.argv[0] = 'adgrad'; main()"


def imported(args, cwd):
    """(exit code, names of the modules the process imported) of `adgrad ARGS` run through the entry point."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-c", MAIN, *args], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    names = {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", res.stderr, re.M)}
    return res.returncode, names


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"]])
def test_version_and_help_load_no_engine(args, tmp_path):
    code, names = imported(args, tmp_path)
    assert code == 0
    assert not {"numba", "h5py", "scipy"} & names


def test_run_skips_numbas_blas_probe(tmp_path):
    for folder, name in (("configs", "eam.yaml"), ("configs", "eam_model.yaml"), ("data", "eam_points.h5")):
        (tmp_path / folder).mkdir(exist_ok=True)
        shutil.copy(ROOT / folder / name, tmp_path / folder / name)
    code, names = imported(["run", "configs/eam.yaml", "-o", "out.h5", "-q"], tmp_path)
    assert code == 0 and (tmp_path / "out.h5").exists()
    assert "numba" in names and "scipy.linalg" not in names


def test_api_defers_the_probe_and_numbas_dot_keeps_blas(tmp_path):
    """Loading a kernel imports no scipy.linalg; numba still knows BLAS is there, and a caller's own
    np.dot compiles (numba imports scipy.linalg then) and is right."""
    pytest.importorskip("scipy.linalg")
    code = (f"import sys\nfrom adgrad.engine import compile_model, load_model\n"
            f"compile_model(load_model({str(ROOT / 'configs' / 'neohookean_model.yaml')!r}), [('W', 'F')])\n"
            f"loaded = 'scipy.linalg' in sys.modules\n"
            f"import numpy as np, numba, numba.np.arraymath as am\n"
            f"dot = numba.njit(lambda a, b: np.dot(a, b))\n"
            f"a = np.arange(6.0).reshape(2, 3)\n"
            f"print(loaded, am._HAVE_BLAS, np.array_equal(dot(a, a.T), a @ a.T), 'scipy.linalg' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True", "True", "True"]
