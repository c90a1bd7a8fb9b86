"""Make the EAM example point cloud, ``data/eam_points.h5``.

Writes one float64 dataset ``points`` of shape (2000, 100): 2000 points, each an
x in R^100 with entries uniform in [0, 1) (numpy default_rng, seed 20261122).
The dataset is chunked along the point axis and not compressed (about 1.6 MB).
The file is written next to this script, replacing any existing one.

Re-run from the repository root with:

    python data/make_eam_points.py
"""
from pathlib import Path

import h5py
import numpy as np

SEED = 20261122
M, N = 2000, 100
CHUNK_ROWS = 500

path = Path(__file__).resolve().parent / "eam_points.h5"
points = np.random.default_rng(SEED).random((M, N))
with h5py.File(path, "w") as f:
    f.create_dataset("points", data=points, chunks=(CHUNK_ROWS, N))
print(f"wrote {path}: points {points.shape} float64")
