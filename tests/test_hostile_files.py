"""Hostile files, locks, processes and the command line (issue 25, items 6, 7, 12 and 14), in the style
of test_hostile.py: every case checks the exit code, one message (no traceback) and that no file that
existed before changed.

- One output lock for every writer: run, sample, merge (and export, which takes the same lock) refuse
  an output another of them holds, however the path is spelled; a run whose output another program
  removes or replaces under it never reports success.
- merge never writes over the point cloud its shards were computed from (nor over a source of it).
- Internal errors become messages: a damaged commit record on --resume (and in `adgrad info`); a
  file too large for the disk while laying out an output; a full compile-cache disk (a warning, and
  the run goes on); SIGINT from adgrad's first instruction on.
- numba's cache of adgrad's own helpers lives in adgrad's cache directory, never in the source tree
  (which may be read-only), keyed by the helpers' sources; a user's own cache=True functions in the
  same process are cached where numba always puts them."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine.store.lock import lock_path, output_lock

from test_hostile import adgrad_process, assert_one_message, shards, snapshot, workspace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def assert_refused(code, err, phrase, where, expected=2):
    assert code == expected, (code, err)
    assert "Traceback" not in err and phrase in err and where in err, err
    assert_one_message(err)


def leftovers(d):
    """Hidden files a writer leaves beside its output: locks, temporary and staged files."""
    return sorted(p.name for p in Path(d).iterdir() if p.name.startswith("."))


# ---- one lock for every writer (item 6) -----------------------------------------------------------------
@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """The test_hostile workspace (model.yaml, config.yaml, in.h5) with the run's two shards."""
    t = tmp_path_factory.mktemp("writers")
    workspace(t)
    shards(t)
    return t


def writer(name, t, out):
    """The command line of writer `name` with output `out` (--overwrite: the file exists)."""
    return {
        "run": ["run", t / "config.yaml", "-o", out, "--overwrite", "-q"],
        "sample": ["sample", t / "model.yaml", "-n", "5", "-o", out, "--overwrite"],
        "merge": ["merge", out, t / "out.shard0of2.h5", t / "out.shard1of2.h5", "--overwrite"],
    }[name]


@pytest.mark.parametrize("holder", ["run", "sample", "merge", "export"])
@pytest.mark.parametrize("second", ["run", "sample", "merge"])
def test_a_writer_is_refused_while_another_holds_the_output(ws, holder, second):
    out = ws / "x.h5"
    out.write_bytes(b"the holder's output\n")
    with output_lock(out, f"adgrad {holder}"):
        code, _, err = invoke(*writer(second, ws, out))
        assert_refused(code, err, "another adgrad run is writing this output", f"{out}: ")
        assert f"(adgrad {holder}, pid {os.getpid()} on host" in err, err
    assert out.read_bytes() == b"the holder's output\n"
    assert not Path(lock_path(out)).exists()
    assert not [n for n in leftovers(ws) if "x.h5" in n]


@pytest.mark.parametrize("spelling", ["sub/../x.h5", "a symbolic link to it", "through a linked directory"])
def test_every_spelling_of_an_output_shares_its_lock(ws, spelling):
    out = ws / "x.h5"
    out.write_bytes(b"the holder's output\n")
    alias = {"sub/../x.h5": ws / "sub" / ".." / "x.h5", "a symbolic link to it": ws / "alias.h5",
             "through a linked directory": ws / "linked" / "x.h5"}[spelling]
    for link, target in ((ws / "alias.h5", out), (ws / "linked", ws)):
        if not link.is_symlink():
            link.symlink_to(target)
    with output_lock(out, "adgrad run"):
        for name in ("run", "sample", "merge"):
            code, _, err = invoke(*writer(name, ws, alias))
            assert_refused(code, err, "another adgrad run is writing this output", f"{alias}: ")
    assert out.read_bytes() == b"the holder's output\n" and (ws / "alias.h5").is_symlink()


@pytest.mark.parametrize("name", ["run", "sample", "merge"])
def test_each_writer_holds_the_lock_until_its_file_is_in_place(ws, monkeypatch, name):
    """Seen from inside: the lock is held when the file is renamed into place, and gone afterwards."""
    from adgrad.engine.store import atomic, lock
    out = ws / f"held-{name}.h5"
    seen, real_replace = [], os.replace

    def replace(src, dst):
        if os.path.abspath(dst) == str(out):
            fd = os.open(lock.lock_path(out), os.O_RDONLY)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append(os.pread(fd, 200, 0).decode())
            finally:
                os.close(fd)
        return real_replace(src, dst)
    monkeypatch.setattr(atomic.os, "replace", replace)
    code, _, err = invoke(*writer(name, ws, out))
    assert code == 0, err
    assert len(seen) == 1 and seen[0].startswith(f"adgrad {name}, pid {os.getpid()}"), seen
    assert not Path(lock_path(out)).exists()


@pytest.mark.parametrize("plant", ["a symbolic link", "a hard link to another file", "not a regular file",
                                   "a directory"])
@pytest.mark.parametrize("name", ["run", "sample", "merge"])
def test_a_lock_file_planted_by_someone_else_is_refused_not_followed(ws, plant, name):
    """The lock file lies in the output's directory, which others may write (a shared scratch space):
    something at its name that adgrad never makes is refused, and never followed or truncated."""
    out = ws / "planted.h5"
    lock = Path(lock_path(out))
    precious = ws / "precious.txt"
    precious.write_text("someone else's file\n")
    {"a symbolic link": lambda: lock.symlink_to(precious), "not a regular file": lambda: os.mkfifo(lock),
     "a hard link to another file": lambda: os.link(precious, lock), "a directory": lock.mkdir}[plant]()
    try:
        code, _, err = invoke(*writer(name, ws, out))
        assert_refused(code, err, f"the lock file {lock} is {plant}, which adgrad never makes", f"{out}: ")
        assert precious.read_text() == "someone else's file\n" and not out.exists()
    finally:
        lock.rmdir() if lock.is_dir() and not lock.is_symlink() else lock.unlink()


def test_sample_overwrite_cannot_replace_the_output_of_a_running_run(tmp_path):
    """The issue's case, in two processes: a run holds its output (frozen with SIGSTOP once its lock
    file exists); sample and merge --overwrite of that path are refused naming the run; the run then
    completes and its file is the complete output at its path."""
    workspace(tmp_path)
    shard_files = shards(tmp_path)
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f["points"] = np.random.default_rng(1).random((4000, 100))
    out = tmp_path / "out.h5"
    run = subprocess.Popen([sys.executable, "-c", "from adgrad.cli.entry import main; main()", "run",
                            str(tmp_path / "config.yaml"), "--chunk", "50", "-q"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lock = Path(lock_path(out))
        while not (lock.exists() and lock.read_text().endswith("\n")):     # taken, its holder written
            assert run.poll() is None and time.monotonic() < deadline, "the run never took its lock"
            time.sleep(0.002)
        run.send_signal(signal.SIGSTOP)
        holder = lock.read_text()
        assert holder.startswith(f"adgrad run, pid {run.pid} on host"), holder
        r = adgrad_process("sample", tmp_path / "model.yaml", "-n", 10, "-o", out, "--overwrite")
        assert_refused(r.returncode, r.stderr, f"another adgrad run is writing this output (adgrad run, pid {run.pid}",
                       f"{out}: ")
        r = adgrad_process("merge", out, *shard_files, "--overwrite")
        assert_refused(r.returncode, r.stderr, f"(adgrad run, pid {run.pid}", f"{out}: ")
    finally:
        run.send_signal(signal.SIGCONT)
        _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    with h5py.File(out, "r") as f:
        assert f.attrs["complete"] and f["E"].shape == (4000,) and not np.isnan(f["E"][()]).any()
    assert not Path(lock_path(out)).exists()


# ---- a run whose output is removed or replaced under it (item 6) ------------------------------------------
@pytest.mark.parametrize("when", ["after the first chunk", "after the last chunk"])
@pytest.mark.parametrize("how", ["unlinked", "replaced by another file"])
@pytest.mark.parametrize("mode", ["new", "--overwrite", "--resume"])
def test_a_run_whose_output_goes_away_never_reports_success(tmp_path, mode, how, when):
    """Another program (not adgrad: every adgrad writer takes the lock) removes the file a run writes,
    or renames another file over it: the run fails (exit 1 from the CLI), naming what happened, and
    the other file is left as it is."""
    from adgrad.engine.errors import JobError
    from adgrad.engine.job import run as job
    from adgrad.engine.spec import load_config_file
    from adgrad.engine.store.output import staging_path
    workspace(tmp_path)
    cfg = load_config_file(str(tmp_path / "config.yaml"))
    out = tmp_path / "out.h5"
    if mode == "--overwrite":
        job.run(cfg, chunk=4)
    elif mode == "--resume":
        with pytest.raises(job.Interrupted):
            job.run(cfg, chunk=4, progress=lambda done, total: done and os.kill(os.getpid(), signal.SIGTERM))
    target = Path(staging_path(out)) if mode == "--overwrite" else out
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["written_by"] = "another program"
    other_sha = sha(other)

    def meddle(done, total):
        if done and (done == total) == (when == "after the last chunk") and target.exists():
            if how == "unlinked":
                os.remove(target)
            else:
                shutil.copy(other, tmp_path / "other.tmp")
                os.replace(tmp_path / "other.tmp", target)
    with pytest.raises(JobError, match="was removed or replaced by another program while this run wrote it"):
        job.run(cfg, chunk=4, progress=meddle, overwrite=mode == "--overwrite", resume=mode == "--resume")
    if how == "replaced by another file":
        assert sha(target) == other_sha
    if mode == "--overwrite":
        with h5py.File(out, "r") as f:          # the previous results stay in place
            assert f.attrs["complete"] and f["E"].shape == (20,)


# ---- merge never writes over the shards' input (item 7) ---------------------------------------------------
@pytest.mark.parametrize("spelling", ["the path", "sub/../in.h5", "a symbolic link", "a hard link", "relative",
                                      "--copy"])
def test_merge_refuses_the_point_cloud_the_shards_were_computed_from(tmp_path, monkeypatch, spelling):
    workspace(tmp_path)
    paths = shards(tmp_path)
    target = {"the path": tmp_path / "in.h5", "sub/../in.h5": tmp_path / "sub" / ".." / "in.h5",
              "a symbolic link": tmp_path / "alias.h5", "a hard link": tmp_path / "alias.h5",
              "relative": Path("in.h5"), "--copy": tmp_path / "in.h5"}[spelling]
    if spelling == "a symbolic link":
        os.symlink(tmp_path / "in.h5", target)
    elif spelling == "a hard link":
        os.link(tmp_path / "in.h5", target)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = invoke("merge", target, *paths, "--overwrite", *(["--copy"] if spelling == "--copy" else []))
    assert_refused(code, err, "would replace the input file the shards were computed from", f"{target}: ")
    assert f"({tmp_path / 'in.h5'})" in err and "refused even with --overwrite" in err
    assert snapshot(tmp_path) == before and not leftovers(tmp_path)


def test_merge_refuses_a_source_of_the_merged_file_the_shards_read(tmp_path):
    """The shards' input is itself a merged file (virtual datasets over the shards of an earlier run):
    merge must not write over one of those sources either."""
    workspace(tmp_path)
    first = shards(tmp_path)
    code, _, err = invoke("merge", tmp_path / "merged.h5", *first)
    assert code == 0, err
    text = (tmp_path / "config.yaml").read_text()
    (tmp_path / "c2.yaml").write_text(text.replace("in.h5", "merged.h5").replace("{x: points}", "{x: dE_dx}"))
    second = []
    for i in range(2):
        code, _, err = invoke("run", tmp_path / "c2.yaml", "--shard", f"{i}/2", "-o", tmp_path / "o2.h5", "-q")
        assert code == 0, err
        second.append(tmp_path / f"o2.shard{i}of2.h5")
    before = snapshot(tmp_path)
    code, _, err = invoke("merge", first[0], *second, "--overwrite")
    assert_refused(code, err, "would replace a source of the virtual dataset", f"{first[0]}: ")
    assert snapshot(tmp_path) == before
    code, _, err = invoke("merge", tmp_path / "m2.h5", *second)      # anywhere else: fine
    assert code == 0, err


# ---- --resume and info of a damaged commit record (item 12) ----------------------------------------------
def _stopped(t, reduced=False):
    """out.h5: a run of t's config stopped after its first chunk of 4 (reduced: with a summed result)."""
    from adgrad.engine.job import run as job
    from adgrad.engine.spec import load_config_file
    if reduced:
        with open(t / "config.yaml", "a") as f:
            f.write("    - {of: E, wrt: x, reduce: sum}\n")
    with pytest.raises(job.Interrupted):
        job.run(load_config_file(str(t / "config.yaml")), chunk=4,
                progress=lambda done, total: done and os.kill(os.getpid(), signal.SIGTERM))


def _set(name, value):
    def edit(f):
        f[name][...] = value
    return edit


def _replace(name, data):
    def edit(f):
        if name in f:
            del f[name]
        if data is not None:
            f[name] = data
    return edit


DAMAGE = [
    ("a commit count past the end", _set("_adgrad/commit", [99, 0]), "counts 99 chunks done, but the file has 5"),
    ("a negative commit count", _set("_adgrad/commit", [-1, 0]), "a negative count"),
    ("a negative non-finite count", _set("_adgrad/slot_nan", [0, -5]), "a negative count"),
    ("a commit record of three slots", _replace("_adgrad/commit", np.array([1, 0, 0])),
     "/_adgrad/commit is int64 (3,), expected integers of shape (2,)"),
    ("a commit record of floats", _replace("_adgrad/commit", np.array([1.0, 0.0])),
     "/_adgrad/commit is float64 (2,)"),
    ("no commit record", _replace("_adgrad/commit", None), "no /_adgrad/commit"),
    ("checksums of more chunks", _replace("_adgrad/input_digests", np.zeros((6, 1), np.uint64)),
     "the file records the checksums of 6 chunks, but the run has 5"),
    ("a shorter dataset", _replace("E", np.zeros(12)), "the file's datasets"),
    ("an extra dataset", _replace("extra", np.zeros(20)), "the file's datasets"),
    ("a summed result's slots of another shape", _replace("_adgrad/slots/dE_dx_sum", np.zeros((2, 100, 1), np.int64)),
     "/_adgrad/slots/dE_dx_sum is int64 (2, 100, 1), expected integers of shape (2, 100, 73)"),
]


@pytest.mark.parametrize("case", DAMAGE, ids=[c[0] for c in DAMAGE])
def test_resume_and_info_of_a_damaged_commit_record(tmp_path, case):
    what, edit, phrase = case
    workspace(tmp_path)
    _stopped(tmp_path, reduced="summed" in what)
    out = tmp_path / "out.h5"
    with h5py.File(out, "a") as f:
        edit(f)
    before = snapshot(tmp_path)
    code, _, err = invoke("run", tmp_path / "config.yaml", "--resume")
    assert_refused(code, err, phrase, f"{out}: ")
    assert "pass --overwrite to start again" in err
    assert snapshot(tmp_path) == before and not leftovers(tmp_path)
    code, stdout, err = invoke("info", out, "--no-text")
    if "datasets" in phrase or "more chunks" in what:
        assert code == 0, err           # what info shows stays true: only a run knows its chunks and rows
    else:
        assert_refused(code, err, "the commit record of this incomplete output is damaged", f"{out}: ")
        assert "DAMAGED" in stdout


# ---- a file too large for its disk (item 12) ---------------------------------------------------------------
FSIZE = """\
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)           # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from adgrad.cli.entry import main
sys.argv[0] = "adgrad"
main()
"""


def limited(limit, *args, env=None):
    """The console entry point in a process that cannot write a file past `limit` bytes."""
    return subprocess.run([sys.executable, "-c", FSIZE.format(limit=limit), *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("writer_name", ["run", "sample", "merge --copy"])
def test_an_output_too_large_for_its_disk_is_one_line_and_nothing_left(tmp_path, writer_name):
    """Laying out a huge output fails in HDF5's metadata writes, which h5py raises as a RuntimeError
    with two lines of HDF5's text: one line instead, exit 1 (the job ran and failed), nothing left."""
    workspace(tmp_path)
    limit = 2_000_000           # room for numba's cache files (a run may compile), not for the output
    if writer_name == "run":        # 10**8 points declared, no storage: the output's layout is what fails
        with h5py.File(tmp_path / "in.h5", "w") as f:
            f.create_dataset("points", shape=(10 ** 8, 100), dtype="f8", chunks=(1000, 100))
        args = ["run", tmp_path / "config.yaml", "-q"]     # -q: no line about the compile
        out = tmp_path / "out.h5"
    elif writer_name == "sample":
        args = ["sample", tmp_path / "model.yaml", "-n", 100_000, "-o", tmp_path / "s.h5"]
        out = tmp_path / "s.h5"
    else:                           # merge compiles nothing here; its copy is 20 rows of 100 floats
        args = ["merge", tmp_path / "m.h5", *shards(tmp_path), "--copy"]
        out, limit = tmp_path / "m.h5", 8000
    before = snapshot(tmp_path)
    # a compile cache of its own: under the file-size limit, a process sealing a shared one at the same moment
    # (another test) can leave an entry this one finds damaged, a warning line (benign: it is rebuilt)
    r = limited(limit, *args, env={"ADGRAD_CACHE_DIR": str(tmp_path.parent / f"{tmp_path.name}-cache")})
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == f"error: {out}: cannot write (File too large); nothing was written", r.stderr
    assert snapshot(tmp_path) == before and not leftovers(tmp_path)


# ---- a full compile-cache disk (item 12) -------------------------------------------------------------------
API = """\
import resource, signal, sys
if {limit}:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
import numpy as np
from adgrad.engine import compile_model, load_model
k = compile_model(load_model({model!r}), [("E", "x")])
out = k.evaluate({{"x": np.random.default_rng(0).random((7, 100))}})
print(out["E"].tobytes().hex(), out["dE_dx"].tobytes().hex())
"""


def assert_one_cache_warning(stderr, cache, reason):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"adgrad: warning: cannot write to the compile cache {cache} ({reason}); compiling "
                               f"without it"), stderr


def test_a_full_compile_cache_is_a_warning_and_the_results_are_the_same(tmp_path):
    """The cache only buys speed: with no room for a kernel's source or numba's files (the limit on file
    sizes stands in for a full disk: EFBIG instead of ENOSPC) the API and `check` warn in one line and
    compute what they compute with a cache."""
    workspace(tmp_path)
    env = {**os.environ, "ADGRAD_CACHE_DIR": str(tmp_path / "cache")}
    results = []
    for limit in (0, 3000):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        r = subprocess.run([sys.executable, "-c", API.format(limit=limit, model=str(tmp_path / "model.yaml"))],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        if limit:
            assert_one_cache_warning(r.stderr, tmp_path / "cache", "File too large")
        else:
            assert r.stderr == ""
        results.append(r.stdout)
    assert results[0] == results[1]
    shutil.rmtree(tmp_path / "cache")
    r = limited(3000, "check", tmp_path / "config.yaml", "--points", 4, "-q",     # -q: no compile lines
                env={"ADGRAD_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and "comparisons agree" in r.stdout, r.stdout + r.stderr
    assert_one_cache_warning(r.stderr, tmp_path / "cache", "File too large")


@pytest.fixture
def full_disk(tmpfs):
    """A tmpfs of 64 KiB with two inodes, one left free (tests/conftest.py), or the test is skipped (the
    test above covers the same code with a file size limit)."""
    return tmpfs("full", "size=64k,nr_inodes=3")


@pytest.mark.parametrize("room", ["no room for the directory", "no room for the files"])
def test_a_run_with_its_compile_cache_on_a_full_disk(tmp_path, full_disk, room):
    """ENOSPC itself: a run warns once and writes its output in full, as a run with a cache does; a full
    disk is no reason for exit 2 (which stays for a cache path that is a file, or not writable)."""
    workspace(tmp_path)
    cache = full_disk / "c"
    (full_disk / "a").write_text("an inode\n")
    if room == "no room for the files":
        cache.mkdir()
    else:
        (full_disk / "b").write_text("the last inode\n")
    r = adgrad_process("run", tmp_path / "config.yaml", "-q", env={"ADGRAD_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    assert_one_cache_warning(r.stderr, cache, "No space left on device")
    r = adgrad_process("run", tmp_path / "config.yaml", "-q", "-o", tmp_path / "ref.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "ref.h5", "r") as a, h5py.File(tmp_path / "out.h5", "r") as b:
        assert np.array_equal(a["E"][()], b["E"][()]) and np.array_equal(a["dE_dx"][()], b["dE_dx"][()])


# ---- SIGINT from the first instruction on (item 12) ---------------------------------------------------------
HOOK = """\
import sys, _signal
class Hook:                         # the signal arrives while `{module}` is being imported
    def find_spec(self, name, path=None, target=None):
        if name == {module!r} and not getattr(self, "done", False):
            self.done = True
            print("hooked", file=sys.stderr)
            _signal.raise_signal(_signal.{signal})
sys.meta_path.insert(0, Hook())
sys.argv[0] = "adgrad"
from adgrad.cli.entry import main
main()
"""


@pytest.mark.parametrize("module,args,message", [
    ("signal", ["--version"], "stopped by SIGINT while starting; nothing was written"),     # entry's first import
    ("click", ["--version"], "stopped by SIGINT while starting; nothing was written"),      # main's imports
    ("numba", ["check", "{t}/model.yaml", "-q"], "stopped by SIGINT before any output was written"),   # a command's
])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_at_any_import_of_a_command_is_one_line(tmp_path, module, args, message, signame):
    workspace(tmp_path)
    script = HOOK.format(module=module, signal=signame)
    r = subprocess.run([sys.executable, "-c", script, *[a.format(t=tmp_path) for a in args]], capture_output=True,
                       text=True, timeout=300)
    assert r.stderr.splitlines()[0] == "hooked", r.stderr
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.splitlines()[1:] == [f"error: {message.replace('SIGINT', signame)}"], r.stderr


def test_sigint_at_any_moment_never_shows_adgrads_code(tmp_path):
    """Ctrl-C at moments from 0 to 0.4 s into `adgrad run`: once adgrad's entry point has run, one line
    and exit 1 (0 if the run finished). Before it (the interpreter's own start-up and site, measured at
    ~20-60 ms here) Python's default applies, whose traceback never passes through adgrad's code."""
    workspace(tmp_path)
    script = ROOT / ".venv" / "bin" / "adgrad"
    command = [str(script)] if script.exists() else [sys.executable, "-c", "from adgrad.cli.entry import main; main()"]
    seen = set()
    for delay in np.arange(0.0, 0.4, 0.01):
        p = subprocess.Popen([*command, "run", str(tmp_path / "config.yaml"), "-o", str(tmp_path / "o.h5"),
                              "--overwrite", "-q"], stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=300)
        assert "/cli/" not in err and "/engine/" not in err, (delay, err)       # no frame of adgrad's
        if "Traceback" not in err and p.returncode in (0, 1):
            assert len(err.strip().splitlines()) <= 1, (delay, err)
            seen.add("one line" if p.returncode else "finished")
        else:
            seen.add("python")
    assert "one line" in seen, seen


# ---- numba's cache of adgrad's helpers (item 14) ----------------------------------------------------------
USE_HELPERS = """\
import os, sys
import numpy as np
from numba import njit
sys.path.insert(0, {user!r})
from adgrad.engine import compile_model, load_model
import adgrad.engine
from adgrad.engine.numeric.exactsum import ExactSum
from adgrad.engine.numeric.checksum import digest
import umod                         # the user's own module, with a cache=True function
k = compile_model(load_model({model!r}), [("E", "x")])
x = np.random.default_rng(0).random((7, 100))
out = k.evaluate({{"x": x}})
s = ExactSum((100,))
s.add(out["dE_dx"])
print("FROM", adgrad.engine.__file__)
print("VALUES", repr(float(out["E"].sum())), repr(float(s.value().sum())), int(digest(x, 0)), umod.f(1.0))
"""


def nb_files(d):
    return sorted(str(p.relative_to(d)) for p in Path(d).rglob("*") if p.suffix in (".nbi", ".nbc"))


@pytest.fixture
def copied_tree(tmp_path):
    """adgrad's packages copied to site/adgrad (as an installed wheel lays them out), a user module
    with a cache=True function in user/, and the EAM model."""
    site = tmp_path / "site" / "adgrad"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "engine", site / "engine", ignore=ignore)
    shutil.copytree(ROOT / "cli", site / "cli", ignore=ignore)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "umod.py").write_text("from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n"
                                               "    return x + 1.0\n")
    shutil.copy(ROOT / "configs" / "eam_model.yaml", tmp_path / "model.yaml")
    return tmp_path


def use_helpers(tmp, cache, env=None):
    script = USE_HELPERS.format(user=str(tmp / "user"), model=str(tmp / "model.yaml"))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp,
                       env={**os.environ, "PYTHONPATH": str(tmp / "site"), "ADGRAD_CACHE_DIR": str(cache),
                            "PYTHONDONTWRITEBYTECODE": "1", "NUMBA_DEBUG_CACHE": "1", **(env or {})})
    assert r.returncode == 0, r.stderr[-3000:]
    return _values(r.stdout, tmp / "site"), r.stdout


def _values(stdout, site):
    lines = dict(ln.split(" ", 1) for ln in stdout.splitlines() if ln.startswith(("FROM ", "VALUES ")))
    assert lines["FROM"] == str(site / "adgrad" / "engine" / "__init__.py"), lines     # the copy, not the checkout
    return lines["VALUES"]


def test_helpers_are_cached_in_adgrads_cache_not_beside_their_sources(copied_tree):
    t, cache = copied_tree, copied_tree / "cache"
    values, log = use_helpers(t, cache)
    assert nb_files(t / "site") == []
    helpers = {p.name.rsplit("-", 1)[0] for p in (cache / "helpers").iterdir() if nb_files(p)}
    assert {"adgrad.engine.numeric.exactsum", "adgrad.engine.numeric.checksum",
            "adgrad.engine.numeric.scalar"} <= helpers, helpers
    assert [n for n in nb_files(t / "user") if n.startswith("__pycache__/umod.f-")]    # numba's usual place
    assert not [n for n in nb_files(cache) if "umod" in n]
    again, log = use_helpers(t, cache)          # the second process loads every helper from the cache
    assert again == values and "data saved" not in log and "data loaded" in log, log


def test_the_users_numba_cache_dir_moves_only_the_users_functions(copied_tree):
    t, cache = copied_tree, copied_tree / "cache"
    use_helpers(t, cache, env={"NUMBA_CACHE_DIR": str(t / "numba")})
    assert nb_files(t / "numba") and all("umod" in n for n in nb_files(t / "numba")), nb_files(t / "numba")
    assert nb_files(cache / "helpers") and nb_files(t / "site") == []


def test_another_version_of_a_helper_is_another_cache_entry(copied_tree):
    """A numeric module changed (another adgrad version in the same cache directory): every helper's
    entry is another one (a helper inlines the helpers it calls), so none is loaded stale."""
    t, cache = copied_tree, copied_tree / "cache"
    values, _ = use_helpers(t, cache)
    entries = {p.name for p in (cache / "helpers").iterdir() if nb_files(p)}
    with open(t / "site" / "adgrad" / "engine" / "numeric" / "checksum.py", "a") as f:
        f.write("\n# another version\n")
    again, log = use_helpers(t, cache)
    assert again == values
    new = {p.name for p in (cache / "helpers").iterdir() if nb_files(p)} - entries
    assert sorted(n.rsplit("-", 1)[0] for n in new) == sorted(n.rsplit("-", 1)[0] for n in entries), (entries, new)
    assert "data loaded from" not in "".join(ln for ln in log.splitlines() if "helpers" in ln), log


@pytest.fixture
def read_only(copied_tree):
    """The copied package and a home directory inside it, read-only (a system site-packages in a
    container): numba's own locators find nowhere to write there and failed on import."""
    t = copied_tree
    (t / "site" / "home").mkdir()
    ro = t / "ro"
    ro.mkdir()
    if os.geteuid() == 0:               # modes do not stop root: a read-only bind mount does
        r = subprocess.run(["mount", "--bind", str(t / "site"), str(ro)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot bind-mount here ({r.stderr.strip()})")
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        site = ro
    else:
        site = t / "site"
        for p in [site, *site.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    try:
        with pytest.raises(OSError):
            (site / "probe").write_text("")
        home = str(site / "home")
        yield site, {**os.environ, "PYTHONPATH": str(site), "ADGRAD_CACHE_DIR": str(t / "cache"), "HOME": home,
                     "XDG_CACHE_HOME": home, "PYTHONDONTWRITEBYTECODE": "1"}
    finally:
        if site == ro:
            subprocess.run(["umount", str(ro)], capture_output=True)
        else:
            for p in [site, *site.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)


@pytest.mark.parametrize("args", [["run", "{t}/config.yaml", "-q"], ["check", "{t}/config.yaml", "--points", "4"],
                                  ["merge", "{t}/m.h5", "{t}/out.shard0of2.h5", "{t}/out.shard1of2.h5"]])
def test_a_read_only_source_tree_and_home_work_from_the_command_line(copied_tree, read_only, args):
    t, (site, env) = copied_tree, read_only
    workspace(t)
    with open(t / "config.yaml", "a") as f:
        f.write("    - {of: E, wrt: x, reduce: sum}\n")     # ExactSum's helpers too
    shards(t)
    main = f"import sys; sys.path.insert(0, {str(site)!r}); from adgrad.cli.entry import main; main()"
    r = subprocess.run([sys.executable, "-c", main, *[a.format(t=t) for a in args]], capture_output=True, text=True,
                       timeout=600, cwd=t, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "warning" not in r.stderr, r.stderr[-3000:]
    assert nb_files(t / "cache" / "helpers")


def test_a_read_only_source_tree_and_home_work_from_the_api(copied_tree, read_only):
    """The API (engine/api.py imports engine/compile.py, and so codegen/load.py's hook, before any module
    with numba helpers) with the package and home read-only: every helper is cached in ADGRAD_CACHE_DIR."""
    t, (site, env) = copied_tree, read_only
    r = subprocess.run([sys.executable, "-c", USE_HELPERS.format(user=str(t / "user"), model=str(t / "model.yaml"))],
                       capture_output=True, text=True, timeout=600, cwd=t, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert _values(r.stdout, site) and nb_files(t / "cache" / "helpers")


def test_a_damaged_helper_entry_is_discarded_and_rebuilt(copied_tree):
    """The helpers' entries heal as the kernels' do (test_cache.py): a scrambled numba file is
    discarded with one warning line, the results stay the same, and the next process is quiet."""
    t, cache = copied_tree, copied_tree / "cache"
    values, _ = use_helpers(t, cache)
    damaged = sorted((cache / "helpers").glob("adgrad.engine.numeric.exactsum-*/__pycache__/*.nbc"))
    assert damaged
    for p in damaged:
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    script = USE_HELPERS.format(user=str(t / "user"), model=str(t / "model.yaml"))
    env = {**os.environ, "PYTHONPATH": str(t / "site"), "ADGRAD_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=t, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _values(r.stdout, t / "site") == values
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("adgrad: warning:")] == [
        f"adgrad: warning: a compiled helper in {damaged[0].parent} was damaged; discarded, recompiling"], r.stderr
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=t, env=env)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_a_helper_entry_moves_with_its_source_text_only():
    """The entry of a helper module is named by its module and a hash of its text and of the numeric
    modules: the same text at another path is the same entry, other text another one."""
    import tempfile

    from adgrad.engine.numeric import cache
    with tempfile.TemporaryDirectory() as d:
        a, b, c = (Path(d) / n for n in ("a", "b", "c"))
        for p, text in ((a, "x = 1\n"), (b, "x = 1\n"), (c, "x = 2\n")):
            p.mkdir()
            (p / "mod.py").write_text(text)
        ea, eb, ec = (cache.helper_entry("adgrad.mod", str(p / "mod.py")) for p in (a, b, c))
    assert ea == eb != ec
    assert os.path.dirname(ea).startswith(os.path.join(cache.cache_root(), "helpers", "adgrad.mod-"))
    assert ea.endswith(os.sep + "mod.py")
