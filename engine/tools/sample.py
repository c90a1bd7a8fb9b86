"""Synthetic point clouds (`adgrad sample`): uniform values for every input a model or config reads
(about a center: 0, a number, or the identity matrix for deformation gradients).

Rows are drawn in fixed blocks of BLOCK rows; block b uses its own generator,
default_rng(SeedSequence(seed, spawn_key=(b,))) (the b-th child of SeedSequence(seed).spawn), and draws
the datasets in file order. So the values depend only on the seed, never on the write chunk or on M (a
smaller sample is a prefix of a larger one), and any row range can be produced alone: memory is bounded
by the chunk, not by the number of points."""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import DataError, SpecError
from ..store import guard
from ..store.atomic import atomic_h5
from ..store.lock import output_lock
from ..model import build
from ..spec import Config, Model
from ..version import __version__

BLOCK = 4096                    # rows per generator block: part of the definition of the values
DEFAULT_RANGE = (0.0, 1.0)


@dataclass(frozen=True)
class Column:
    """One dataset to write: its name in the file, the per-point shape, the uniform range and the
    center the draws are added to (a number or "identity")."""
    dataset: str
    shape: tuple
    low: float
    high: float
    center: object = 0.0

    def offset(self):
        if self.center == "identity":
            n = self.shape[-1]
            return np.broadcast_to(np.eye(n), self.shape)
        return self.center

    @property
    def described(self):
        """The range as the file's `sample` attribute gives it: [low, high] or [low, high, center]."""
        return [self.low, self.high] + ([] if self.center == 0.0 else [self.center])


def columns(model: Model, config: Config | None = None, low=None, high=None) -> list:
    """The datasets a run of `config` (or of `model` alone) reads, with their ranges.

    An input's range is its `sample:` block, else [0, 1); `low`/`high` override either end for every
    dataset. With a config, names follow `input.datasets`, and the directions and cotangents of
    jvp/vjp requests are included (shaped like the wrt, resp. the output)."""
    def rng_of(decl_range):
        lo, hi, center = decl_range or DEFAULT_RANGE + (0.0,)
        lo, hi = (lo if low is None else low), (hi if high is None else high)
        return float(lo), float(hi), center

    cols = {}

    def add(dataset, shape, bounds, what):
        old = cols.get(dataset)
        if old is not None and old.shape != shape:
            raise SpecError(f"dataset '{dataset}' is needed with shapes {old.shape} and {shape} ({what})",
                            config.path if config else model.path)
        if old is None:
            cols[dataset] = Column(dataset, shape, *bounds)

    datasets = config.input.datasets if config else {}
    for name, decl in model.inputs.items():
        add(datasets.get(name, name), tuple(decl.shape), rng_of(decl.sample), f"input '{name}'")
    if config is not None:
        graph = None
        for req in config.compute.derivatives:
            extra = req.direction or req.cotangent
            if not extra:
                continue
            graph = graph or build(model).graph
            if req.direction:
                w = req.wrt[0]
                shape = (graph.inputs[w] if w in graph.inputs else graph.params[w]).shape
            else:
                shape = graph.outputs[req.of].shape
            add(extra, tuple(shape), rng_of(None), f"the {'direction' if req.direction else 'cotangent'} "
                                                   f"of {req.name}")
    for c in cols.values():
        if not (c.low < c.high and math.isfinite(c.high - c.low)):
            raise SpecError(f"dataset '{c.dataset}': the sample range needs finite low < high (and high - low "
                            f"within float64's range), got [{c.low}, {c.high})", config.path if config else model.path)
    return list(cols.values())


class Sampler:
    """Rows of every column drawn from `seed`, any range at a time."""

    def __init__(self, cols, seed: int):
        self.cols, self.seed = cols, seed
        self._last = (None, None)       # a block that straddles two requests is drawn once

    def block(self, b: int) -> dict:
        """Rows [b*BLOCK, (b+1)*BLOCK) of every column, {dataset: array}; always whole, so a row's value
        does not depend on the number of points either."""
        if self._last[0] != b:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(b,)))
            self._last = (b, {c.dataset: rng.uniform(c.low, c.high, size=(BLOCK,) + c.shape) + c.offset()
                              for c in self.cols})
        return self._last[1]

    def rows(self, start: int, stop: int) -> dict:
        """Rows [start, stop) of every column: {dataset: array}."""
        out = {c.dataset: np.empty((stop - start,) + c.shape) for c in self.cols}
        for b in range(start // BLOCK, -(-stop // BLOCK)):
            lo = b * BLOCK
            a, e = max(start, lo), min(stop, lo + BLOCK)
            for name, v in self.block(b).items():
                out[name][a - start:e - start] = v[a - lo:e - lo]
        return out


def write(path, cols, points: int, seed: int = 0, chunk: int = 65536, overwrite=False,
          model: Model | None = None, config: Config | None = None) -> None:
    """Write `points` rows of every column to a new HDF5 file, `chunk` rows at a time, atomically, as the
    one writer of `path` (its output lock)."""
    # what sample reads: the config and the model with its param files (not the config's input, which
    # sample may well be asked to write)
    reads = ([] if config is None else [(config.path, "the config file"),
                                        *guard.model_files(config.model, config.params)]) \
        + ([] if model is None else guard.model_files(model))
    row_bytes = sum(8 * math.prod(c.shape) for c in cols)
    if points * row_bytes >= 1 << 63:
        raise DataError(f"-n {points}: {points} points of {row_bytes} bytes each are more than an HDF5 file can "
                        f"hold (2**63 bytes)")
    guard.check_output(path, reads)
    with output_lock(path, "adgrad sample"):
        if os.path.exists(path) and not overwrite:
            raise DataError(f"{path}: output file exists; pass --overwrite to replace it")
        _write(path, cols, points, seed, chunk, model, config)


def _write(path, cols, points, seed, chunk, model, config):
    attrs = {
        "adgrad_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "points": points, "seed": seed, "sample_block": BLOCK,
        "sample": json.dumps({c.dataset: c.described for c in cols}),
    }
    if model is not None:
        attrs["model_yaml"] = model.text
        attrs["model_sha256"] = hashlib.sha256(model.text.encode()).hexdigest()
    if config is not None:
        attrs["config_yaml"] = config.text
    sampler = Sampler(cols, seed)
    with atomic_h5(path) as f:
        f.attrs.update(attrs)
        dsets = {}
        for c in cols:
            row = max(1, int(np.prod(c.shape))) * 8
            rows = max(1, min(points or 1, chunk, (1 << 20) // row))
            dsets[c.dataset] = f.create_dataset(c.dataset, shape=(points,) + c.shape, dtype="f8",
                                                chunks=(rows,) + c.shape)
            dsets[c.dataset].attrs.update({"low": c.low, "high": c.high})
        for start in range(0, points, chunk):
            stop = min(points, start + chunk)
            for name, v in sampler.rows(start, stop).items():
                dsets[name][start:stop] = v
