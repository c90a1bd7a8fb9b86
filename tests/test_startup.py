"""Start-up of the command line (issue: adgrad inside simulation loops): `--version` and `--help` load
neither numba nor h5py; `adgrad run` skips numba's BLAS probe (an import of scipy.linalg, 0.15-0.25 s)
because its kernels call no BLAS, while the Python API leaves the probe alone for the caller's numba
code. What is imported is read from `python -X importtime`, in fresh processes."""
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


def test_api_leaves_the_probe_to_numba(tmp_path):
    """In a caller's process numba's np.dot etc. keep working: the BLAS probe runs as numba made it."""
    pytest.importorskip("scipy.linalg")
    code = (f"from adgrad.engine import compile_model, load_model\n"
            f"compile_model(load_model({str(ROOT / 'configs' / 'neohookean_model.yaml')!r}), [('W', 'F')])\n"
            f"import numba.np.arraymath as am, sys\nprint(am._HAVE_BLAS, 'scipy.linalg' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True"]
