"""The functions of the model language, as compositions of IR ops.

The contract (engine/ir/builtins/call.py): a builtin is `fn(call) -> Var`, registered by name in
`FUNCTIONS` with `@builtin(name)`; it reads its arguments through the `Call`, builds its result
with `call.emit(op, ...)` and reports problems with `raise call.fail(message, at=node)`. The
expression lowerer (engine/ir/lower.py) imports this package; nothing here imports the lowerer.

Families: elementwise.py (every op entry with a `function` name, and where), reductions.py,
linalg.py (matmul dot einsum outer trace transpose det inv), constructors.py (arange linspace
zeros ones eye reshape stack concatenate).
"""
from . import constructors, elementwise, linalg, reductions, spectral  # noqa: F401  (register their functions)
from .call import FUNCTIONS, Call, Fail, builtin
from .linalg import matmul

__all__ = ["FUNCTIONS", "Call", "Fail", "builtin", "matmul"]
