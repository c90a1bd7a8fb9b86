"""adgrad's engine: model specs -> typed IR -> derivative IR -> numba kernels -> HDF5.

The API is imported on first use (PEP 562), so importing `adgrad.engine.version` or an error class
costs no numba import, and load_library (an exported native library, engine/export/native.py) none at all."""
from .errors import AdgradError, DataError, JobError, ShapeError, SpecError

__all__ = ["load_model", "compile_model", "load_library", "CompiledKernel", "AdgradError", "SpecError", "ShapeError",
           "DataError", "JobError"]


def __getattr__(name):
    if name == "load_library":
        from .export.native import load_library
        return load_library
    if name in ("load_model", "compile_model", "CompiledKernel"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'adgrad.engine' has no attribute {name!r}")
