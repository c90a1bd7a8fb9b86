"""A generated function's body compiled to LLVM IR directly, not by numba's front end.

numba turns each statement into its own IR, types it by unification over the whole function, runs a
dozen passes over it and lowers it through generic machinery: 5-8 ms of CPU per statement of the
straight-line code a W+P+A tangent is (Hencky's 1,250 statements: 9.7 s of a cold compile), several
times what LLVM then spends on the result. And each numba helper a kernel calls is a function numba
compiles on its own (the spectral ones: 10 s, once per install), or, inline="always", once more at every
call site. The functions the code generator writes, and the helpers of engine/numeric they call, use a
small, regular part of Python whose types follow statement by statement (float64 values, int64
indices, booleans, 1-D float64 arrays, tuples), so `direct(fn)` translates fn's body in one walk over
its syntax tree, inside an intrinsic that the generated njit function calls:

    def point_body(in_F, ..., work):          # the generated source, as before
        v0 = in_F[0]
        ...
    __point_body = __direct(point_body)

    @njit(cache=True, ...)
    def point(in_F, ..., work):
        __point_body(in_F, ..., work)

What it computes is what numba computes, to the bit:
- every operation goes through numba's own typing and implementation of it (operator.add on float64,
  np.log, an intrinsic), resolved once per distinct signature; constants are typed as numba types them
  (an int constant is a literal, as numba's `x ** 2` sees it);
- a call of a helper of engine/numeric is translated in place, its arguments keeping their types
  (numba, too, compiles a helper for literal arguments, and inlines inline="always" ones into its IR),
  conditions on literals and on None decided as numba's dead-branch pruning decides them; any other
  callee (and a helper outside the subset) is called as numba compiled it;
- the order of evaluation is Python's; `and`/`or` of booleans evaluate both sides (they have no side
  effects), `x if c else y` only the side taken.
A value assigned once outside loops and branches is an SSA value; any other variable lives in a stack
slot that LLVM promotes to registers. A generated body outside the subset is found when the module is
written (`supported`) and left to numba's front end.
"""
from __future__ import annotations

import ast
import builtins
import copy
import linecache
import operator
import types as pytypes

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types, typing
from numba.core.callconv import excinfo_t
from numba.core.dispatcher import Dispatcher
from numba.core.typing import signature
from numba.extending import intrinsic


class Unsupported(Exception):
    """A construct `direct` does not translate."""


BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
          ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
          ast.LShift: operator.lshift, ast.RShift: operator.rshift}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
FLOATS = (types.float64, types.float64)
# numba's implementations of these on two float64 (numba/cpython/numbers.py real_*_impl) are one instruction
# each (a division by zero checked first under error_model="python", which the kernels do not use)
FLOAT_OPS = {operator.add: ("arith", "fadd"), operator.sub: ("arith", "fsub"), operator.mul: ("arith", "fmul"),
             operator.truediv: ("arith", "fdiv"), operator.lt: ("ordered", "<"), operator.le: ("ordered", "<="),
             operator.gt: ("ordered", ">"), operator.ge: ("ordered", ">="), operator.eq: ("ordered", "=="),
             operator.ne: ("unordered", "!=")}
# what a generated body may hold, and what more a helper of engine/numeric may
BODY_STATEMENTS = (ast.Assign, ast.AugAssign, ast.For, ast.If, ast.Expr, ast.Pass, ast.Return)
HELPER_STATEMENTS = BODY_STATEMENTS + (ast.Break,)
EXPRESSIONS = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Subscript, ast.Tuple,
               ast.Call, ast.Attribute, ast.Slice, ast.IfExp, ast.Load, ast.Store, ast.And, ast.Or, ast.Is,
               ast.IsNot, *BINOPS, *UNARY, *COMPARE)
HELPER_MODULES = ("adgrad.engine.numeric.",)      # whose njit functions are translated where they are called


def supported(tree: ast.FunctionDef, helper=False):
    """Raise Unsupported unless every statement and expression of the function is of the subset (a
    generated body's, or with `helper` a helper's); types are checked as it is translated."""
    body = tree.body
    statements = HELPER_STATEMENTS if helper else BODY_STATEMENTS
    a = tree.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise Unsupported("parameters other than positional ones")
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Module):
            continue
        if isinstance(node, ast.stmt):
            if not isinstance(node, statements):
                raise Unsupported(f"statement {type(node).__name__}")
            if isinstance(node, ast.For) and (node.orelse or not _iteration(node, helper)):
                raise Unsupported("a for loop other than over range(), a tuple or enumerate(a tuple)")
            if isinstance(node, ast.Assign) and (len(node.targets) != 1 or not _target(node.targets[0], helper)):
                raise Unsupported(f"assignment to {ast.unparse(node.targets[0]) if node.targets else 'nothing'}")
            if isinstance(node, ast.AugAssign) and not isinstance(node.target, (ast.Name, ast.Subscript)):
                raise Unsupported("an augmented assignment to a tuple")
            if isinstance(node, ast.Return) and not helper and (node.value is not None or node is not body[-1]):
                raise Unsupported("a return other than the last statement, or with a value")
        elif not isinstance(node, EXPRESSIONS):
            raise Unsupported(f"expression {type(node).__name__}")
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and \
                not (len(node.ops) == 1 and isinstance(node.comparators[0], ast.Constant)
                     and node.comparators[0].value is None):
            raise Unsupported("`is` other than `x is None`")
        elif isinstance(node, ast.Call) and node.keywords:
            raise Unsupported("a call with keywords")


def _is_range(it):
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"


def _iteration(node, helper):
    """Whether a for loop iterates range(...) into a name, or (in a helper) a tuple or enumerate of one
    into names."""
    it = node.iter
    if _is_range(it):
        return 1 <= len(it.args) <= 3 and isinstance(node.target, ast.Name)
    return helper and _target(node.target, True) and not isinstance(node.target, ast.Subscript)


def _target(t, helper):
    if isinstance(t, ast.Name):
        return True
    if isinstance(t, ast.Subscript):            # one element of an array
        return not isinstance(t.slice, (ast.Slice, ast.Tuple))
    return helper and isinstance(t, ast.Tuple) and all(_target(x, helper) and not isinstance(x, ast.Subscript)
                                                         for x in t.elts)


def _names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Tuple):
        return [n for x in t.elts for n in _names(x)]
    return []


def _assigned(stmts, nested, counts):
    """{name: (times assigned, whether in a loop or branch)} of the statements (loop indices of range
    loops excepted: they are the loop's own SSA values)."""
    for s in stmts:
        names = []
        if isinstance(s, ast.Assign):
            names = _names(s.targets[0])
        elif isinstance(s, ast.AugAssign):
            names = _names(s.target) * 2
        elif isinstance(s, ast.For) and not _is_range(s.iter):
            names = _names(s.target) * 2          # an unrolled iteration assigns its names once per element
        for n in names:
            count, was = counts.get(n, (0, False))
            counts[n] = (count + 1, was or nested)
        if isinstance(s, (ast.For, ast.If)):
            _assigned(s.body, True, counts)
            _assigned(s.orelse, True, counts)
    return counts


_TREES = {}         # function -> (its syntax tree, whether a helper of the subset)
_RESOLVED = {}      # (callee, argument types) -> (numba function type, signature): typing is per process
_CONSTANTS = {}     # (Python type, repr) -> (numba type, LLVM constant) of a number


_MODULE_TREES = {}  # source file -> {first line: its function's syntax tree}


def _parsed(fn):
    """fn's def, from its module's source parsed once (inspect.getsource reads and tokenizes it anew)."""
    path = fn.__code__.co_filename
    defs = _MODULE_TREES.get(path)
    if defs is None:
        lines = linecache.getlines(path)
        if not lines:
            raise Unsupported(f"no source of {fn.__name__} ({path})")
        defs = _MODULE_TREES[path] = {
            min([node.lineno] + [d.lineno for d in node.decorator_list]): node
            for node in ast.walk(ast.parse("".join(lines))) if isinstance(node, ast.FunctionDef)}
    tree = defs.get(fn.__code__.co_firstlineno)
    if tree is None or tree.name != fn.__name__:
        raise Unsupported(f"no def of {fn.__name__} at {path}:{fn.__code__.co_firstlineno}")
    return tree


def _tree(fn, helper=False):
    """fn's syntax tree (decorators and a leading docstring dropped), checked by `supported`."""
    got = _TREES.get(fn)
    if got is None:
        try:
            tree = copy.copy(_parsed(fn))
            tree.decorator_list = []
            if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
                tree.body = tree.body[1:]
            supported(tree, helper)
            got = (tree, None)
        except (Unsupported, OSError, SyntaxError) as exc:
            got = (None, exc)
        _TREES[fn] = got
    if got[0] is None:
        raise Unsupported(str(got[1]))
    return got[0]


class _Return(Exception):
    """Not an error: the rest of a block after a return or break is not reached (not translated)."""


_ANALYSES = {}      # id(tree) -> (tree, its _analysis): a helper is translated at many call sites


def _analysis(tree):
    """(names assigned: (times, whether in a loop or branch), the SSA names, the names read) of a function."""
    got = _ANALYSES.get(id(tree))
    if got is None or got[0] is not tree:
        counts = _assigned(tree.body, False, {})
        read = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                read.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                read.add(n.target.id)
        ssa = frozenset(n for n, (count, nested) in counts.items() if count == 1 and not nested)
        got = _ANALYSES[id(tree)] = (tree, (counts, ssa, frozenset(read)))
    return got[1]


class _Scope:
    """The names of one function being translated: a helper translated in place ("inline": its returns go
    to `exit`, its value through `result`), or the generated body or a helper as a function of its own
    ("function": numba's calling convention, its value through the return pointer)."""

    def __init__(self, tree, globals_, kind, exit_block=None):
        self.globals = globals_
        self.kind = kind
        self.assigned, ssa, self.read = _analysis(tree)
        self.ssa = set(ssa)
        self.env = {}               # name -> (type, value) of an SSA value or a loop index
        self.slots = {}             # name -> (type, pointer) of a variable in a stack slot
        self.arrays = {}            # name -> (data, shape, strides) of an array value
        self.exit = exit_block      # an inline helper's: where its returns go
        self.result = None          # (type, pointer) of a helper's return value
        self.breaks = []            # the done blocks of the loops being translated


class _Translator:
    def __init__(self, context, builder, functions=None):
        self.context, self.builder = context, builder
        self.typing = context.typing_context
        self.impls = {}             # (callee, signature) -> implementation: bound to this context
        self.functions = {} if functions is None else functions   # (helper, argument types) -> (function, type)
        self.scope = None
        self.depth = 0              # helpers translated in place, nested

    # ---- functions ----------------------------------------------------------------------------------
    def bind_arguments(self, tree, values):
        names = [a.arg for a in tree.args.args]
        defaults = tree.args.defaults
        if len(values) > len(names) or len(values) < len(names) - len(defaults):
            raise Unsupported(f"{len(values)} arguments for the parameters {names}")
        for k in range(len(values), len(names)):
            d = defaults[k - (len(names) - len(defaults))]
            if not (isinstance(d, ast.Constant) and d.value is None):
                raise Unsupported("a default other than None")
            values.append((types.none, self.context.get_dummy_value()))
        assigned = self.scope.assigned
        for name, value in zip(names, values):
            if name in assigned and name not in self.scope.ssa:     # reassigned in a loop or branch, or twice
                self.store(name, value)
                continue
            self.scope.env[name] = value
            if isinstance(value[0], types.Array) and name not in assigned:   # taken apart here, where it dominates
                self.array(name, *value)

    def inline(self, fn, args):
        """A helper's body translated in place for these argument types; its return value."""
        tree = _tree(fn, helper=True)
        if self.depth > 20:
            raise Unsupported(f"helpers nested too deep at {fn.__name__} (recursion?)")
        b = self.builder
        outer = self.scope
        self.scope = _Scope(tree, fn.__globals__, "inline", b.append_basic_block(f"{fn.__name__}.exit"))
        self.depth += 1
        try:
            self.bind_arguments(tree, list(args))
            try:
                self.block(tree.body)
            except _Return:
                pass
            if not b.block.is_terminated:
                b.branch(self.scope.exit)
            b.position_at_end(self.scope.exit)
            if self.scope.result is None:
                return types.none, self.context.get_dummy_value()
            ty, ptr = self.scope.result
            return ty, b.load(ptr)
        finally:
            self.scope = outer
            self.depth -= 1

    def function(self, fn, args, helper=True, inline=False):
        """A call of `fn` (a helper, or the generated body) translated as an LLVM function of its own, one per
        signature and module, of numba's calling convention (an exception a numba implementation inside
        raises reaches the caller): what numba makes of a helper it compiles on its own. `inline`: LLVM
        inlines it wherever it is called (alwaysinline). Its return value."""
        argtys = tuple(t for t, _ in args)
        module = self.builder.module
        key = (fn, argtys, id(module))
        if key not in self.functions:
            self.functions[key] = self.define(fn, argtys, module, helper, inline)
        llfn, rty = self.functions[key]
        cc, b = self.context.call_conv, self.builder
        model = self.context.data_model_manager[rty]
        ret = cgutils.alloca_once(b, model.get_return_type())
        excinfo = cgutils.alloca_once(b, ir.PointerType(excinfo_t), name="excinfo")
        packer = cc._get_arg_packer(argtys)
        code = b.call(llfn, [ret, excinfo, *packer.as_arguments(b, [v for _, v in args])])
        status = cc._get_return_status(b, code, b.load(excinfo))
        with cgutils.if_unlikely(b, status.is_error):
            cc.return_status_propagate(b, status)
        return rty, model.from_return(b, b.load(ret))

    def define(self, fn, argtys, module, helper, inline):
        """(LLVM function, return type) of `fn` for these argument types: its body translated into a function
        of numba's calling convention (return pointer and exception info, then the arguments as numba
        passes them), internal to the module."""
        tree = _tree(fn, helper)
        if self.depth > 20:
            raise Unsupported(f"helpers nested too deep at {fn.__name__} (recursion?)")
        packer = self.context.call_conv._get_arg_packer(argtys)
        fnty = ir.FunctionType(ir.IntType(32), [ir.PointerType(), ir.PointerType(ir.PointerType(excinfo_t))]
                               + list(packer.argument_types))
        name = module.get_unique_name(f"adgrad.direct.{fn.__module__}.{fn.__qualname__}")
        llfn = ir.Function(module, fnty, name)
        llfn.linkage = "internal"
        if inline:
            llfn.attributes.add("alwaysinline")
        inner = _Translator(self.context, ir.IRBuilder(llfn.append_basic_block("entry")), self.functions)
        inner.impls, inner.depth = self.impls, self.depth + 1
        inner.scope = _Scope(tree, fn.__globals__, "function")
        inner.bind_arguments(tree, list(zip(argtys, packer.from_arguments(inner.builder, llfn.args[2:]))))
        try:
            inner.block(tree.body)
        except _Return:
            pass
        if not inner.builder.block.is_terminated:
            inner.builder.ret(ir.Constant(ir.IntType(32), 0))
        return llfn, inner.scope.result[0] if inner.scope.result else types.none

    # ---- statements ---------------------------------------------------------------------------------
    def block(self, stmts):
        for s in stmts:
            self.statement(s)

    def statement(self, s):
        if isinstance(s, ast.Assign):
            self.assign(s.targets[0], self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            target = ast.Name(s.target.id, ast.Load()) if isinstance(s.target, ast.Name) else \
                ast.Subscript(s.target.value, s.target.slice, ast.Load())
            self.assign(s.target, self.call(BINOPS[type(s.op)], [self.expr(target), self.expr(s.value)]))
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Constant):
                self.expr(s.value)
        elif isinstance(s, ast.For):
            self.loop(s)
        elif isinstance(s, ast.If):
            self.branch(s)
        elif isinstance(s, ast.Return):
            self.leave(s)
        elif isinstance(s, ast.Break):
            if not self.scope.breaks:
                raise Unsupported("break outside a loop")
            self.builder.branch(self.scope.breaks[-1])
            raise _Return
        elif not isinstance(s, ast.Pass):
            raise Unsupported(f"statement {type(s).__name__}")

    def leave(self, s):
        """A return: an inline helper's value into its result slot, then to its exit; a function's through
        its return pointer."""
        scope, b = self.scope, self.builder
        if s.value is not None:
            ty, val = self.expr(s.value)
            if scope.result is None:
                rty = types.unliteral(ty)
                ptr = self.builder.function.args[0] if scope.kind == "function" else \
                    cgutils.alloca_once(b, self.context.get_value_type(rty))
                scope.result = (rty, ptr)
            rty, ptr = scope.result
            if types.unliteral(ty) != rty:
                raise Unsupported(f"returns of {rty} and {ty}")
            val = self.context.cast(b, val, ty, rty)
            if scope.kind == "function":
                val = self.context.data_model_manager[rty].as_return(b, val)
            b.store(val, ptr)
        if scope.kind == "function":
            b.ret(ir.Constant(ir.IntType(32), 0))
        else:
            b.branch(scope.exit)
        raise _Return

    def assign(self, target, value):
        ty, val = value
        if isinstance(target, ast.Tuple):
            if not isinstance(ty, types.BaseTuple) or len(ty) != len(target.elts):
                raise Unsupported(f"unpacking {ty} into {len(target.elts)} names")
            for k, t in enumerate(target.elts):
                self.assign(t, (ty[k], self.builder.extract_value(val, k)))
            return
        if isinstance(target, ast.Subscript):
            aty, ptr = self.element(target)
            self.context.pack_value(self.builder, aty.dtype, self.context.cast(self.builder, val, ty, aty.dtype), ptr)
            return
        if target.id not in self.scope.read:      # `_` and the like: nothing to keep
            return
        if target.id in self.scope.ssa:
            self.scope.env[target.id] = value
            self.scope.arrays.pop(target.id, None)
        else:
            self.store(target.id, value)

    def store(self, name, value):
        ty, val = value
        slots = self.scope.slots
        if name not in slots:
            sty = types.unliteral(ty)
            slots[name] = (sty, cgutils.alloca_once(self.builder, self.context.get_value_type(sty)))
        sty, ptr = slots[name]
        if types.unliteral(ty) != sty:
            raise Unsupported(f"variable {name} holds {sty} and {ty}")
        self.builder.store(self.context.cast(self.builder, val, ty, sty), ptr)

    def loop(self, s):
        it = s.iter
        if _is_range(it):
            self.counted(s)
            return
        # over a tuple, or enumerate(a tuple): unrolled, the index an int64 (as numba's iteration types it)
        numbered = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate"
        if numbered and len(it.args) != 1:
            raise Unsupported("enumerate of other than one tuple")
        ty, val = self.expr(it.args[0] if numbered else it)
        if not isinstance(ty, types.BaseTuple):
            raise Unsupported(f"iteration over a {ty}")
        b = self.builder
        done = b.append_basic_block("unrolled.done")
        self.scope.breaks.append(done)
        try:
            for k in range(len(ty)):
                item = (ty[k], b.extract_value(val, k))
                if numbered:
                    item = (types.Tuple([types.intp, ty[k]]),
                            self.context.make_tuple(b, types.Tuple([types.intp, ty[k]]),
                                                    [ir.Constant(ir.IntType(64), k), item[1]]))
                self.assign(s.target, item)
                self.block(s.body)
        except _Return:         # an unconditional break or return: the later elements are not reached
            pass
        finally:
            self.scope.breaks.pop()
        if not b.block.is_terminated:
            b.branch(done)
        b.position_at_end(done)

    def counted(self, s):
        """for name in range(...): a counted loop, its index an SSA value the body only reads."""
        bounds = [self.integer(a) for a in s.iter.args]
        zero = ir.Constant(ir.IntType(64), 0)
        start, stop, step = (bounds + [None])[:3] if len(bounds) > 1 else (zero, bounds[0], None)
        if step is None:
            step = ir.Constant(ir.IntType(64), 1)
        if not isinstance(step, ir.Constant) or step.constant == 0:
            raise Unsupported("a range step other than a nonzero constant")
        b = self.builder
        before = b.block
        name = s.target.id
        head, body, done = (b.append_basic_block(f"{name}.{n}") for n in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        index = b.phi(ir.IntType(64), name=name)
        index.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<" if step.constant > 0 else ">", index, stop), body, done)
        b.position_at_end(body)
        saved = self.scope.env.get(name)
        self.scope.env[name] = (types.intp, index)
        self.scope.breaks.append(done)
        try:
            self.block(s.body)
        except _Return:
            pass
        finally:
            self.scope.breaks.pop()
        if not b.block.is_terminated:
            index.add_incoming(b.add(index, step), b.block)
            b.branch(head)
        b.position_at_end(done)
        if saved is not None:
            self.scope.env[name] = saved
        else:
            self.scope.env.pop(name)

    def branch(self, s):
        ty, cond = self.expr(s.test)
        if isinstance(ty, types.BooleanLiteral):        # decided as numba prunes dead branches
            taken = s.body if ty.literal_value else s.orelse
            self.block(taken)
            return
        cond = self.truth((ty, cond))
        b = self.builder
        then = b.append_basic_block("if.then")
        otherwise = b.append_basic_block("if.else") if s.orelse else None
        done = b.append_basic_block("if.done")
        b.cbranch(cond, then, otherwise or done)
        for block, stmts in ((then, s.body), (otherwise, s.orelse)):
            if block is None:
                continue
            b.position_at_end(block)
            try:
                self.block(stmts)
            except _Return:
                continue
            if not b.block.is_terminated:
                b.branch(done)
        b.position_at_end(done)

    # ---- expressions: (numba type, LLVM value) ------------------------------------------------------
    def expr(self, e):
        form = EXPRESSION_FORMS.get(type(e))
        if form is None:
            raise Unsupported(f"expression {type(e).__name__}")
        return form(self, e)

    def binop(self, e):
        return self.call(BINOPS[type(e.op)], [self.expr(e.left), self.expr(e.right)])

    def unary(self, e):
        x = self.expr(e.operand)
        if isinstance(e.op, ast.Not) and isinstance(x[0], types.BooleanLiteral):
            return self.constant(not x[0].literal_value)
        if isinstance(e.op, ast.USub) and isinstance(x[0], types.IntegerLiteral):    # -1: a literal, as numba's
            return self.constant(-x[0].literal_value)
        return self.call(UNARY[type(e.op)], [x])

    def member(self, e):
        """module.name (a constant: np.nan, math.pi; or a function), or a value's attribute."""
        if isinstance(e.value, ast.Name) and isinstance(self.scope.globals.get(e.value.id), pytypes.ModuleType) \
                and e.value.id not in self.scope.env and e.value.id not in self.scope.slots:
            return self.constant(self.attribute(e))
        return self.getattr(self.expr(e.value), e.attr)

    def getattr(self, value, attr):
        """A value's attribute (an array's shape, size, ...) by numba's typing and implementation of it."""
        ty, val = value
        rty = self.typing.resolve_getattr(ty, attr)
        if rty is None:
            raise Unsupported(f"attribute {attr} of a {ty}")
        impl = self.context.get_getattr(ty, attr)
        if impl is None:
            raise Unsupported(f"attribute {attr} of a {ty}")
        return rty, impl(self.context, self.builder, ty, val, attr)

    def tuple(self, items):
        """A tuple as numba builds one of these values: UniTuple when their types agree."""
        tys = [types.unliteral(t) for t, _ in items]
        tty = types.UniTuple(tys[0], len(tys)) if tys and all(t == tys[0] for t in tys) else types.Tuple(tys)
        vals = [self.context.cast(self.builder, v, t, u) for (t, v), u in zip(items, tys)]
        return tty, self.context.make_tuple(self.builder, tty, vals)

    def constant(self, value):
        key = (type(value), repr(value)) if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)) \
            and value == value else None      # repr: 0.0 and -0.0 are two; a NaN (of any payload) is not kept
        got = _CONSTANTS.get(key) if key else None
        if got is None:
            got = self.make_constant(value)
            if key:
                _CONSTANTS[key] = got
        return got

    def make_constant(self, value):
        if value is None:
            return types.none, self.context.get_dummy_value()
        if isinstance(value, (bool, np.bool_)):
            return types.literal(bool(value)), ir.Constant(ir.IntType(1), int(value))
        if isinstance(value, (int, np.integer)):
            return types.literal(int(value)), ir.Constant(ir.IntType(64), int(value))
        if isinstance(value, (float, np.floating)):
            return types.float64, ir.Constant(ir.DoubleType(), float(value))
        if isinstance(value, np.ndarray):       # a module-level constant array: frozen into the code, as numba does
            ty = self.typing.resolve_value_type(value)
            return ty, self.context.get_constant_generic(self.builder, ty, value)
        raise Unsupported(f"constant {value!r}")

    def name(self, name):
        scope = self.scope
        if name in scope.env:
            return scope.env[name]
        if name in scope.slots:
            ty, ptr = scope.slots[name]
            return ty, self.builder.load(ptr)
        if name in scope.globals:
            return self.constant(scope.globals[name])
        raise Unsupported(f"name {name} is not a local, argument or constant")

    def attribute(self, e):
        """np.nan, math.pi, np.exp: a module's attribute."""
        if not isinstance(e.value, ast.Name) or not isinstance(self.scope.globals.get(e.value.id), pytypes.ModuleType):
            raise Unsupported(f"attribute {ast.unparse(e)}")
        return getattr(self.scope.globals[e.value.id], e.attr)

    def callee(self, e):
        if isinstance(e, ast.Name):
            if e.id in self.scope.globals:
                return self.scope.globals[e.id]
            if hasattr(builtins, e.id):
                return getattr(builtins, e.id)
            raise Unsupported(f"function {e.id}")
        if isinstance(e, ast.Attribute):
            return self.attribute(e)
        raise Unsupported(f"callee {ast.unparse(e)}")

    def apply(self, e):
        fn = self.callee(e.func)
        args = [self.expr(a) for a in e.args]
        if isinstance(fn, Dispatcher):
            if (fn.py_func.__module__ or "").startswith(HELPER_MODULES):
                try:
                    _tree(fn.py_func, helper=True)
                except Unsupported:
                    pass
                else:       # as numba: inline="always" helpers into the caller's code, others on their own
                    if fn.targetoptions.get("inline") == "always":
                        return self.inline(fn.py_func, args)
                    return self.function(fn.py_func, args, inline=bool(fn.targetoptions.get("forceinline")))
            if fn.targetoptions.get("inline") == "always":
                fn = _twin(fn)
        return self.call(fn, args)

    def truth(self, value):
        ty, val = value
        return val if isinstance(ty, types.Boolean) else \
            self.context.cast(self.builder, val, ty, types.boolean)

    def integer(self, node):
        ty, val = self.expr(node)
        if not isinstance(ty, types.Integer):
            raise Unsupported(f"a range bound of type {ty}")
        return self.context.cast(self.builder, val, ty, types.intp)

    def compare(self, e):
        """A comparison; `x is None` decided by x's type, comparisons of literals decided; a chain
        a < b < c is each comparison (b evaluated once), combined with `and`."""
        op = e.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            ty, _ = self.expr(e.left)
            none = isinstance(ty, (types.NoneType, types.Omitted))
            return self.constant(none if isinstance(op, ast.Is) else not none)
        operands = [self.expr(x) for x in [e.left, *e.comparators]]
        out = []
        for op, a, b in zip(e.ops, operands, operands[1:]):
            if isinstance(a[0], types.Literal) and isinstance(b[0], types.Literal):
                out.append(self.constant(COMPARE[type(op)](a[0].literal_value, b[0].literal_value)))
            else:
                out.append(self.call(COMPARE[type(op)], [a, b]))
        return out[0] if len(out) == 1 else self.conjunction(out, True)

    def boolop(self, e):
        return self.conjunction([self.expr(v) for v in e.values], isinstance(e.op, ast.And))

    def conjunction(self, values, both):
        """and (`both`) or or of booleans (no side effects, so every one evaluated); of literals, decided."""
        if any(not isinstance(t, types.Boolean) for t, _ in values):
            raise Unsupported("and/or of values that are not booleans")
        if all(isinstance(t, types.BooleanLiteral) for t, _ in values):
            flags = [t.literal_value for t, _ in values]
            return self.constant(all(flags) if both else any(flags))
        combine = self.builder.and_ if both else self.builder.or_
        out = self.truth(values[0])
        for v in values[1:]:
            out = combine(out, self.truth(v))
        return types.boolean, out

    def ifexp(self, e):
        """x if c else y: only the side taken is evaluated."""
        ty, cond = self.expr(e.test)
        if isinstance(ty, types.BooleanLiteral):
            return self.expr(e.body if ty.literal_value else e.orelse)
        b = self.builder
        then, otherwise, done = (b.append_basic_block(f"ifexp.{n}") for n in ("then", "else", "done"))
        b.cbranch(self.truth((ty, cond)), then, otherwise)
        sides = []
        for block, node in ((then, e.body), (otherwise, e.orelse)):
            b.position_at_end(block)
            sides.append(self.expr(node))
            sides[-1] += (b.block,)
        rty = self.typing.unify_pairs(types.unliteral(sides[0][0]), types.unliteral(sides[1][0]))
        if rty is None:
            raise Unsupported(f"x if c else y of {sides[0][0]} and {sides[1][0]}")
        incoming = []
        for ty_, val, block in sides:
            b.position_at_end(block)
            incoming.append((self.context.cast(b, val, ty_, rty), b.block))
            b.branch(done)
        b.position_at_end(done)
        phi = b.phi(self.context.get_value_type(rty))
        for val, block in incoming:
            phi.add_incoming(val, block)
        return rty, phi

    def call(self, fn, args):
        """fn(*args) by numba's typing and implementation of it (each signature resolved once); the float64
        arithmetic and comparisons as the instructions numba's implementations of them emit."""
        argtys = tuple(t for t, _ in args)
        if argtys == FLOATS and fn in FLOAT_OPS:
            if fn is not operator.truediv or not self.context.error_model.raise_on_fp_zero_division:
                kind, instruction = FLOAT_OPS[fn]
                a, b = args[0][1], args[1][1]
                if kind == "arith":
                    return types.float64, getattr(self.builder, instruction)(a, b)
                if kind == "ordered":
                    return types.boolean, self.builder.fcmp_ordered(instruction, a, b)
                return types.boolean, self.builder.fcmp_unordered(instruction, a, b)
        key = (fn, argtys)
        try:
            fnty, sig = _RESOLVED[key]
        except KeyError:
            fnty = self.typing.resolve_value_type(fn)
            sig = self.typing.resolve_function_type(fnty, argtys, {})
            if sig is None:
                raise Unsupported(f"no signature of {fn} for {argtys}") from None
            _RESOLVED[key] = fnty, sig
        impl = self.impls.get((fn, sig))
        if impl is None:
            impl = self.impls[(fn, sig)] = self.context.get_function(fnty, sig)
        return sig.return_type, impl(self.builder, self.fold(sig, args))

    def fold(self, sig, args):
        """The argument values a numba implementation of `sig` takes (as numba's lowering folds them): each
        cast to its parameter's type, defaults filled in, a *args packed into a struct."""
        cast = self.context.cast
        if sig.pysig is None:
            return [cast(self.builder, v, t, want) for (t, v), want in zip(args, sig.args)]

        def star(index, param, values):
            return cgutils.make_anonymous_struct(
                self.builder, [cast(self.builder, v, t, want) for (t, v), want in zip(values, sig.args[index])])
        return typing.fold_arguments(
            sig.pysig, args, {}, lambda index, param, a: cast(self.builder, a[1], a[0], sig.args[index]),
            lambda index, param, default: self.context.get_constant_generic(self.builder, sig.args[index], default),
            star)

    def array(self, name, ty, value):
        """(data, shape, strides) of an array value: an argument's taken apart once, where it is bound."""
        got = self.scope.arrays.get(name) if name else None
        if got is None:
            ary = self.context.make_array(ty)(self.context, self.builder, value)
            got = (ary.data, cgutils.unpack_tuple(self.builder, ary.shape, ty.ndim),
                   cgutils.unpack_tuple(self.builder, ary.strides, ty.ndim))
            if name:
                self.scope.arrays[name] = got
        return got

    def element(self, e, array=None):
        """(array type, pointer) of array[index] (`array`: e.value's (type, value), if evaluated): one integer
        index, never negative in the code translated (no wraparound, no bounds check, as numba's default)."""
        name = e.value.id if isinstance(e.value, ast.Name) and e.value.id in self.scope.arrays else None
        aty, value = array or self.expr(e.value)
        if not isinstance(aty, types.Array) or aty.ndim != 1:
            raise Unsupported(f"an element of a {aty}")
        data, shape, strides = self.array(name, aty, value)
        ity, idx = self.expr(e.slice)
        if not isinstance(ity, types.Integer):
            raise Unsupported(f"an index of type {ity}")
        idx = self.context.cast(self.builder, idx, ity, types.intp)
        if aty.layout == "C":               # get_item_pointer2's address without its multiply by 1 and add of 0
            return aty, self.builder.gep(data, [idx])
        return aty, cgutils.get_item_pointer2(self.context, self.builder, data, shape, strides, aty.layout, [idx])

    def subscript(self, e):
        ty, val = self.expr(e.value)
        if isinstance(ty, types.Array):
            aty, ptr = self.element(e, (ty, val))
            return aty.dtype, self.context.unpack_value(self.builder, aty.dtype, ptr)
        if not isinstance(ty, types.BaseTuple):
            raise Unsupported(f"subscript of a {ty}")
        if isinstance(e.slice, ast.Slice):
            bounds = [None if x is None else ast.literal_eval(x) for x in (e.slice.lower, e.slice.upper, e.slice.step)]
            return self.tuple([(ty[k], self.builder.extract_value(val, k))
                               for k in list(range(len(ty)))[slice(*bounds)]])
        ity, idx = self.expr(e.slice)
        if isinstance(ity, types.IntegerLiteral) and -len(ty) <= ity.literal_value < len(ty):
            k = ity.literal_value % len(ty)
            return ty[k], self.builder.extract_value(val, k)
        return self.call(operator.getitem, [(ty, val), (ity, idx)])     # a run-time index: numba's own


def untranslated(exc):
    """What the translator refused, if `exc` (raised while numba compiled a kernel) comes from that, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Unsupported):
            return f"codegen/direct.py cannot translate its body ({exc})"
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


EXPRESSION_FORMS = {
    ast.Constant: lambda t, e: t.constant(e.value), ast.Name: lambda t, e: t.name(e.id), ast.BinOp: _Translator.binop,
    ast.UnaryOp: _Translator.unary, ast.Compare: _Translator.compare, ast.BoolOp: _Translator.boolop,
    ast.IfExp: _Translator.ifexp, ast.Subscript: _Translator.subscript,
    ast.Tuple: lambda t, e: t.tuple([t.expr(x) for x in e.elts]), ast.Call: _Translator.apply,
    ast.Attribute: _Translator.member}

_TWINS = {}        # py_func -> its forceinline dispatcher


def _twin(fn):
    """The inline="always" njit function `fn` as a function that LLVM inlines where it is called
    (forceinline): numba inlines the former into its caller's IR, which a translated body has none of."""
    twin = _TWINS.get(fn.py_func)
    if twin is None:
        options = {k: v for k, v in fn.targetoptions.items() if k not in ("inline", "nopython")}
        twin = _TWINS[fn.py_func] = njit(forceinline=True, **options)(fn.py_func)
    return twin


INLINE_MAX = 1000      # statements: a longer body is a function LLVM calls, not inlines (why: codegen/load.py)


def direct(fn):
    """An intrinsic doing what fn's body does (fn returns nothing), translated when a caller is compiled: a
    function of its own in the caller's module, which LLVM inlines up to INLINE_MAX statements. Optimized
    on its own first (numba's function passes), then inlined and optimized again in the caller, as numba
    did with `point`: translated in place into a driver's loop instead, the Cu EAM kernel ran 8% slower."""
    def typer(typingctx, *argtys):
        def codegen(context, builder, sig, args):
            tree = _tree(fn)
            inline = sum(isinstance(n, ast.stmt) for n in ast.walk(tree)) <= INLINE_MAX
            _Translator(context, builder).function(fn, list(zip(sig.args, args)), helper=False, inline=inline)
            return context.get_dummy_value()
        return signature(types.none, *argtys), codegen
    # numba reads an intrinsic's arity from its definition: one named parameter per argument of fn
    params = ", ".join(f"a{k}" for k in range(fn.__code__.co_argcount))
    fixed = eval(f"lambda typingctx, {params}: typer(typingctx, {params})", {"typer": typer})   # noqa: S307
    fixed.__name__ = fixed.__qualname__ = f"{fn.__name__}_direct"
    return intrinsic(fixed)
