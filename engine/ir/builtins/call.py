"""The contract between the expression lowerer and the language's functions.

A builtin is a function `fn(call) -> Var` registered under its name with `@builtin("name")`. It
reads its arguments through the `Call` and builds its result from core IR ops with `call.emit`;
it never sees the lowerer. Problems are raised as `call.fail(message, at=node)`, which the lowerer
reports at the file, line and column of the expression with a caret under `at` (default: the call).
"""
from __future__ import annotations

import ast

import numpy as np

from ...errors import SpecError

FUNCTIONS = {}          # name -> fn(call) -> Var


def builtin(*names):
    def register(fn):
        for name in names:
            if name in FUNCTIONS:
                raise ValueError(f"builtin '{name}' is defined twice")
            FUNCTIONS[name] = fn
        return fn
    return register


class Fail(Exception):
    """A problem at an expression node; the lowerer turns it into a SpecError with a caret."""

    def __init__(self, node, message):
        super().__init__(message)
        self.node, self.message = node, message


class Call:
    """One call `name(args..., key=value...)` being lowered.

    lower(node) lowers a sub-expression to a Var or a number; static(node) reads a compile-time
    constant (a number, a string, or a nested list of them); builder is the IR Builder."""

    def __init__(self, name, node, builder, lower, static):
        self.name, self.node, self.builder = name, node, builder
        self._lower, self._static = lower, static

    @property
    def args(self):
        return self.node.args

    @property
    def keywords(self):
        return self.node.keywords

    def fail(self, message, at=None):
        return Fail(self.node if at is None else at, message)

    # ---- arguments --------------------------------------------------------------------------
    def array(self, node):
        """A sub-expression as a Var (numbers become constants)."""
        return self._lower(node)

    def static(self, node):
        return self._static(node)

    def arrays(self, n):
        """Exactly n positional arguments and no keywords, as Vars."""
        if self.keywords:
            raise self.fail(f"{self.name}() takes no keyword arguments", self.keywords[0])
        if len(self.args) != n:
            raise self.fail(f"{self.name}() takes {n} argument(s), got {len(self.args)}")
        return [self.array(a) for a in self.args]

    def statics(self, lo, hi):
        """lo to hi constant positional arguments and no keywords."""
        if self.keywords:
            raise self.fail(f"{self.name}() takes no keyword arguments", self.keywords[0])
        if not lo <= len(self.args) <= hi:
            raise self.fail(f"{self.name}() takes {lo} to {hi} constant arguments, got {len(self.args)}")
        return [self.static(a) for a in self.args]

    def axis(self, default):
        """The constant of an `axis=` keyword (the only keyword allowed), else `default`."""
        axis = default
        for kw in self.keywords:
            if kw.arg != "axis":
                raise self.fail(f"{self.name}(): unknown keyword '{kw.arg}'", kw)
            axis = self.static(kw.value)
        return axis

    def axes(self, axis, rank):
        """`axis` (an int or a tuple of them, negative counting from the end) as sorted axes."""
        axes = axis if isinstance(axis, tuple) else (axis,)
        out = []
        for a in axes:
            if not isinstance(a, int) or not -rank <= a < rank:
                raise self.fail(f"axis {a} is out of range for an array of rank {rank}")
            out.append(a % rank)
        if len(set(out)) != len(out):
            raise self.fail(f"repeated axis in {axis}")
        return tuple(sorted(out))

    def array_and_axes(self, default=None):
        """The array and the normalized axes of `f(x)` or `f(x, axis=k)` (`default` when no axis is
        given; None means every axis)."""
        if len(self.args) != 1:
            raise self.fail(f"{self.name}() takes one array argument (and optionally axis=...)")
        x = self.array(self.args[0])
        axis = self.axis(default)
        return x, tuple(range(x.rank)) if axis is None else self.axes(axis, x.rank)

    def list_argument(self):
        """The elements of `f([a, b, ...], axis=k)` as Vars, and the axis (default 0)."""
        if len(self.args) != 1 or not isinstance(self.args[0], (ast.List, ast.Tuple)):
            raise self.fail(f"{self.name}([a, b, ...], axis=k): the arrays go in a list")
        axis = self.axis(0)
        return [self.array(e) for e in self.args[0].elts], axis

    # ---- building ----------------------------------------------------------------------------------
    def emit(self, op, *args, **attrs):
        """An equation; a shape error is reported at the call."""
        try:
            return self.builder.emit(op, *args, **attrs)
        except SpecError as e:
            raise self.fail(e.message) from None

    def const(self, value, shape=()):
        return self.builder.const(value, shape)

    def constant(self, value):
        """A constant array (or scalar) of the given values."""
        value = np.asarray(value, dtype=float)
        if not value.shape:
            return self.builder.const(float(value))
        return self.builder.emit("array", data=tuple(value.ravel().tolist()), shape=value.shape)

    def reshape(self, x, shape):
        return self.emit("reshape", x, shape=tuple(shape))
