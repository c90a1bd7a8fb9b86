"""adgrad's engine: model specs -> typed IR -> derivative IR -> numba kernels -> HDF5."""
from .api import CompiledKernel, compile_model, load_model
from .errors import AdgradError, DataError, JobError, ShapeError, SpecError

__all__ = ["load_model", "compile_model", "CompiledKernel", "AdgradError", "SpecError", "ShapeError",
           "DataError", "JobError"]
