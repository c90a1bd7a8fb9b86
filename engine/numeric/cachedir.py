"""Where the compile cache is, without importing numba (a run with an exported library needs it too)."""
import os


def cache_root():
    """$ADGRAD_CACHE_DIR, else $XDG_CACHE_HOME/adgrad or ~/.cache/adgrad (not made)."""
    return os.environ.get("ADGRAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "adgrad")
