"""The result of reading a potential file, and the reader every format shares: one contract for the
numbers of a LAMMPS potential file.

Numbers are written as LAMMPS's tokenizer reads them (utils::is_double: decimal digits, an optional
point and exponent; no inf, nan or digit separators) and must be finite; counts are integers as
LAMMPS writes them (utils::is_integer). Every error names the file, the line and the column of the
offending token (of the end of the file when it ends too early).
"""
from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from ..limits import MAX_ELEMENTS, MAX_LINE

_NUM = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"     # one way to match: no backtracking
NUMBER = re.compile(_NUM)
INTEGER = re.compile(r"[+-]?[0-9]+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Potential:
    """What a potential param offers the model language: `tables` (name -> numeric.tables.TableData),
    called as functions (`cu.F(rho)`, `cu.rho[a, b](r)`), and `constants` (name -> float, `cu.cutoff`)."""
    format: str
    elements: tuple
    tables: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Token:
    """A whitespace-separated word of a file, at its 1-based line and column."""
    text: str
    line: int
    col: int


class TextReader:
    """A potential file, read line by line as LAMMPS's TextFileReader reads it: `skip` takes raw lines
    (the comment lines of a header); `values` and `numbers` skip blank lines and drop what follows a
    '#'. Only the current line is held (and the tables read), so a huge file costs no memory before
    its header is checked. Every reading method raises a SpecError at the token (or the end of the
    file). Use it as a context manager (it closes the file)."""

    def __init__(self, path):
        self.path = str(path)
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):     # a FIFO would block, a device never end
                raise SpecError("a potential file must be a regular file", self.path)
            self.file = open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SpecError(f"cannot read potential file: {exc.strerror}", self.path) from None
        self.rewind()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def rewind(self):
        self.file.seek(0)
        self.number_of_line, self.text, self.eof = 0, "", False   # the current line: its number and text

    # ---- locations ----------------------------------------------------------------------------------
    def error(self, message, at=None):
        """A SpecError at a Token, at (line, col), or at the end of the file (None)."""
        if at is None:      # after the last line's last character
            at = (max(self.number_of_line, 1), len(self.text) + 1)
        elif isinstance(at, Token):
            at = (at.line, at.col)
        return SpecError(message, self.path, *at)

    def next_line(self):
        """Move to the next line; False at the end of the file (the last line stays current)."""
        if self.eof:
            return False
        text = self.file.readline(MAX_LINE + 1)
        if not text:
            self.eof = True
            return False
        self.number_of_line += 1
        self.text = text.rstrip("\r\n")
        if len(self.text) > MAX_LINE:
            raise self.error(f"line {self.number_of_line:,} is longer than the limit of {MAX_LINE:,} characters",
                             (self.number_of_line, 1))
        return True

    def words(self):
        """The Tokens of the current line, without its comment."""
        text = self.text.split("#", 1)[0]
        return [Token(m.group(), self.number_of_line, m.start() + 1) for m in _WORD.finditer(text)]

    # ---- reading ------------------------------------------------------------------------------------
    def skip(self, n, what):
        """Skip n raw lines (comments)."""
        for _ in range(n):
            if not self.next_line():
                raise self.error(f"the file ends before {what}")

    def values(self, n, what):
        """The Tokens of the next non-blank line, joined with the lines after it until there are at
        least n (LAMMPS's next_values)."""
        out = []
        while len(out) < n:
            if not self.next_line():
                raise self.error(f"the file ends in {what}: {len(out)} of {n} values read")
            out += self.words()
        return out

    def numbers(self, n, what):
        """The next n numbers (LAMMPS's next_dvector), across lines. The last line must end with the
        n-th number: LAMMPS drops what follows it on the line, so a number there is a misaligned
        table, not something to ignore."""
        out = []
        while len(out) < n:
            if not self.next_line():
                raise self.error(f"the file ends in {what}: {len(out):,} of {n:,} numbers read")
            text = self.text.split("#", 1)[0]
            parts = text.split()
            take = min(n - len(out), len(parts))
            try:    # float() reads every number LAMMPS does, and more: inf, nan (not finite), 1_0, non-ASCII digits
                values = [float(p) for p in parts[:take]]
                ok = ("_" not in text and text.isascii() or all(map(NUMBER.fullmatch, parts))) \
                    and math.isfinite(sum(values))
            except ValueError:
                ok = False
            if not ok:      # the first word that is not a finite number (or an overflowing sum: none)
                for tok in self.words()[:take]:
                    self.number(tok, what)
            out += values
            if take < len(parts):
                extra = self.words()[take]
                raise self.error(f"{what} ends after {n:,} numbers, but its last line goes on with '{extra.text}' "
                                 f"(LAMMPS would ignore it; each table starts on a new line)", extra)
        return np.array(out, dtype=np.float64)

    def finish(self, what):
        """Nothing but blank lines and comments may follow the last table."""
        while self.next_line():
            words = self.words()
            if words:
                raise self.error(f"the file goes on after {what}, its last table, with '{words[0].text}' "
                                 f"(a count in the header may be wrong)", words[0])

    # ---- checked values of one token ------------------------------------------------------------------
    def number(self, tok, what):
        """The finite float a Token holds."""
        if not NUMBER.fullmatch(tok.text):
            if not math.isfinite(_float(tok.text)):      # inf, nan, infinity; not 1_0, which is no number at all
                raise self.error(f"{what}: '{tok.text}' is not a finite number", tok)
            raise self.error(f"{what}: '{tok.text}' is not a number", tok)
        v = float(tok.text)
        if not math.isfinite(v):
            raise self.error(f"{what}: '{tok.text}' is not a finite number (it overflows)", tok)
        return v

    def integer(self, tok, what):
        """The integer a Token holds, written as one (LAMMPS refuses '1e3' and '5.0' as counts)."""
        if not INTEGER.fullmatch(tok.text):
            raise self.error(f"{what} must be an integer, got '{tok.text}'", tok)
        if len(tok.text.lstrip("+-").lstrip("0")) > 18:     # int() refuses 4,300 digits; no count needs 19
            return -10 ** 19 if tok.text.startswith("-") else 10 ** 19
        return int(tok.text)

    def count(self, tok, what, least=1, why=""):
        """A count: a positive integer, at least `least` (the nodes a table needs; `why` says why if
        that is not obvious), at most the limit of a param's elements."""
        n = self.integer(tok, what)
        if n < 1:
            raise self.error(f"{what} must be a positive integer, got '{tok.text}'", tok)
        if n < least:
            raise self.error(f"{what} is {n}, but a table needs at least {least} points{why}", tok)
        if n > MAX_ELEMENTS:
            shown = tok.text if len(tok.text) <= 20 else f"{tok.text[:12]}... ({len(tok.text):,} digits)"
            raise self.error(f"{what} is {shown}, more than the limit of {MAX_ELEMENTS:,} elements of a param", tok)
        return n

    def positive(self, tok, what):
        """A positive finite number whose reciprocal is finite too (a grid spacing, a cutoff)."""
        v = self.number(tok, what)
        if not v > 0:
            raise self.error(f"{what} must be positive, got {tok.text}", tok)
        if not math.isfinite(1.0 / v):
            raise self.error(f"{what} is too small to divide by, got {tok.text}", tok)
        return v


def one_file(files, fmt):
    """The one file of a format that takes one (a ValueError: the model's param is wrong, not a file)."""
    if len(files) != 1:
        raise ValueError(f"a {fmt} potential is one file, got {len(files)}")
    return files[0]


def _float(text):
    """float(text), or 0.0 where it is no float."""
    try:
        return float(text)
    except ValueError:
        return 0.0
