"""Checked expression trees -> typed IR, with numpy's semantics (broadcasting, axis numbering).

Every shape is static, so every mismatch is found here, before any code exists, and reported at the
expression's file, line and column with a caret under the offending sub-expression.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Callable

from ..errors import SpecError
from ..parse import TOO_DEEP, parse, span
from ..spec import Expr, FunctionDecl
from .builtins import FUNCTIONS, Call, matmul
from .builtins import Fail as _Fail
from .builtins.tables import ConstantTable, TableFunction, TableSet
from .core import Builder, Var
from .op import OPS, broadcast_shapes


@dataclass(frozen=True)
class CustomRule:
    """A user function's hand-written derivative: d out / d args[k] = partial(builder, k)."""
    fn: str
    args: tuple
    partial: Callable
    free: tuple = ()            # other Vars the body reads (params): the rule says nothing about them
    mapped: bool = True         # scalar arguments mapped elementwise (else partials are Jacobian blocks)


class Lowerer:
    """Lowers a model's expressions into one Builder. `env` maps names to Vars."""

    def __init__(self, builder: Builder, functions: dict, custom: dict, params_env: dict):
        self.b = builder
        self.functions = functions
        self._outer_env = params_env  # what function bodies see besides their arguments
        self.custom = custom          # Var -> CustomRule, filled as functions with rules are called
        self._stack = []
        self.species_checks = []      # bool Vars: a runtime species index is valid (see species_guard)

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
        except RecursionError:
            raise expr.error(TOO_DEEP, col=0, length=1) from None
        except SpecError as e:
            if e.expr is None:           # a shape rule failed on the whole expression
                col, length = span(tree.body, tree.lead)
                raise expr.error(e.message, col=col, length=length) from None
            raise

    def species_guard(self):
        """A scalar bool Var: every runtime species index of every table and potential lookup lowered so
        far is an integer in range (None if there is none). The model's results are NaN where it is
        False, whatever the expression does with the looked-up value: a comparison such as
        `r < ts.cut[s, sn, sn]` is False for the NaN an invalid index gives, which would drop the
        neighbour and give a finite, wrong energy."""
        if not self.species_checks:
            return None
        with self.b.active():
            alls = []
            for ok in dict.fromkeys(self.species_checks):     # the same index in several lookups: once
                if ok.shape:        # a count of the invalid ones: a sum vectorizes, a min does not
                    ok = self.b.emit("eq", self.b.emit("reduce_sum", self.b.emit("select", ok, 0.0, 1.0),
                                                       axes=tuple(range(ok.rank))), 0.0)
                alls.append(ok)
            guard = alls[0]
            for ok in alls[1:]:
                guard = self.b.emit("and", guard, ok)
        return guard

    def _species(self, node, items, lead, env):
        """The index Vars of a lookup `T[i, j](x)` into species axes `lead`: a constant index must be an
        integer in range (else an error here); a runtime one is checked in the kernel (species_guard)
        by comparing it with each valid value, which is exact and needs no rounding op."""
        if len(items) != len(lead):             # the lookup reports the wrong count
            return [self._var(it, env) for it in items]
        out = []
        for it, n in zip(items, lead):
            i = self._var(it, env)
            c = self.b.const_value(i)
            if c is not None:
                if not (c == int(c) and 0 <= c < n):
                    raise _Fail(it, f"species index {c:g} is out of range: this lookup has {n} species "
                                    f"(indices 0 to {n - 1})")
            else:
                ok = None
                for k in range(n):
                    eq = self.b.emit("eq", i, float(k))
                    ok = eq if ok is None else self.b.emit("or", ok, eq)
                self.species_checks.append(ok)
            out.append(i)
        return out

    # ---- helpers -------------------------------------------------------------------------------
    def _as_var(self, node, v):
        if isinstance(v, Var):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return self.b.const(v)
        if isinstance(v, TableFunction):
            raise _Fail(node, f"'{v.name}' is a table; call it with its argument, e.g. {v.name}(x)")
        if isinstance(v, TableSet):
            raise _Fail(node, f"'{v.name}' is a potential; use its tables or constants ({v.names()}), "
                              f"e.g. {v.name}.{next(iter(v.tables), 'cutoff')}(...)")
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
        if node.value is None:
            raise _Fail(node, "None is only allowed as axis=None (every axis)")
        if isinstance(node.value, str):
            raise _Fail(node, "a string is only allowed as the first argument of einsum")
        return self.b.const(node.value)

    def _Name(self, node, env):
        if node.id in env:
            return env[node.id]
        if node.id in self.functions or node.id in FUNCTIONS:
            raise _Fail(node, f"'{node.id}' is a function; call it with arguments")
        if node.id in ("pi", "e", "inf", "nan"):
            return self.b.const(getattr(math, node.id))
        raise _Fail(node, f"unknown name '{node.id}'")

    _BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
            ast.BitAnd: "and", ast.BitOr: "or"}

    def _BinOp(self, node, env):
        # a chain a + b - c * ... nests to the left: walk its spine in a loop, not by recursion, so the
        # length of a written-out sum costs no stack
        spine = [node]
        while isinstance(spine[-1].left, ast.BinOp):
            spine.append(spine[-1].left)
        acc = self._var(spine[-1].left, env)
        for n in reversed(spine):
            acc = self._binop(n, acc, self._var(n.right, env))
        return acc

    def _binop(self, node, a, b):
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
        owner = env.get(node.value.id) if isinstance(node.value, ast.Name) else None
        if isinstance(owner, TableSet):
            got = owner.attribute(node.attr)
            if got is None:
                raise _Fail(node, f"potential '{owner.name}' has no '{node.attr}' (it has {owner.names()})")
            if isinstance(got, ConstantTable):
                raise _Fail(node, f"'{got.name}' holds one value per species combination; select one with "
                                  f"{got.name}[{', '.join('ijk'[:len(got.lead)])}]")
            return got if isinstance(got, TableFunction) else self.b.const(got)
        if node.attr != "T":
            raise _Fail(node, f"unsupported attribute '.{node.attr}' (only .T)")
        v = self._var(node.value, env)
        return self._emit(node, "transpose", v, perm=tuple(reversed(range(v.rank))))

    def _Subscript(self, node, env):
        owner = node.value.value if isinstance(node.value, ast.Attribute) else None
        if isinstance(owner, ast.Name) and isinstance(env.get(owner.id), TableSet):
            got = env[owner.id].attribute(node.value.attr)
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if isinstance(got, float):     # one species: the same model reads it with or without indices
                self._species(node, items, (1,) * len(items), env)
                return self.b.const(got)
            if isinstance(got, ConstantTable):
                return got.select(self._call(node, env, got.name), self._species(node, items, got.lead, env), node)
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
        table, indices = self._table(node.func, env)
        if table is not None:
            if len(node.args) != 1 or node.keywords:
                raise _Fail(node, f"table '{table.name}' takes one argument")
            return table.apply(self._call(node, env, table.name), self._var(node.args[0], env),
                               self._species(node, indices, table.lead, env), node)
        if not isinstance(node.func, ast.Name):
            raise _Fail(node.func, "only named functions can be called")
        name = node.func.id
        if name in self.functions:
            if node.keywords:
                raise _Fail(node.keywords[0], f"function '{name}' takes positional arguments only")
            return self._user_call(node, self.functions[name], [self._var(a, env) for a in node.args])
        fn = FUNCTIONS.get(name)
        if fn is None:
            raise _Fail(node.func, f"unknown function '{name}'")
        return fn(self._call(node, env))

    def _table(self, func, env):
        """(TableFunction, index nodes) if `func` names a table: F, cu.F, F[i], cu.rho[a, b]; else (None, None)."""
        indices = []
        if isinstance(func, ast.Subscript):
            indices = func.slice.elts if isinstance(func.slice, ast.Tuple) else [func.slice]
            func = func.value
        if isinstance(func, ast.Name):
            got = env.get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and isinstance(env.get(func.value.id), TableSet):
            got = self._Attribute(func, env)
        else:
            return None, None
        return (got, indices) if isinstance(got, TableFunction) else (None, None)

    def _call(self, node, env, name=None):
        return Call(name or node.func.id, node, self.b, lambda n: self._var(n, env), lambda n: self._static(n, env))

    def _matmul(self, node, a, b):
        return matmul(self._call(node, None, "matmul"), a, b)

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
                if OPS[e.op].kind != "elementwise" and e.op not in ("const", "broadcast_to"):
                    raise _Fail(node, f"function '{fn.name}' has scalar arguments, so it is mapped elementwise, "
                                      f"but its body uses '{e.op}'; declare argument shapes (args: {{name: shape}})")
            want = broadcast_shapes(fn.name, [a.shape for a in args])
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
                if mapped and broadcast_shapes(fn.name, [p.shape, want]) != want or \
                        not mapped and p.shape != want:
                    raise fn.derivative[k].error(
                        f"the derivative of '{fn.name}' with respect to '{fn.args[k]}' must have shape {want}, "
                        f"got {p.shape}", col=0, length=len(fn.derivative[k].text))
                return p
            self.custom[out] = CustomRule(fn.name, tuple(args), partial, self._free_vars(out, args), mapped)
        return out
