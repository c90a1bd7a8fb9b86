"""The public surface: load_model, compile_model, load_library and run (the engine of `adgrad run`)."""
from __future__ import annotations

import os

from .compile import compile_model       # first: codegen/load.py gives adgrad's numba helpers adgrad's cache
from . import arguments  # noqa: I001
from .export.native import load_library
from .kernel import CompiledKernel
from .model import LoadedModel, build
from .spec import load_model_file

__all__ = ["load_model", "compile_model", "load_library", "run", "CompiledKernel"]


def load_model(path, input_shapes=None, sizes=None) -> LoadedModel:
    """Parse and check a model file. `sizes` replaces the values of the model's named sizes (name ->
    int, e.g. {"N": 120} for the neighbour count); `input_shapes` replaces declared input shapes
    (name -> shape). Each distinct shape is its own kernel in the compile cache. A size or input the
    model does not declare, or a value out of range, is a ValueError naming the argument."""
    return build(load_model_file(os.fspath(path), arguments.input_shapes(input_shapes), arguments.sizes(sizes),
                                 argument_error=ValueError))


def run(config, **options):
    """Run the job a config (engine.spec.Config) describes; see engine/job/run.py for the options
    (native=load_library(DIR): compute with that exported library, as `adgrad run --native DIR`)."""
    from .job.run import run as run_job
    return run_job(config, **options)
