"""Shared fixtures: write a model's YAML text to a temporary file and load it. The `slow` marker: the
test files a first check can leave out (`python -m pytest -q -m "not slow"`, README.md)."""
from __future__ import annotations

import subprocess
import textwrap

import pytest

from adgrad.engine import load_model

# The files whose cold run (empty compile cache, 2 cores) costs more than about 10 CPU seconds, or that
# need an outside oracle or tool (LAMMPS, felupe, CalculiX, a C compiler, SLURM), or that start many
# processes (signals, crashes, resumes): marked `slow`. The rest, about 1,000 tests (every command,
# the model language, the IR, small kernels in every mode, the docs and the layers), are the quick
# subset. Measured with `--durations` and CPU per file; README.md has the times.
SLOW = {
    "test_bench.py", "test_cache.py", "test_direct.py", "test_examples.py", "test_export.py", "test_felupe.py",
    "test_felupe_adapter.py", "test_hard_zeros.py", "test_hostile.py", "test_hostile_api.py", "test_hostile_ase.py",
    "test_hostile_files.py", "test_lammps.py", "test_linalg.py", "test_ops.py", "test_rules.py",
    "test_run_production.py", "test_slurm.py", "test_solve.py", "test_spectral.py", "test_umat.py", "test_vecmath.py",
    "test_vectorize.py",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the quick subset, `pytest -m 'not slow'` (tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def model_from_text(tmp_path_factory):
    """`model_from_text(yaml_text, name)` -> LoadedModel (the text is dedented and written to a file)."""
    root = tmp_path_factory.mktemp("models")

    def make(text, name="model"):
        path = root / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip())
        return load_model(path)
    return make


@pytest.fixture
def tmpfs(tmp_path):
    """mount(name, options): a directory of tmp_path with a tmpfs of those mount options on it (a small or
    full disk), where the machine lets us mount one (root, mount available), else the test is skipped;
    unmounted after the test."""
    mounted = []

    def mount(name, options):
        mnt = tmp_path / name
        mnt.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here ({(r.stderr or r.stdout).strip() or 'mount failed'})")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in reversed(mounted):
        subprocess.run(["umount", str(mnt)], capture_output=True)
