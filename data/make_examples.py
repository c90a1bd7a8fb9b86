"""Make the sample data of the tensor-language examples in ``configs/``.

Writes, next to this script (replacing existing files), all float64 and uncompressed:

- ``neohookean_points.h5``: ``F`` (1000, 3, 3), F = I + 0.05 * standard normal noise.
- ``attention_points.h5``: ``X`` (200, 8, 6) uniform in [-1, 1), ``Z`` (200, 4, 6) uniform in [-1, 1).
- ``gaussian_points.h5``: ``m`` (500,) the true centres, uniform in [-2, 2); ``d`` (500, 21) the
  Gaussian exp(-1.5 (xs - m)^2) on xs = -10..10 plus 0.01 * standard normal noise.
- ``tanh_net_points.h5``: ``x`` (1000, 6) uniform in [-1, 1).
- ``tanh_net_weights.h5``: the network's params ``W1`` (16, 6), ``b1`` (16,), ``W2`` (16,),
  normal with standard deviations 1/sqrt(6), 0.1 and 1/sqrt(16).

Each file uses its own numpy default_rng seed, so the files are reproducible one by one.
Re-run from the repository root with:

    python data/make_examples.py
"""
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent


def write(name, seed_note, **datasets):
    path = HERE / name
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            value = np.ascontiguousarray(value, dtype=np.float64)
            chunks = (min(500, value.shape[0]),) + value.shape[1:] if value.ndim else None
            f.create_dataset(key, data=value, chunks=chunks)
    shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in datasets.items())
    print(f"wrote {path}: {shapes} ({seed_note})")


# Compressible neo-Hookean law: deformation gradients near the identity.
rng = np.random.default_rng(1001)
F = np.eye(3) + 0.05 * rng.standard_normal((1000, 3, 3))
write("neohookean_points.h5", "seed 1001", F=F)

# Seed 001 attention score: inputs X [in=8, batch=6] and Z [out=4, batch=6].
rng = np.random.default_rng(1002)
write("attention_points.h5", "seed 1002",
      X=rng.uniform(-1.0, 1.0, (200, 8, 6)), Z=rng.uniform(-1.0, 1.0, (200, 4, 6)))

# Seed 002 Gaussian residual: noisy samples of a Gaussian at a true centre m.
rng = np.random.default_rng(1003)
xs = np.arange(-10.0, 11.0)
m = rng.uniform(-2.0, 2.0, 500)
d = np.exp(-1.5 * (xs[None, :] - m[:, None]) ** 2) + 0.01 * rng.standard_normal((500, 21))
write("gaussian_points.h5", "seed 1003", m=m, d=d)

# Small tanh network potential: points and weights.
rng = np.random.default_rng(1004)
write("tanh_net_points.h5", "seed 1004", x=rng.uniform(-1.0, 1.0, (1000, 6)))
rng = np.random.default_rng(1005)
path = HERE / "tanh_net_weights.h5"
with h5py.File(path, "w") as f:
    f.create_dataset("W1", data=rng.normal(0.0, 1.0 / np.sqrt(6.0), (16, 6)))
    f.create_dataset("b1", data=rng.normal(0.0, 0.1, 16))
    f.create_dataset("W2", data=rng.normal(0.0, 0.25, 16))
print(f"wrote {path}: W1 (16, 6), b1 (16,), W2 (16,) (seed 1005)")
