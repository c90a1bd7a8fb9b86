"""The typed IR: core types, the op registry (ops/), the language builtins, lowering, interpreter, printer."""
from . import ops  # noqa: F401  (registers every op before any IR is built)
