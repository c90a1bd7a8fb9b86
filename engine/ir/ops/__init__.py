"""Every IR op, one entry each (engine/ir/op.py says what an entry holds), by kind:
elementwise.py, reduce.py, views.py, structural.py, tables.py, spectral.py, linalg.py. Importing this package
registers them all."""
from ..op import OPS, Op, broadcast_shapes, numpy_index
from . import elementwise, linalg, reduce, spectral, structural, tables, views  # noqa: F401  (register their ops)

__all__ = ["OPS", "Op", "broadcast_shapes", "numpy_index"]
