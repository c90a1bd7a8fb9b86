"""The result of reading a potential file, and a reader of LAMMPS's text formats."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError


@dataclass(frozen=True)
class Potential:
    """What a potential param offers the model language: `tables` (name -> numeric.tables.TableData),
    called as functions (`cu.F(rho)`, `cu.rho[a, b](r)`), and `constants` (name -> float, `cu.cutoff`)."""
    format: str
    elements: tuple
    tables: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)


class TextReader:
    """Lines and whitespace-separated numbers of a potential file, with line numbers for errors.
    `numbers(n)` reads across lines as LAMMPS does; numbers left on a line carry over to the next call."""

    def __init__(self, path):
        self.path = str(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                self.lines = f.read().splitlines()
        except OSError as exc:
            raise SpecError(f"cannot read potential file: {exc.strerror}", self.path) from None
        self.at = 0                 # index of the next line
        self.pending = []           # numbers left from the last line read by numbers()

    def error(self, message, line=None):
        return SpecError(message, self.path, line if line is not None else max(self.at, 1))

    def line(self, what):
        """The tokens of the next line."""
        if self.at >= len(self.lines):
            raise self.error(f"the file ends before {what}", len(self.lines))
        self.at += 1
        self.pending = []
        return self.lines[self.at - 1].split()

    def skip(self, n):
        for _ in range(n):
            self.line("the header")

    def numbers(self, n, what):
        out = self.pending[:n]
        self.pending = self.pending[n:]
        while len(out) < n:
            if self.at >= len(self.lines):
                raise self.error(f"the file ends in {what}: {len(out)} of {n} numbers read", len(self.lines))
            self.at += 1
            tokens = self.lines[self.at - 1].split()
            try:
                vals = [float(t) for t in tokens]
            except ValueError:
                bad = next(t for t in tokens if not _is_number(t))
                raise self.error(f"{what}: '{bad}' is not a number") from None
            take = n - len(out)
            out += vals[:take]
            self.pending = vals[take:]
        return np.array(out, dtype=np.float64)

    def header(self, tokens, types, what):
        """The first len(types) tokens of a line converted by `types`, with a clear error."""
        if len(tokens) < len(types):
            raise self.error(f"{what}: expected {len(types)} values, got {len(tokens)}")
        try:
            return [t(tok) for t, tok in zip(types, tokens)]
        except ValueError:
            raise self.error(f"{what}: cannot read '{' '.join(tokens)}'") from None


def _is_number(t):
    try:
        float(t)
        return True
    except ValueError:
        return False
