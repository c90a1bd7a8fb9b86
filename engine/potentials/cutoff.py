"""The cutoff of a site-energy model: the largest cutoff of its potential files, checked to be a
finite positive distance (A). One function for every consumer of a model's cutoff: adgrad export
--kim (engine/export/kim.py) and the ASE calculator.

A reader refuses what a file cannot hold (an EAM cutoff <= 0, a NaN); Stillinger-Weber's a = 0 or
Tersoff's R = D = 0 still make a cutoff of 0, and a table built in code may hold anything, so the
cutoff is checked where it is used.
"""
from __future__ import annotations

import numpy as np

from .base import Potential

# a potential format -> its constant that is the cutoff (the largest, for per-triplet cutoffs)
CUTOFFS = {"eam": "cutoff", "eam/alloy": "cutoff", "eam/fs": "cutoff", "sw": "cut", "tersoff": "cut"}


class CutoffError(ValueError):
    """A potential's cutoff that is not a finite positive distance."""


def model_cutoff(model):
    """((the model's cutoff, where it comes from) or None, whether every table-like param has one): the
    largest cutoff of the model's potential files (EAM's `cutoff`, the largest `cut` of SW and Tersoff). A
    `table:` param has none (its grid's end is no cutoff), nor a potential format not in CUTOFFS.
    CutoffError (a ValueError naming the model file, the param and the value) if one is not finite or
    not positive."""
    found, complete = [], True
    for name, val in model.tables.items():
        key = CUTOFFS.get(val.format) if isinstance(val, Potential) else None
        if key is None or key not in val.constants:
            complete = False
            continue
        values = np.asarray(val.constants[key], dtype=float)
        value = float(np.max(values)) if values.size else float("nan")
        if not (np.isfinite(values).all() and value > 0):
            bad = next((float(v) for v in values.ravel() if not np.isfinite(v)), value)
            raise CutoffError(f"{model.spec.path}: params.{name}: the potential's {key} is {bad:g}, not a finite "
                              f"positive distance (A)")
        found.append((value, f"params.{name}: {key}"))
    return (max(found) if found else None), complete
