"""Limits that a model or config file cannot exceed, so that a small file cannot exhaust the machine.
Each is named in the error that reports it (docs/model-language.md lists them)."""

MAX_ELEMENTS = 1 << 24          # elements of any one value per point: input, param, constant, intermediate (128 MiB)
MAX_EQUATIONS = 1_000_000       # IR equations of a model with its derivatives (compile time and memory)
MAX_CHUNK = 1 << 30             # points per chunk: more could not be buffered on any machine
MAX_YAML_VALUES = 1 << 20       # values a model or config file may expand to (YAML aliases included)
MAX_YAML_DEPTH = 100            # nesting of YAML collections
MAX_NEWTON = 100                # iterations of a solve: each is unrolled into the kernel
MAX_LINE = 1 << 20              # characters of a line of a potential file (a sparse file is one endless line)

# The memory of a run's buffers (3 chunks in flight, engine/job/pipeline.py) is bounded in bytes:
# engine.memory, by default 2 GiB, which leaves room on a 2-core 24 GiB node for a few runs at once
# and for the page cache; without engine.chunk, a chunk is as many points as fit, at most DEFAULT_CHUNK
# (the fixed default chunk before the budget, so the shipped examples run as they did).
DEFAULT_MEMORY = 2 << 30
DEFAULT_CHUNK = 65536
MIN_MEMORY = 1 << 20
