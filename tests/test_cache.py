"""A damaged compile cache heals itself: truncate, empty or scramble one file of a cached kernel (the
generated k_*.py, numba's index .nbi or code .nbc) and the next run, in a new process, warns in one
line, rebuilds the entry and gives the same results; the run after that is quiet again."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(tmp, cache, out):
    env = dict(os.environ, ADGRAD_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", "from adgrad.cli.main import cli; cli()", "run",
                           str(ROOT / "configs" / "eam.yaml"),
                           "-o", str(tmp / out), "-q"], env=env, capture_output=True, text=True, timeout=300)


def results(path):
    with h5py.File(path, "r") as f:
        return f["E"][()], f["dE_dx"][()]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cache")
    cache = tmp / "cache"
    r = run(tmp, cache, "ref.h5")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    return tmp, cache, results(tmp / "ref.h5")


def damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        rng = np.random.default_rng(0)
        b = bytearray(data)
        for i in rng.integers(0, len(b), max(1, len(b) // 50)):
            b[i] = (b[i] + 1 + int(rng.integers(0, 254))) % 256
        path.write_bytes(bytes(b))


@pytest.mark.parametrize("pattern", ["k_*.py", "__pycache__/*.nbi", "__pycache__/*.nbc"])
@pytest.mark.parametrize("how", ["truncate", "empty", "scramble"])
def test_a_damaged_entry_is_discarded_and_rebuilt(pristine, tmp_path, pattern, how):
    src, cache0, (E, g) = pristine
    cache = tmp_path / "cache"
    shutil.copytree(cache0, cache)
    files = sorted(cache.glob(pattern))
    assert files, f"no {pattern} in the cache"
    for f in files:
        damage(f, how)
    r = run(tmp_path, cache, "out.h5")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("adgrad: warning:")], r.stderr
    E2, g2 = results(tmp_path / "out.h5")
    assert np.array_equal(E, E2) and np.array_equal(g, g2)
    again = run(tmp_path, cache, "again.h5")
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr


def test_other_helper_code_is_another_cache_entry(tmp_path, monkeypatch):
    """numba's cache of a kernel holds the helpers it was compiled with: a kernel of the same source
    compiled against other helper modules (another adgrad) must not be loaded from it."""
    from adgrad.engine.codegen import load

    monkeypatch.setenv("ADGRAD_CACHE_DIR", str(tmp_path))
    source = "import numpy as np\n\n\ndef point():\n    return 1\n"
    load.load(source)
    monkeypatch.setattr(load, "numeric_fingerprint", lambda: "other helpers")
    load.load(source)
    assert len(list(tmp_path.glob("k_*.py"))) == 2


SEALED_AT_SAVE = """
import glob, os, sys
from adgrad.engine import compile_model, load_model
from adgrad.engine.numeric import cache
kernel = compile_model(load_model(sys.argv[1]), [("E", "x")])
paths = glob.glob(os.path.join(os.environ["ADGRAD_CACHE_DIR"], "k_*.py")) + sorted(cache.HELPER_ENTRIES)
print(len(paths), *{cache.numba_cache_state(p) for p in paths if cache.numba_files(p)})
"""


def test_an_entry_is_sealed_as_soon_as_it_is_saved(tmp_path):
    """A process that compiled a kernel and its helpers has sealed their numba files before it exits:
    another process loading the entries meanwhile finds them verified, neither discarding them nor
    taking the first one's files for damage."""
    env = dict(os.environ, ADGRAD_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", SEALED_AT_SAVE, str(ROOT / "configs" / "eam_model.yaml")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    n, *states = r.stdout.split()
    assert int(n) > 1 and states == ["ok"], r.stdout


def test_every_sealed_version_of_a_file_verifies(tmp_path):
    """Two processes compiling one entry at once each write its files whole and seal them: a third
    finds whichever version is on disk verified; a version nobody sealed is damage."""
    from adgrad.engine.numeric import cache

    entry = tmp_path / "k_0.py"
    entry.write_text("")
    code = tmp_path / "__pycache__" / "k_0.point-1.py311.nbc"
    code.parent.mkdir()
    for version in (b"first process", b"second process"):
        code.write_bytes(version)
        cache.seal_path(str(entry))
    code.write_bytes(b"first process")
    assert cache.numba_cache_state(str(entry)) == "ok"
    code.write_bytes(b"nobody's")
    assert cache.numba_cache_state(str(entry)) == "damaged"
