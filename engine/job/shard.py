"""Shards: shard I of N computes input rows [I*M//N, (I+1)*M//N) into its own file.

I and N come from `--shard I/N`, or inside a SLURM job array from SLURM_ARRAY_TASK_ID (minus
SLURM_ARRAY_TASK_MIN) and SLURM_ARRAY_TASK_COUNT. Shard I of N of the output `out.h5` is written
to `out.shard<I>of<N>.h5`, so every task of an array can run the same command line."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import DataError


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @property
    def label(self):
        return f"{self.index}/{self.count}"

    def rows(self, points):
        """The global input rows [start, stop) of this shard."""
        return self.index * points // self.count, (self.index + 1) * points // self.count

    def path(self, output):
        """`out.h5` -> `out.shard<I>of<N>.h5`."""
        stem, ext = os.path.splitext(output)
        return f"{stem}.shard{self.index}of{self.count}{ext}"


def parse(text: str) -> Shard:
    """`I/N` with 0 <= I < N."""
    try:
        index, count = (int(p) for p in text.split("/"))
    except ValueError:
        raise DataError(f"--shard {text!r}: expected I/N, e.g. --shard 0/4 for the first of 4 shards") from None
    if not 0 <= index < count:
        raise DataError(f"--shard {text}: need 0 <= I < N")
    return Shard(index, count)


def from_slurm(environ=os.environ) -> Shard | None:
    """The shard of this task of a SLURM job array, or None outside one."""
    task, count = environ.get("SLURM_ARRAY_TASK_ID"), environ.get("SLURM_ARRAY_TASK_COUNT")
    if task is None or count is None:
        return None
    names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
             "SLURM_ARRAY_TASK_STEP")
    v = {}
    for name in names:
        text = environ.get(name)
        if text is None:
            continue
        try:
            v[name] = int(text)
        except ValueError:
            raise DataError(f"{name}={text!r} is not an integer: this is not a SLURM array task "
                            f"(unset it, or pass --shard I/N)") from None
    lo = v.get("SLURM_ARRAY_TASK_MIN", 0)
    if v.get("SLURM_ARRAY_TASK_STEP", 1) != 1 or \
            "SLURM_ARRAY_TASK_MAX" in v and v["SLURM_ARRAY_TASK_MAX"] - lo + 1 != v["SLURM_ARRAY_TASK_COUNT"]:
        raise DataError(f"the SLURM array is not a contiguous range (min {lo}, max {v.get('SLURM_ARRAY_TASK_MAX')}, "
                        f"step {v.get('SLURM_ARRAY_TASK_STEP', 1)}, {v['SLURM_ARRAY_TASK_COUNT']} tasks): use "
                        f"--array=0-{v['SLURM_ARRAY_TASK_COUNT'] - 1} without a step or a list, or pass --shard I/N")
    task, count = v["SLURM_ARRAY_TASK_ID"], v["SLURM_ARRAY_TASK_COUNT"]
    if count < 1:
        raise DataError(f"SLURM_ARRAY_TASK_COUNT={count}: a job array has at least one task (unset it, or pass "
                        f"--shard I/N)")
    index = task - lo
    if not 0 <= index < count:
        raise DataError(f"SLURM array task {task} (min {lo}, count {count}) is not shard 0..{count - 1}: use a "
                        f"contiguous --array range without a step, or pass --shard I/N")
    return Shard(index, count)
