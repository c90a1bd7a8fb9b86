"""The compile cache's directory, the verification of its numba files, and numba's cache of adgrad's own
cache=True functions (below). Every module of adgrad that defines cache=True functions imports this one
first, so its functions get adgrad's cache whichever module a process imports first."""
from __future__ import annotations

import atexit
import errno
import fcntl
import functools
import hashlib
import json
import os
import sys

from numba.core import caching
from numba.core.dispatcher import Dispatcher

from ..errors import DataError, os_reason
from .cachedir import cache_root

FULL = (errno.ENOSPC, errno.EDQUOT)


def cache_dir():
    """The compile cache (cache_root), made if missing. One that is not a writable directory is bad
    input (exit 2), named with its variable; a full disk raises its OSError (load runs without it)."""
    var = "ADGRAD_CACHE_DIR" if os.environ.get("ADGRAD_CACHE_DIR") else "the compile cache"
    d = cache_root()
    try:
        os.makedirs(d, exist_ok=True)
        if not os.access(d, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        if exc.errno in FULL:
            raise
        raise DataError(f"{var} {d}: cannot keep compiled kernels there ({os_reason(exc)}); point "
                        f"ADGRAD_CACHE_DIR at a writable directory") from None
    return d


# ---- verification of cache entries ------------------------------------------------------------------
# numba keeps each function's compiled code in __pycache__/k_<digest>.<function>-<line>.pyXY.{nbi,nbc}
# beside the source; `seal_path` records their checksums in k_<digest>.sums after a compile, and `load`
# discards files that do not match (or are not listed) before numba reads them: a truncated index
# would raise from pickle, a scrambled code file could crash the process.

def write_atomic(path, data: bytes):
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def numba_files(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    d = os.path.join(os.path.dirname(path), "__pycache__")
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    return {n: os.path.join(d, n) for n in sorted(names)
            if n.startswith(stem + ".") and n.endswith((".nbi", ".nbc"))}


def _sums_path(path):
    return os.path.splitext(path)[0] + ".sums"


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def numba_cache_state(path):
    """"ok" (every numba file matches its checksum), "damaged" (one does not, or the checksums are
    unreadable) or "unverified" (files the checksums do not list)."""
    files = numba_files(path)
    if not files:
        return "ok"
    try:
        sums = _read_sums(path)
        if sums is None:
            return "unverified"
        if any(n in sums and _sha(p) not in sums[n] for n, p in files.items()):
            return "damaged"
        return "ok" if all(n in sums for n in files) else "unverified"
    except (OSError, ValueError, AttributeError, TypeError):
        return "damaged"


def _read_sums(path):
    """file name -> the checksums sealed for it (None: never sealed). Each is a list: processes
    compiling the same entry at once each write the file whole, all of them valid, so any sealed
    version verifies (an adgrad before this wrote one string per file)."""
    try:
        with open(_sums_path(path), encoding="utf-8") as f:
            sums = json.load(f)
    except FileNotFoundError:
        return None
    return {n: [v] if isinstance(v, str) else list(v) for n, v in sums.items()}


def discard_numba_cache(path):
    for p in [*numba_files(path).values(), _sums_path(path)]:
        try:
            os.remove(p)
        except OSError:
            pass


_SEALED_VERSIONS = 8    # per file: more than the processes that compile one entry at the same moment


def seal_path(path):
    """Add the checksums of an entry's numba files as they are now to those already sealed, under a lock
    (several processes may seal one entry at once), keeping the last few of each file."""
    if not os.path.exists(path) and not os.path.isdir(os.path.join(os.path.dirname(path), "__pycache__")):
        return                  # compiled without the cache (_load_uncached), or nothing cached yet
    try:
        with open(_sums_path(path) + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                old = _read_sums(path) or {}
            except (OSError, ValueError, AttributeError, TypeError):
                old = {}        # unreadable checksums: sealed afresh from the files as they are
            sums = {n: ([h for h in old.get(n, []) if h != s] + [s])[-_SEALED_VERSIONS:]
                    for n, s in ((n, _sha(p)) for n, p in numba_files(path).items())}
            if sums or old:
                write_atomic(_sums_path(path), json.dumps(sums, sort_keys=True).encode())
    except OSError:
        pass                    # a cache we cannot write to is only slower, never wrong


def warn(message):
    print(f"adgrad: warning: {message}", file=sys.stderr)


_WARNED = set()


def cannot_write(exc):
    """One line per process: the compile cache could not be written (the run goes on without it)."""
    if "write" not in _WARNED:
        _WARNED.add("write")
        warn(f"cannot write to the compile cache {cache_root()} ({os_reason(exc)}); compiling without it "
             f"(slower to start; free space or set ADGRAD_CACHE_DIR)")


# ---- numba's cache of adgrad's functions ------------------------------------------------------------
# numba keeps the code of a cache=True function beside its source (__pycache__), or if that is not
# writable in a user-wide directory, or fails: for adgrad's own helpers (engine/numeric, the tools,
# the adapters) that meant writing into the checkout or the installed package, and a read-only
# site-packages with no writable home failed on import. And a cache file that cannot be written (a
# full disk) raised in the middle of a compile. So numba's Dispatcher.enable_caching, which
# cache=True calls when a function is decorated, gives adgrad's functions (modules adgrad.* and the
# kernels, adgrad_kernel_*) an _AdgradCache, and every other function numba's own cache as before:
# - _Locator keeps a kernel's code in __pycache__ beside its k_<digest>.py (sealed and verified
#   above), and a helper's in helpers/<module>-<tag>/__pycache__ in the compile cache, `tag` hashing
#   the helper's source file and every numeric module (a helper inlines the helpers it calls, so
#   another version of either is another directory, never a stale entry); that directory is verified
#   against its checksums before numba reads it, and sealed at exit, as a kernel's entry is;
# - a file that cannot be read is a miss, one that cannot be written a one-line warning.
# Functions decorated before this module was imported get theirs when it is (adopt).

HELPER_ENTRIES = set()     # virtual <dir>/<module file name> paths of the helper entries this process uses


def _is_adgrads(py_func):
    return (getattr(py_func, "__module__", None) or "").startswith(("adgrad.", "adgrad_kernel_"))


class _Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    def __init__(self, py_func, py_file, entry):
        self._py_file, self._entry = py_file, entry
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self):
        return os.path.join(os.path.dirname(self._entry), "__pycache__")

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _is_adgrads(py_func) or not os.path.exists(py_file):
            return None
        helper = py_func.__module__.startswith("adgrad.")
        self = cls(py_func, py_file, helper_entry(py_func.__module__, py_file) if helper else py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return self         # a full disk: loads miss, saves warn (_AdgradCache)
        if helper and self._entry not in HELPER_ENTRIES:
            HELPER_ENTRIES.add(self._entry)
            state = numba_cache_state(self._entry)
            if state == "damaged":
                warn(f"a compiled helper in {self.get_cache_path()} was damaged; discarded, recompiling")
            if state != "ok":
                discard_numba_cache(self._entry)
        return self


@functools.cache
def helper_entry(module, py_file):
    h = hashlib.sha256(numeric_fingerprint().encode())
    with open(py_file, "rb") as f:
        h.update(f.read())
    return os.path.join(cache_root(), "helpers", f"{module}-{h.hexdigest()[:16]}", os.path.basename(py_file))


@functools.cache
def numeric_fingerprint():
    """A hash of every module of engine/numeric: of the helpers any other helper or a kernel may call. numba's
    cache of a kernel or helper holds the helpers it was compiled with, so one compiled against other helper
    code (an upgraded adgrad) is a different cache entry, never a stale one."""
    h = hashlib.sha256()
    numeric = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(n for n in os.listdir(numeric) if n.endswith(".py")):
        with open(os.path.join(numeric, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_Locator]


class _AdgradCache(caching.FunctionCache):
    _impl_class = _Impl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:     # noqa: BLE001  (whatever a damaged file raises: compiled instead)
            warn(f"cannot read the compiled code in {self.cache_path} ({type(exc).__name__}: {exc}); "
                 f"recompiling")
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError as exc:
            self.disable()
            cannot_write(exc)
            return
        # sealed at once, not only at exit: until then another process finds the files unsealed and
        # discards them, and its own save could be taken for damage by a third
        entry = getattr(self._impl.locator, "_entry", None)
        if entry:
            seal_path(entry)


_numba_enable_caching = Dispatcher.enable_caching


def _enable_caching(self):
    if _is_adgrads(self.py_func):
        self._cache = _AdgradCache(self.py_func)
    else:
        _numba_enable_caching(self)


_ADOPTED = set()        # modules whose dispatchers all have an _AdgradCache


def adopt():
    """Give the cached dispatchers of adgrad's modules (fully imported) that predate _enable_caching an
    _AdgradCache."""
    for name, mod in list(sys.modules.items()):
        if name in _ADOPTED or not name.startswith(("adgrad.", "adgrad_kernel_")):
            continue
        if getattr(getattr(mod, "__spec__", None), "_initializing", False):
            continue            # still being imported: its dispatchers are not all there yet
        _ADOPTED.add(name)
        for value in list(vars(mod).values()):
            if (isinstance(value, Dispatcher) and isinstance(value._cache, caching.FunctionCache)
                    and not isinstance(value._cache, _AdgradCache) and _is_adgrads(value.py_func)):
                value._cache = _AdgradCache(value.py_func)


Dispatcher.enable_caching = _enable_caching
atexit.register(lambda: [seal_path(entry) for entry in sorted(HELPER_ENTRIES)])
adopt()
