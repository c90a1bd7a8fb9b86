"""Errors a user can see. The CLI turns SpecError into exit 2 and JobError into exit 1."""
from __future__ import annotations


class AdgradError(Exception):
    """Base class of every error adgrad reports to its user."""


class SpecError(AdgradError):
    """A problem in a model or config file, located at a YAML line/column and (optionally) inside
    an expression, so the message can show the expression with a caret under the bad spot."""

    def __init__(self, message, path=None, line=None, col=None, expr=None, expr_col=None, expr_len=1):
        super().__init__(message)
        self.message = message
        self.path, self.line, self.col = path, line, col
        self.expr, self.expr_col, self.expr_len = expr, expr_col, max(1, expr_len or 1)

    def at(self, path, line, col, expr=None):
        """Fill in the location if it is not known yet (errors raised deep in the compiler)."""
        if self.path is None:
            self.path, self.line, self.col = path, line, col
        if self.expr is None and expr is not None:
            self.expr = expr
        return self

    def __str__(self):
        where = ""
        if self.path is not None:       # path:line:col:, or as much of it as is known (never "None")
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
            if self.line and self.col is not None:
                where = f"{self.path}:{self.line}:{self.col}: "
        text = f"{where}{self.message}"
        if self.expr is not None:
            text += f"\n    {self.expr}"
            if self.expr_col is not None:
                text += "\n    " + " " * self.expr_col + "^" * self.expr_len
        return text


class ShapeError(SpecError):
    """Shapes that do not fit an operation; always carries both shapes in the message."""


class DataError(AdgradError):
    """A problem with an input file: missing dataset, wrong shape, unreadable file (exit 2)."""


class JobError(AdgradError):
    """The job ran and failed: derivative mismatch, non-finite values with nan: error, I/O (exit 1)."""


def os_reason(exc):
    """The one-line reason of an OSError (HDF5's messages run over several lines): its errno's text."""
    errno = getattr(exc, "errno", None)
    if errno:
        import os
        return os.strerror(errno)
    return " ".join(str(exc).split())
