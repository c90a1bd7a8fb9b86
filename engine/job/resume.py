"""What `adgrad run --resume` checks before it finishes a file: that the file is this run's (the same
model, params, config, kernel, input file, shard and chunk size, from its root attributes), and that
the input rows of its finished chunks are still the rows they were computed from (their checksums,
recorded per chunk while the run read them, against the input file now).

The second check reads the finished part of the input again: it costs a read of that part (at the
disk's speed; the checksum itself runs at memory speed), and `--trust-input` skips it."""
from __future__ import annotations

import numpy as np

from ..errors import DataError
from ..store.slot import Slot
from .pipeline import input_digests
from .signals import Interrupted

# root attributes that must match for --resume, and what a mismatch means
RESUME_KEYS = {
    "model_sha256": "the model text",
    "params_sha256": "the param values (a params file or an override)",
    "config_sha256": "the config text",
    "kernel_sha256": "the generated kernel (another adgrad version?)",
    "input_path": "the input path",
    "input_size": "the input file's size",
    "input_mtime_ns": "the input file's modification time",
    "input_fingerprint": "the input file's contents",
    "input_points": "the number of input points",
    "shard": "the shard (--shard or the SLURM array task)",
    "chunk": "the points per chunk (--chunk)",
}


def check_resumable(out, attrs, chunk):
    """The chunk size to resume with, once the file is known to be this run's, unfinished."""
    have = out.attrs
    if have.get("complete", False):
        raise DataError(f"{out.path}: the file is complete already; nothing to resume "
                        f"(pass --overwrite to compute it again)")
    want = {**attrs, "chunk": chunk or int(have.get("chunk", 0))}
    for key, what in RESUME_KEYS.items():
        if key not in want and key not in have:
            continue
        if key not in want or key not in have or _differs(want[key], have[key]):
            raise DataError(f"{out.path}: cannot resume: {what} changed since the file was started "
                            f"({key}: {have.get(key, 'none')!r} in the file, now {want.get(key, 'none')!r}); "
                            f"pass --overwrite to start again")
    return want["chunk"]


def _differs(a, b):
    return str(a) != str(b.decode() if isinstance(b, bytes) else b)


def verify_input(out, reader, plan, names, should_stop, native=False):
    """Read the input rows of the finished chunks again and compare their checksums with those the
    file recorded; a chunk whose rows changed refuses the resume, naming its rows. `native`: the
    checksums by numpy (a run of a library, with no numba; the same values)."""
    if not out.done:
        return
    if out.digests is None:
        raise DataError(f"{out.path}: cannot verify the input rows of the finished chunks (the file records no "
                        f"checksums: an older adgrad wrote it); pass --trust-input to resume without the check, "
                        f"or --overwrite to start again")
    recorded = [str(n) for n in out.digests.attrs.get("inputs", [])]
    if recorded != list(names):
        raise DataError(f"{out.path}: cannot resume: the file's checksums are of the inputs {recorded}, the "
                        f"model's inputs are {list(names)}; pass --overwrite to start again")
    stored = out.digests[:out.done]
    slot = Slot({n: reader.datasets[n].shape[1:] for n in names}, {}, plan.chunk)
    try:
        for k in range(out.done):
            if should_stop():
                raise Interrupted(f"stopped by {should_stop.signal} while verifying the input of {out.path}; "
                                  f"nothing was written")
            a, b = plan.bounds(k)
            reader.fill(slot, plan.row_start + a, plan.row_start + b)
            got = np.zeros(len(names), dtype=np.uint64)

            def add(lo, hi, rows):
                got[:] += input_digests(rows, names, lo, native)
            slot.each_input(add)
            changed = [reader.datasets[n].name.lstrip("/") for n, g, s in zip(names, got, stored[k]) if g != s]
            if changed:
                raise DataError(f"{out.path}: cannot resume: rows {plan.row_start + a}..{plan.row_start + b - 1} "
                                f"of {reader.path} (dataset {', '.join(changed)}) are not the rows the finished "
                                f"chunks were computed from; the input changed since the file was started; pass "
                                f"--overwrite to start again")
    finally:
        slot.blocks = []            # unmap the rows
