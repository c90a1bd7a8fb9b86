"""Checked expression trees -> typed IR, with numpy's semantics (broadcasting, axis numbering).

Every shape is static, so every mismatch is found here, before any code exists, and reported at the
expression's file, line and column with a caret under the offending sub-expression.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import SpecError
from ..parse import parse, span
from ..spec import Expr, FunctionDecl
from . import ops
from .core import Builder, Var


@dataclass(frozen=True)
class CustomRule:
    """A user function's hand-written derivative: d out / d args[k] = partial(builder, k)."""
    fn: str
    args: tuple
    partial: Callable
    free: tuple = ()            # other Vars the body reads (params): the rule says nothing about them
    mapped: bool = True         # scalar arguments mapped elementwise (else partials are Jacobian blocks)


class _Fail(Exception):
    """A problem at a node; turned into a SpecError with the expression and caret."""

    def __init__(self, node, message):
        super().__init__(message)
        self.node, self.message = node, message


def normalize_axes(node, axis, rank):
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in axes:
        if not isinstance(a, int) or not -rank <= a < rank:
            raise _Fail(node, f"axis {a} is out of range for an array of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise _Fail(node, f"repeated axis in {axis}")
    return tuple(sorted(out))


class Lowerer:
    """Lowers a model's expressions into one Builder. `env` maps names to Vars."""

    def __init__(self, builder: Builder, functions: dict, custom: dict, params_env: dict):
        self.b = builder
        self.functions = functions
        self._outer_env = params_env  # what function bodies see besides their arguments
        self.custom = custom          # Var -> CustomRule, filled as functions with rules are called
        self._stack = []

    def lower(self, expr: Expr, env: dict) -> Var:
        tree = parse(expr)
        try:
            with self.b.active():
                out = self._visit(tree.body, env)
            if not isinstance(out, Var):
                out = self._as_var(tree.body, out)
            return out
        except _Fail as f:
            col, length = span(f.node, tree.lead)
            raise expr.error(f.message, col=col, length=length) from None
        except SpecError as e:
            if e.expr is None:           # a shape rule failed on the whole expression
                col, length = span(tree.body, tree.lead)
                raise expr.error(e.message, col=col, length=length) from None
            raise

    # ---- helpers -------------------------------------------------------------------------------
    def _as_var(self, node, v):
        if isinstance(v, Var):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return self.b.const(v)
        raise _Fail(node, f"expected an array expression, got {v!r}")

    def _emit(self, node, op, *args, **attrs):
        try:
            return self.b.emit(op, *args, **attrs)
        except SpecError as e:
            raise _Fail(node, e.message) from None

    def _static(self, node, env):
        """A compile-time constant: number, string, or (nested) tuple/list of them."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self._static(node.operand, env)
            if isinstance(v, (int, float)):
                return -v
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._static(e, env) for e in node.elts)
        raise _Fail(node, "expected a constant here (a number or a list of numbers)")

    # ---- the visitor ---------------------------------------------------------------------------
    def _visit(self, node, env):
        meth = getattr(self, "_" + type(node).__name__, None)
        if meth is None:
            raise _Fail(node, f"unsupported syntax ({type(node).__name__})")
        return meth(node, env)

    def _var(self, node, env):
        return self._as_var(node, self._visit(node, env))

    def _Constant(self, node, env):
        if isinstance(node.value, str):
            raise _Fail(node, "a string is only allowed as the first argument of einsum")
        return self.b.const(node.value)

    def _Name(self, node, env):
        if node.id in env:
            return env[node.id]
        if node.id in self.functions or node.id in FUNCS:
            raise _Fail(node, f"'{node.id}' is a function; call it with arguments")
        if node.id in ("pi", "e", "inf", "nan"):
            return self.b.const(getattr(math, node.id))
        raise _Fail(node, f"unknown name '{node.id}'")

    _BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
            ast.BitAnd: "and", ast.BitOr: "or"}

    def _BinOp(self, node, env):
        a, b = self._var(node.left, env), self._var(node.right, env)
        if isinstance(node.op, ast.MatMult):
            return self._matmul(node, a, b)
        op = self._BIN[type(node.op)]
        if op in ("and", "or") and not (a.dtype == b.dtype == "bool"):
            raise _Fail(node, f"'{'&' if op == 'and' else '|'}' combines conditions (comparisons), not numbers")
        if op not in ("and", "or") and "bool" in (a.dtype, b.dtype):
            raise _Fail(node, "a condition (comparison) cannot be used as a number; use where(cond, a, b)")
        return self._emit(node, op, a, b)

    def _UnaryOp(self, node, env):
        v = self._var(node.operand, env)
        if isinstance(node.op, ast.USub):
            return self._emit(node, "neg", v)
        if isinstance(node.op, ast.UAdd):
            return v
        if v.dtype != "bool":
            raise _Fail(node, "'~' negates a condition (comparison), not a number")
        return self._emit(node, "not", v)

    _CMP = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}

    def _Compare(self, node, env):
        left = self._var(node.left, env)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self._var(right_node, env)
            c = self._emit(node, self._CMP[type(op)], left, right)
            result = c if result is None else self._emit(node, "and", result, c)
            left = right
        return result

    def _Attribute(self, node, env):
        if node.attr != "T":
            raise _Fail(node, f"unsupported attribute '.{node.attr}' (only .T)")
        v = self._var(node.value, env)
        return self._emit(node, "transpose", v, perm=tuple(reversed(range(v.rank))))

    def _Subscript(self, node, env):
        v = self._var(node.value, env)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(items) > v.rank:
            raise _Fail(node, f"too many indices ({len(items)}) for an array of shape {v.shape}")
        index = []
        for axis, it in enumerate(items):
            n = v.shape[axis]
            if isinstance(it, ast.Slice):
                parts = [None if p is None else self._static(p, env) for p in (it.lower, it.upper, it.step)]
                if not all(p is None or isinstance(p, int) for p in parts):
                    raise _Fail(it, "slice bounds must be integer constants")
                if parts[2] == 0:
                    raise _Fail(it, "slice step cannot be zero")
                index.append(slice(*parts).indices(n))
                if len(range(*index[-1])) == 0:
                    raise _Fail(it, f"empty slice of an axis of length {n}")
            else:
                k = self._static(it, env)
                if not isinstance(k, int):
                    raise _Fail(it, "indices must be integer constants")
                if not -n <= k < n:
                    raise _Fail(it, f"index {k} is out of bounds for axis {axis} with size {n}")
                index.append(k % n)
        index += [(0, n, 1) for n in v.shape[len(items):]]
        if all(isinstance(i, tuple) and i == (0, n, 1) for i, n in zip(index, v.shape)):
            return v
        return self._emit(node, "getitem", v, index=tuple(index))

    def _Call(self, node, env):
        if not isinstance(node.func, ast.Name):
            raise _Fail(node.func, "only named functions can be called")
        name = node.func.id
        if name in self.functions:
            if node.keywords:
                raise _Fail(node.keywords[0], f"function '{name}' takes positional arguments only")
            return self._user_call(node, self.functions[name], [self._var(a, env) for a in node.args])
        spec = FUNCS.get(name)
        if spec is None:
            raise _Fail(node.func, f"unknown function '{name}'")
        return spec(self, node, env)

    def _matmul(self, node, a, b):
        from .linalg import matmul
        return matmul(self, node, a, b)

    # ---- user functions ------------------------------------------------------------------------
    def _free_vars(self, out, args):
        """Leaves of out's expression other than the arguments: the params the body reads."""
        free, stack, seen = [], [out], set()
        while stack:
            v = stack.pop()
            if v in seen or any(v is a for a in args):
                continue
            seen.add(v)
            e = self.b.producer(v)
            if e is None:
                free.append(v)
            else:
                stack.extend(e.args)
        return tuple(free)

    def _user_call(self, node, fn: FunctionDecl, args):
        if len(args) != len(fn.args):
            raise _Fail(node, f"function '{fn.name}' takes {len(fn.args)} argument(s), got {len(args)}")
        if fn.name in self._stack:
            raise _Fail(node, f"function '{fn.name}' calls itself (recursion is not supported)")
        mapped = all(s is None for s in fn.arg_shapes)
        for a, s, an in zip(args, fn.arg_shapes, fn.args):
            if s is not None and a.shape != s:
                raise _Fail(node, f"function '{fn.name}': argument '{an}' must have shape {s}, got {a.shape}")
        n0 = len(self.b.graph.eqns)
        self._stack.append(fn.name)
        try:
            out = self.lower(fn.expr, {**self._outer_env, **dict(zip(fn.args, args))})
        finally:
            self._stack.pop()
        if mapped:
            for e in self.b.graph.eqns[n0:]:
                if ops.OPS[e.op].kind != "elementwise" and e.op not in ("const", "broadcast_to"):
                    raise _Fail(node, f"function '{fn.name}' has scalar arguments, so it is mapped elementwise, "
                                      f"but its body uses '{e.op}'; declare argument shapes (args: {{name: shape}})")
            want = ops.broadcast_shapes(fn.name, [a.shape for a in args])
            if out.shape != want:
                out = self._emit(node, "broadcast_to", out, shape=want)
        if fn.derivative is not None and out not in args:
            def partial(b, k, fn=fn, args=tuple(args), out_shape=out.shape):
                saved, self.b = self.b, b
                try:
                    p = self.lower(fn.derivative[k], {**self._outer_env, **dict(zip(fn.args, args))})
                finally:
                    self.b = saved
                # mapped functions: one partial per element; tensor arguments: the Jacobian block
                want = out_shape if mapped else out_shape + args[k].shape
                if mapped and ops.broadcast_shapes(fn.name, [p.shape, want]) != want or \
                        not mapped and p.shape != want:
                    raise fn.derivative[k].error(
                        f"the derivative of '{fn.name}' with respect to '{fn.args[k]}' must have shape {want}, "
                        f"got {p.shape}", col=0, length=len(fn.derivative[k].text))
                return p
            self.custom[out] = CustomRule(fn.name, tuple(args), partial, self._free_vars(out, args), mapped)
        return out


# ---- built-in functions: name -> lowering ---------------------------------------------------------
FUNCS = {}

UNARY_NAMES = ["exp", "log", "log1p", "expm1", "sqrt", "cbrt", "sin", "cos", "tan", "arcsin", "arccos",
               "arctan", "sinh", "cosh", "tanh", "abs", "sign", "square", "sigmoid", "softplus", "erf"]


def _args(lw, node, env, n, names=None):
    if node.keywords:
        raise _Fail(node.keywords[0], f"{node.func.id}() takes no keyword arguments")
    if len(node.args) != n:
        raise _Fail(node, f"{node.func.id}() takes {n} argument(s), got {len(node.args)}")
    return [lw._var(a, env) for a in node.args]


def _unary(name):
    def lower(lw, node, env):
        (x,) = _args(lw, node, env, 1)
        return lw._emit(node, name, x)
    return lower


def _binary(name):
    def lower(lw, node, env):
        a, b = _args(lw, node, env, 2)
        return lw._emit(node, name, a, b)
    return lower


for _n in UNARY_NAMES:
    FUNCS[_n] = _unary(_n)
for _n in ("minimum", "maximum", "arctan2"):
    FUNCS[_n] = _binary(_n)


def _where(lw, node, env):
    c, a, b = _args(lw, node, env, 3)
    if c.dtype != "bool":
        raise _Fail(node.args[0], "where: the first argument must be a condition (a comparison)")
    if a.dtype == "bool" or b.dtype == "bool":
        raise _Fail(node, "where: the branches must be numbers, not conditions")
    return lw._emit(node, "select", c, a, b)


FUNCS["where"] = _where


def array_and_axes(lw, node, env, default=None):
    """The array and the normalized axes of a call `f(x)` or `f(x, axis=k)` (k an int or a tuple;
    `default` when no axis is given, None meaning every axis)."""
    if len(node.args) != 1:
        raise _Fail(node, f"{node.func.id}() takes one array argument (and optionally axis=...)")
    x = lw._var(node.args[0], env)
    axis = default
    for kw in node.keywords:
        if kw.arg != "axis":
            raise _Fail(kw, f"{node.func.id}(): unknown keyword '{kw.arg}'")
        axis = lw._static(kw.value, env)
    return x, tuple(range(x.rank)) if axis is None else normalize_axes(node, axis, x.rank)


def _reduction(kind):
    def lower(lw, node, env):
        x, axes = array_and_axes(lw, node, env)
        if kind == "mean":
            n = math.prod(x.shape[a] for a in axes)
            return lw._emit(node, "div", lw._emit(node, "reduce_sum", x, axes=axes), n)
        if kind == "prod" and math.prod(x.shape[a] for a in axes) <= SMALL_PROD:
            return _unrolled_prod(lw, node, x, axes)
        return lw._emit(node, "reduce_" + kind, x, axes=axes)
    return lower


SMALL_PROD = 16     # products of at most this many factors are unrolled into multiplications


def _unrolled_prod(lw, node, x, axes):
    """prod over few elements as a chain of multiplications of views: derivatives of every order
    follow from mul's rule, and the code is as fast as the reduction loop."""
    kept = [a for a in range(x.rank) if a not in axes]
    x = lw._emit(node, "transpose", x, perm=tuple(kept) + tuple(axes))
    n = math.prod(x.shape[len(kept):])
    x = lw._emit(node, "reshape", x, shape=x.shape[:len(kept)] + (n,))
    full = tuple((0, d, 1) for d in x.shape[:-1])
    out = None
    for k in range(n):
        part = lw._emit(node, "getitem", x, index=full + (k,)) if x.shape[-1] > 1 else \
            lw._emit(node, "reshape", x, shape=x.shape[:-1])
        out = part if out is None else lw._emit(node, "mul", out, part)
    return out


for _n in ("sum", "prod", "max", "min", "mean"):
    FUNCS[_n] = _reduction(_n)


def _dot(lw, node, env):
    a, b = _args(lw, node, env, 2)
    return lw._matmul(node, a, b)


def _norm(lw, node, env):
    """The 2-norm over `axis` (default: all elements, the Frobenius norm of a matrix)."""
    x, axes = array_and_axes(lw, node, env)
    return lw._emit(node, "sqrt", lw._emit(node, "reduce_sum", lw._emit(node, "square", x), axes=axes))


FUNCS["dot"] = _dot
FUNCS["norm"] = _norm


def _constant_array(lw, node, value):
    value = np.asarray(value, dtype=float)
    return lw.b.emit("array", data=tuple(value.ravel().tolist()), shape=value.shape) if value.shape \
        else lw.b.const(float(value))


def _static_args(lw, node, env, lo, hi):
    if node.keywords:
        raise _Fail(node.keywords[0], f"{node.func.id}() takes no keyword arguments")
    if not lo <= len(node.args) <= hi:
        raise _Fail(node, f"{node.func.id}() takes {lo} to {hi} constant arguments, got {len(node.args)}")
    return [lw._static(a, env) for a in node.args]


def _shape_arg(node, s):
    s = s if isinstance(s, tuple) else (s,)
    if not all(isinstance(d, int) and d >= 1 for d in s):
        raise _Fail(node, f"{node.func.id}(): a shape is a positive integer or a list of them, got {s!r}")
    return s


def _arange(lw, node, env):
    vals = _static_args(lw, node, env, 1, 3)
    arr = np.arange(*vals, dtype=float)
    if arr.size == 0:
        raise _Fail(node, "arange(): the range is empty")
    return _constant_array(lw, node, arr)


def _linspace(lw, node, env):
    a, b, n = _static_args(lw, node, env, 3, 3)
    if not isinstance(n, int) or n < 1:
        raise _Fail(node, "linspace(): the number of points must be a positive integer")
    return _constant_array(lw, node, np.linspace(a, b, n))


def _filled(value):
    def lower(lw, node, env):
        (s,) = _static_args(lw, node, env, 1, 1)
        return lw.b.const(value, _shape_arg(node, s))
    return lower


def _eye(lw, node, env):
    (n,) = _static_args(lw, node, env, 1, 1)
    return _constant_array(lw, node, np.eye(_shape_arg(node, n)[0]))


FUNCS.update(arange=_arange, linspace=_linspace, zeros=_filled(0.0), ones=_filled(1.0), eye=_eye)


from . import linalg  # noqa: E402,F401  (registers the tensor and linear-algebra functions in FUNCS)
