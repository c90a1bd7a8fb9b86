"""Model and config files: YAML -> frozen dataclasses that remember where each value was written.

PyYAML's compose step keeps every node's line and column, so any later error (an unknown name in an
expression, a shape mismatch) can point at the file, line and column of the expression.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import yaml
from yaml.constructor import SafeConstructor

from .errors import SpecError
from .limits import DEFAULT_MEMORY, MAX_CHUNK, MAX_ELEMENTS, MIN_MEMORY, MAX_NEWTON, MAX_YAML_DEPTH, MAX_YAML_VALUES
from .numeric.tables import check_grid
from .potentials import READERS, SUFFIXES, format_of
from .potentials.locate import locate


@dataclass(frozen=True)
class Expr:
    """An expression string and where it was written."""
    text: str
    path: str
    line: int
    col: int
    where: str                  # e.g. "outputs.E"

    def error(self, message, col=None, length=1):
        return SpecError(f"{self.where}: {message}", self.path, self.line, self.col,
                         expr=self.text, expr_col=col, expr_len=length)


@dataclass(frozen=True)
class Loc:
    path: str
    line: int
    col: int

    def error(self, message):
        return SpecError(message, self.path, self.line, self.col)


@dataclass(frozen=True)
class SolveDecl:
    """A let entry defined by an equation: the x with residual(x) = 0, found by Newton's method from
    `init` (engine/solve.py)."""
    name: str
    residual: Expr
    init: Expr | None           # None: zero, a scalar unknown
    tol: float                  # converged when max|residual| <= tol * max(1, max|residual(init)|)
    max_iter: int
    loc: Loc


SOLVE_KEYS = ("solve", "init", "tol", "max_iter")


# export.umat: the stress measures a finite-strain UMAT's stress output may be (a gradient of an energy
# wrt F is the first Piola-Kirchhoff stress); a small-strain model's stress is the stress
UMAT_MEASURES = ("first_piola", "second_piola", "cauchy", "kirchhoff")
UMAT_KEYS = ("strain", "F", "stress", "measure", "state", "props")


@dataclass(frozen=True)
class UmatDecl:
    """export.umat: the model as an Abaqus UMAT (docs/native.md): the 3x3 input the strain (small
    strain) or the deformation gradient (finite strain) comes in, the stress (an output, or the
    gradient d{W}_d{input} of a scalar output), the state (each new state output with the input
    holding its old value, in STATEV's order) and the params read from PROPS, in order."""
    kinematics: str             # "strain" | "F"
    input: str                  # the strain or F input
    stress: str                 # an output, or d{energy}_d{input}
    energy: str | None          # the scalar output whose gradient is the stress, else None
    measure: str                # "strain": "small"; "F": one of UMAT_MEASURES
    state: tuple                # ((new output, old input), ...)
    props: tuple                # param names
    loc: Loc                    # the umat: mapping
    locs: dict                  # key ("stress", "state.<output>", "props.<param>", ...) -> Loc of its value


@dataclass(frozen=True)
class ExportDecl:
    """export: how a native library presents the model (engine/export)."""
    umat: UmatDecl | None
    loc: Loc
SOLVE_TOL = 1e-12
SOLVE_MAX_ITER = 25


@dataclass(frozen=True)
class InputDecl:
    name: str
    shape: tuple
    sample: tuple | None        # (low, high, center) or None; center: a number or "identity"
    loc: Loc


@dataclass(frozen=True)
class ParamDecl:
    name: str
    value: object               # a nested list of numbers, an Expr, an H5Ref, a TableRef or a PotentialRef
    loc: Loc


@dataclass(frozen=True)
class TableRef:
    """A tabulated function: node values on a uniform grid (docs/model-language.md, Tables)."""
    values: object              # a list of numbers or an H5Ref
    x0: float
    dx: float
    beyond: str                 # above the last node: "linear" (extended with the end slope) or "hold"


@dataclass(frozen=True)
class PotentialRef:
    """A LAMMPS potential file (or one funcfl file per element) read as tables and constants."""
    files: tuple                # absolute paths
    format: str                 # eam, eam/alloy, eam/fs
    elements: tuple | None      # which elements of a setfl/fs file, in species order


@dataclass(frozen=True)
class H5Ref:
    file: str                   # absolute path
    dataset: str
    shape: tuple | None = None  # declared beside them: checked against the dataset


@dataclass(frozen=True)
class FunctionDecl:
    name: str
    args: tuple                 # argument names
    arg_shapes: tuple           # per argument: a shape tuple, or None for "scalar, mapped elementwise"
    expr: Expr
    derivative: tuple | None    # one Expr per argument, or None
    loc: Loc


@dataclass(frozen=True)
class Model:
    name: str
    description: str
    path: str
    text: str
    inputs: dict                # name -> InputDecl, in file order
    params: dict                # name -> ParamDecl
    functions: dict             # name -> FunctionDecl
    lets: dict                  # name -> Expr or SolveDecl, in order
    outputs: dict               # name -> Expr
    derivatives: dict           # "d{of}_d{wrt}" -> Expr (hand-written, used by mode: manual)
    sizes: dict = field(default_factory=dict)   # name -> int: the named sizes its shapes use
    export: ExportDecl | None = None            # its export: section


def derivative_name(of, wrt, kind=""):
    """The result's name: d{of}_d{wrt} or d2{of}_d{w1}_d{w2}, then _sum, _jvp or _vjp for a kind."""
    base = f"d{of}_d{wrt[0]}" if len(wrt) == 1 else f"d2{of}_d{wrt[0]}_d{wrt[1]}"
    return base + (f"_{kind}" if kind else "")


@dataclass(frozen=True)
class DerivativeRequest:
    """One derivative a run asks for: of an output, with respect to one name (or two: second order),
    per point, summed over points (reduce: sum), or as a product with a per-point direction (a jvp)
    or cotangent (a vjp) read from the input file."""
    of: str
    wrt: tuple                  # one name (first order) or two (second order)
    reduce: str | None = None
    direction: str | None = None
    cotangent: str | None = None
    mode: str | None = None     # None: the config's (or the API call's) mode
    loc: Loc | None = None

    def __post_init__(self):
        where = (self.loc.path, self.loc.line, self.loc.col) if self.loc else (None, None, None)
        if sum(bool(x) for x in (self.reduce, self.direction, self.cotangent)) > 1:
            raise SpecError("compute.derivatives: reduce, direction and cotangent exclude each other", *where)
        if self.kind in ("jvp", "vjp") and len(self.wrt) != 1:
            raise SpecError(f"compute.derivatives: a {self.kind} is of a first derivative (one wrt name)", *where)

    @property
    def kind(self):
        """"" per point, "sum" summed over points, "jvp" or "vjp" a product with `vector`."""
        return "sum" if self.reduce else "jvp" if self.direction else "vjp" if self.cotangent else ""

    @property
    def vector(self):
        """The input holding a jvp's direction or a vjp's cotangent, else None."""
        return self.direction or self.cotangent

    @property
    def name(self):
        return derivative_name(self.of, self.wrt, self.kind)


def as_request(req, mode=None) -> DerivativeRequest:
    """A DerivativeRequest, or a pair (of, wrt) with wrt a name or a list of two names, as a
    DerivativeRequest whose mode is its own or else `mode`."""
    if not isinstance(req, DerivativeRequest):
        of, wrt = req
        req = DerivativeRequest(of, (wrt,) if isinstance(wrt, str) else tuple(wrt))
    return req if req.mode or mode is None else dataclasses.replace(req, mode=mode)


class DatasetName(str):
    """The name of an input's dataset (a str) and `offset`, what the reader adds to its values: -1 for a
    dataset of LAMMPS's 1-based atom types read as 0-based species indices (input.one_based)."""

    def __new__(cls, name, offset=0.0):
        self = super().__new__(cls, name)
        self.offset = float(offset)
        return self


@dataclass(frozen=True)
class InputSection:
    path: str | None = None     # absolute
    datasets: dict = field(default_factory=dict)    # model input -> dataset name (its own by default)


@dataclass(frozen=True)
class OutputSection:
    path: str | None = None     # absolute
    dtype: str = "float64"
    compression: str = "none"


@dataclass(frozen=True)
class ComputeSection:
    values: tuple = ()          # output names (the loader's default: every output)
    derivatives: tuple = ()     # DerivativeRequest


@dataclass(frozen=True)
class EngineSection:
    threads: int = 0            # 0 = all cores
    chunk: int | None = None    # points per chunk, at most MAX_CHUNK; None: as many as fit `memory`
    nan: str = "propagate"
    math: str = "vector"        # vector | libm: vectorized elementary functions or libm calls (compile_model)
    memory: int = DEFAULT_MEMORY  # bytes for the run's chunk buffers


@dataclass(frozen=True)
class Config:
    path: str
    text: str
    model: Model
    params: dict                # name -> ParamDecl: overrides of the model's params
    input: InputSection
    output: OutputSection
    mode: str
    compute: ComputeSection
    engine: EngineSection
    loc: dict = field(default_factory=dict)   # section name -> Loc, for data errors
    export: ExportDecl | None = None          # its export: section (in place of the model's)


MODES = ("auto", "forward", "reverse", "manual")


class _Doc:
    """A composed YAML document: converts nodes to Python values and errors to SpecErrors."""

    def __init__(self, path, text):
        self.path, self.text = path, text
        self.sizes = {}         # a model's named sizes (its `sizes:` with overrides), set before shapes are read
        try:
            self.root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            raise SpecError(f"malformed YAML: {exc.problem or exc.context}", path,
                            mark.line + 1 if mark else None, mark.column + 1 if mark else None) from None
        except yaml.reader.ReaderError as exc:         # a NUL or control character: no mark, a position
            line = text.count("\n", 0, exc.position) + 1
            col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            raise SpecError(f"malformed YAML: {exc.reason} (character {exc.character!r})", path, line, col) from None
        except RecursionError:          # pyyaml composes recursively: thousands of levels exhaust the stack
            line, col = _too_deep(text)
            raise SpecError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", path, line, col) from None
        if self.root is None:
            raise SpecError("the file is empty", path, 1, 1)
        _check_expansion(self, self.root)

    def loc(self, node):
        return Loc(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node, message):
        return self.loc(node).error(message)

    def value(self, node):
        try:
            return SafeConstructor().construct_object(node, deep=True)
        except yaml.YAMLError as exc:      # e.g. a !!python/... tag, which the safe loader refuses
            raise self.error(node, f"cannot read value: {getattr(exc, 'problem', None) or exc}") from None

    def mapping(self, node, where, allowed=None, required=()):
        """The entries of a mapping node as {key: value node}, checking key names."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{where} must be a mapping")
        out = {}
        for knode, vnode in node.value:
            key = self.value(knode)
            if not isinstance(key, str):
                raise self.error(knode, f"{where}: keys must be names, got {key!r}")
            if allowed is not None and key not in allowed:
                raise self.error(knode, f"{where}: unknown key '{key}' (allowed: {', '.join(allowed)})")
            if key in out:
                raise self.error(knode, f"{where}: duplicate key '{key}'")
            out[key] = vnode
        for key in required:
            if key not in out:
                raise self.error(node, f"{where}: missing required key '{key}'")
        return out

    def expr(self, node, where):
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{where} must be an expression (a string or a number)")
        text = str(self.value(node))
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        return Expr(text, self.path, line, col, where)

    def shape(self, node, where):
        val = self.value(node)
        if isinstance(val, (int, str)) and not isinstance(val, bool):
            val = [val]
        if not isinstance(val, list):
            raise self.error(node, f"{where}: a shape is a list of positive integers or sizes, got {val!r}")
        for d in val:
            if isinstance(d, str) and d not in self.sizes:
                raise self.error(node, f"{where}: '{d}' is not a size of the model (declare it under sizes:; "
                                       f"its sizes: {', '.join(self.sizes) or 'none'})")
        val = [self.sizes.get(d, d) if isinstance(d, str) else d for d in val]
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in val):
            raise self.error(node, f"{where}: a shape is a list of positive integers or sizes, got {val!r}")
        return tuple(val)

    def name_list(self, node, where):
        val = self.value(node)
        if isinstance(val, str):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise self.error(node, f"{where} must be a name or a list of names")
        return tuple(val)


def _check_expansion(doc, root):
    """Refuse a document that expands beyond MAX_YAML_VALUES values (an alias bomb: a 1 KB file whose
    aliases repeat each other to billions) or nests deeper than MAX_YAML_DEPTH, without expanding it:
    sizes are counted once per node and reused for each alias of it."""
    size, depth, seen = {}, {}, set()
    stack = [(root, False)]
    while stack:                        # iterative post-order over the node graph
        node, done = stack.pop()
        if done:
            kids = _children(node)
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[id(node)] > MAX_YAML_VALUES:
                raise doc.error(node, f"this value expands to more than {MAX_YAML_VALUES:,} values "
                                      f"(YAML aliases repeating each other); the limit keeps a small file "
                                      f"from exhausting the machine")
            if depth[id(node)] > MAX_YAML_DEPTH:
                raise doc.error(node, f"YAML nested more than {MAX_YAML_DEPTH} levels deep")
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in seen)


def _too_deep(text):
    """(line, column) where the collections of `text` first nest deeper than MAX_YAML_DEPTH, from pyyaml's
    token scanner, which (unlike its composer) does not recurse."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken,
                              yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                return token.start_mark.line + 1, token.start_mark.column + 1
        elif isinstance(token, (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)):
            depth -= 1
    return 1, 1


def _children(node):
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise SpecError(f"cannot read file: {exc.strerror}", path) from None
    except UnicodeDecodeError as exc:
        data = open(path, "rb").read()
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x})", path, line, col) from None


def _check_version(doc, entries, where):
    if "adgrad" in entries and doc.value(entries["adgrad"]) != 1:
        raise doc.error(entries["adgrad"], f"{where}: unsupported format version (this adgrad reads 'adgrad: 1')")


def _param(doc, name, node, base_dir):
    where = f"params.{name}"
    loc = doc.loc(node)
    if isinstance(node, yaml.MappingNode):
        keys = doc.mapping(node, where)
        if "potential" in keys:
            return ParamDecl(name, _potential(doc, node, where, base_dir), loc)
        if "table" in keys:
            return ParamDecl(name, _table(doc, node, where, base_dir), loc)
        return ParamDecl(name, _h5ref(doc, node, where, base_dir), loc)
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":str"):
        return ParamDecl(name, doc.expr(node, where), loc)
    val = doc.value(node)
    if not _numeric(val):
        raise doc.error(node, f"{where}: a param is a number, a nested list of numbers, a constant expression "
                              f"or {{file, dataset}}")
    return ParamDecl(name, val, loc)


def _numeric(v):
    """A number or a nested list of numbers."""
    if isinstance(v, list):
        return all(_numeric(x) for x in v)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _h5ref(doc, node, where, base_dir):
    entries = doc.mapping(node, where, allowed=("file", "dataset", "shape"), required=("file", "dataset"))
    file = os.path.normpath(os.path.join(base_dir, str(doc.value(entries["file"]))))
    shape = doc.shape(entries["shape"], f"{where}.shape") if "shape" in entries else None
    return H5Ref(file, str(doc.value(entries["dataset"])), shape)


def _number(doc, node, where):
    v = doc.value(node)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise doc.error(node, f"{where} must be a finite number, got {v!r}")
    return float(v)


def _table(doc, node, where, base_dir):
    e = doc.mapping(node, where, allowed=("table", "x0", "dx", "grid", "beyond"), required=("table",))
    values = e["table"]
    if isinstance(values, yaml.MappingNode):
        values = _h5ref(doc, values, f"{where}.table", base_dir)
    else:
        values = doc.value(values)
        if not isinstance(values, list) or not _numeric(values):
            raise doc.error(e["table"], f"{where}.table: a list of numbers (the values at the grid points; "
                                        f"nested lists for several tables) or {{file, dataset}}")
    beyond = doc.value(e["beyond"]) if "beyond" in e else "linear"
    if beyond not in ("linear", "hold"):
        raise doc.error(e["beyond"], f"{where}.beyond: 'linear' or 'hold', got {beyond!r}")
    if "grid" in e:             # the grid points themselves: checked to be uniform
        if "dx" in e or "x0" in e:
            raise doc.error(e["grid"], f"{where}: give either grid: or x0: and dx:, not both")
        grid = doc.value(e["grid"])
        try:
            x0, dx = check_grid(grid, f"{where}.grid")
        except (ValueError, TypeError) as exc:
            raise doc.error(e["grid"], str(exc) if isinstance(exc, ValueError) else
                            f"{where}.grid: a list of numbers") from None
        if isinstance(values, list) and len(values) != len(grid):
            raise doc.error(e["grid"], f"{where}: {len(grid)} grid points but {len(values)} values")
        return TableRef(values, x0, dx, beyond)
    if "dx" not in e:
        raise doc.error(node, f"{where}: a table needs its grid: dx: (and x0:, default 0) or grid: [x values]")
    dx = _number(doc, e["dx"], f"{where}.dx")
    if dx <= 0 or not math.isfinite(1.0 / dx):        # the kernels multiply by 1/dx
        raise doc.error(e["dx"], f"{where}.dx: the grid spacing must be positive (and 1/dx finite), got {dx}")
    x0 = _number(doc, e["x0"], f"{where}.x0") if "x0" in e else 0.0
    return TableRef(values, x0, dx, beyond)


def _potential(doc, node, where, base_dir):
    e = doc.mapping(node, where, allowed=("potential", "format", "elements"), required=("potential",))
    files = doc.value(e["potential"])
    files = [files] if isinstance(files, str) else files
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise doc.error(e["potential"], f"{where}.potential: a file name, or a list of funcfl files (one per element)")
    found = [locate(f, base_dir) for f in files]     # beside the model, $ADGRAD_POTENTIALS, ... (potentials/locate.py)
    for path, missing in found:
        if path is None:
            raise doc.error(e["potential"], f"{where}.potential: {missing}")
    files = tuple(path for path, _ in found)
    fmt = doc.value(e["format"]) if "format" in e else format_of(files[0])
    if fmt not in READERS:
        at = e.get("format", e["potential"])
        raise doc.error(at, f"{where}: unknown potential format {fmt!r} (known: {', '.join(READERS)}; "
                            f"give format: when the file name does not end in {', '.join(SUFFIXES)})")
    elements = doc.name_list(e["elements"], f"{where}.elements") if "elements" in e else None
    return PotentialRef(files, fmt, elements)


def _is_name(s):
    return s.isidentifier()


EMPTY = yaml.MappingNode("tag:yaml.org,2002:map", [])


# ---- the model file: one function per section -------------------------------------------------------
class _Names:
    """The names a model declares (inputs, params, functions, lets): valid and defined once."""

    def __init__(self, doc):
        self.doc, self.seen = doc, {}

    def declare(self, name, node, kind):
        if not _is_name(name):
            raise self.doc.error(node, f"{kind} name '{name}' is not a valid identifier")
        if name in self.seen:
            raise self.doc.error(node, f"{kind} '{name}' is already defined as {self.seen[name]}")
        self.seen[name] = kind


def _inputs(doc, node, names, input_shapes):
    inputs = {}
    for name, node in doc.mapping(node, "inputs").items():
        names.declare(name, node, "input")
        e = doc.mapping(node, f"inputs.{name}", allowed=("shape", "sample")) if isinstance(node, yaml.MappingNode) \
            else {"shape": node}
        shape = doc.shape(e["shape"], f"inputs.{name}.shape") if "shape" in e else ()
        if input_shapes and name in input_shapes:
            shape = tuple(input_shapes[name])
        if math.prod(shape) > MAX_ELEMENTS:
            raise doc.error(node, f"inputs.{name}: shape {list(shape)} has {math.prod(shape):,} elements per point, "
                                  f"more than the limit of {MAX_ELEMENTS:,}")
        sample = _sample(doc, e["sample"], name, shape) if "sample" in e else None
        inputs[name] = InputDecl(name, shape, sample, doc.loc(node))
    return inputs


def _sample(doc, node, name, shape):
    """inputs.NAME.sample: {low, high, center}: center + uniform [low, high) per entry; center is a
    number (default 0) or `identity` (square matrices in the last two axes: deformation gradients)."""
    where = f"inputs.{name}.sample"
    r = doc.mapping(node, where, allowed=("low", "high", "center"), required=("low", "high"))
    center = doc.value(r["center"]) if "center" in r else 0.0
    if center == "identity":
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise doc.error(r["center"], f"{where}.center: identity needs square matrices in the last two axes, "
                                         f"got shape {list(shape)}")
    elif isinstance(center, bool) or not isinstance(center, (int, float)):
        raise doc.error(r["center"], f"{where}.center: a number or identity, got {center!r}")
    else:
        center = float(center)
    return float(doc.value(r["low"])), float(doc.value(r["high"])), center


def _params(doc, node, names, base_dir):
    params = {}
    for name, node in doc.mapping(node or EMPTY, "params").items():
        names.declare(name, node, "param")
        params[name] = _param(doc, name, node, base_dir)
    return params


def _function(doc, name, node):
    where = f"functions.{name}"
    e = doc.mapping(node, where, allowed=("args", "expr", "derivative"), required=("args", "expr"))
    if isinstance(e["args"], yaml.MappingNode):
        amap = doc.mapping(e["args"], f"{where}.args")
        args = tuple(amap)
        shapes = tuple(doc.shape(n, f"{where}.args.{a}") for a, n in amap.items())
    else:
        args = doc.name_list(e["args"], f"{where}.args")
        shapes = (None,) * len(args)
    for a in args:
        if not _is_name(a):
            raise doc.error(e["args"], f"{where}.args: '{a}' is not a valid identifier")
    deriv = None
    if "derivative" in e:
        dnode = e["derivative"]
        items = dnode.value if isinstance(dnode, yaml.SequenceNode) else [dnode]
        deriv = tuple(doc.expr(n, f"{where}.derivative[{i}]") for i, n in enumerate(items))
        if len(deriv) != len(args):
            raise doc.error(dnode, f"{where}.derivative: give one expression per argument "
                                   f"({len(args)}), got {len(deriv)}")
    return FunctionDecl(name, args, shapes, doc.expr(e["expr"], f"{where}.expr"), deriv, doc.loc(node))


def _functions(doc, node, names):
    functions = {}
    for name, node in doc.mapping(node or EMPTY, "functions").items():
        names.declare(name, node, "function")
        functions[name] = _function(doc, name, node)
    return functions


def _lets(doc, node, names):
    lets = {}
    for name, node in doc.mapping(node or EMPTY, "let").items():
        names.declare(name, node, "let")
        lets[name] = _solve(doc, name, node) if isinstance(node, yaml.MappingNode) else doc.expr(node, f"let.{name}")
    return lets


def _solve(doc, name, node):
    """let.NAME: {solve: RESIDUAL, init: EXPR, tol: T, max_iter: N}."""
    where = f"let.{name}"
    m = doc.mapping(node, where, allowed=SOLVE_KEYS, required=("solve",))
    tol = doc.value(m["tol"]) if "tol" in m else SOLVE_TOL
    if isinstance(tol, str):                # YAML reads 1e-12 (no dot) as a string
        try:
            tol = float(tol)
        except ValueError:
            pass
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
        raise doc.error(m["tol"], f"{where}.tol: a tolerance is a number between 0 and 1, got {tol!r}")
    max_iter = doc.value(m["max_iter"]) if "max_iter" in m else SOLVE_MAX_ITER
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or not 1 <= max_iter <= MAX_NEWTON:
        raise doc.error(m["max_iter"], f"{where}.max_iter: an integer from 1 to {MAX_NEWTON}, got {max_iter!r}")
    init = doc.expr(m["init"], f"{where}.init") if "init" in m else None
    return SolveDecl(name, doc.expr(m["solve"], f"{where}.solve"), init, float(tol), max_iter, doc.loc(node))


def _outputs(doc, node):
    outputs = {}
    for name, n in doc.mapping(node, "outputs").items():
        if not _is_name(name):
            raise doc.error(n, f"output name '{name}' is not a valid identifier")
        outputs[name] = doc.expr(n, f"outputs.{name}")
    if not outputs:
        raise doc.error(node, "outputs: the model has no outputs")
    return outputs


def _derivatives(doc, node):
    return {name: doc.expr(n, f"derivatives.{name}") for name, n in doc.mapping(node or EMPTY, "derivatives").items()}


def _model_from_doc(doc, input_shapes=None, sizes=None, size_error=None):
    allowed = ("adgrad", "name", "description", "sizes", "inputs", "params", "functions", "let", "outputs",
               "derivatives", "export")
    top = doc.mapping(doc.root, "model", allowed=allowed, required=("inputs", "outputs"))
    _check_version(doc, top, "model")
    base_dir = os.path.dirname(os.path.abspath(doc.path))
    names = _Names(doc)
    doc.sizes = _sizes(doc, top.get("sizes"), names, sizes or {}, size_error)
    get = lambda k, d: str(doc.value(top[k])) if k in top else d   # noqa: E731
    model = Model(get("name", os.path.splitext(os.path.basename(doc.path))[0]), get("description", ""),
                  doc.path, doc.text, sizes=dict(doc.sizes),
                  inputs=_inputs(doc, top["inputs"], names, input_shapes),
                  params=_params(doc, top.get("params"), names, base_dir),
                  functions=_functions(doc, top.get("functions"), names),
                  lets=_lets(doc, top.get("let"), names),
                  outputs=_outputs(doc, top["outputs"]),
                  derivatives=_derivatives(doc, top.get("derivatives")))
    if "export" not in top:
        return model
    return dataclasses.replace(model, export=_export(doc, top["export"], model))


def _sizes(doc, node, names, overrides, size_error=None):
    """sizes: {NAME: positive integer}: named sizes the shapes of inputs and params may use (a neighbour
    count), each replaceable by `overrides` (a config's sizes:, the API's sizes=) without editing the file;
    size_error(name, message) makes the error for an override the model does not declare."""
    sizes = {}
    for name, n in doc.mapping(node or EMPTY, "sizes").items():
        names.declare(name, n, "size")
        sizes[name] = _size(doc.value(n), lambda message, n=n: doc.error(n, f"sizes.{name}: {message}"))
    for name, value in overrides.items():
        if name not in sizes:
            message = f"the model has no size '{name}' (its sizes: {', '.join(sizes) or 'none'})"
            raise size_error(name, message) if size_error else SpecError(message, doc.path)
        sizes[name] = value
    return sizes


def _size(value, error):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ELEMENTS:
        raise error(f"a size is an integer from 1 to {MAX_ELEMENTS:,}, got {value!r}")
    return value


def load_model_file(path, input_shapes=None, sizes=None, argument_error=None):
    """The model of a file; input_shapes and sizes replace declared ones. argument_error(message) makes the
    error for a size or input the model does not declare (default: a SpecError naming the file)."""
    size_error = None if argument_error is None else \
        (lambda name, message: argument_error(f"sizes={{{name!r}: ...}}: {message}"))
    model = _model_from_doc(_Doc(path, _read(path)), input_shapes, sizes, size_error)
    unknown = [n for n in input_shapes or () if n not in model.inputs]
    if unknown:
        message = f"the model has no input {unknown[0]!r} (its inputs: {', '.join(model.inputs)})"
        raise argument_error(f"input_shapes: {message}") if argument_error else SpecError(message, path)
    return model


# ---- export: (a model's or a config's) -------------------------------------------------------------
def _export(doc, node, model):
    """export: {umat: {...}}: how a native library presents the model (docs/native.md)."""
    e = doc.mapping(node, "export", allowed=("umat",))
    key = next((k for k, _ in node.value if doc.value(k) == "umat"), None)
    umat = _umat(doc, key, e["umat"], model) if "umat" in e else None
    return ExportDecl(umat, doc.loc(node))


def _umat(doc, key, node, model):
    """export.umat (`key` its key's node): checked against the model's names and declared shapes
    here; the shapes of its outputs are checked when the kernel is built (engine/export/umat.py)."""
    where = "export.umat"
    if not isinstance(node, yaml.MappingNode):
        raise doc.error(key, f"{where} must be a mapping")
    e = doc.mapping(node, where, allowed=UMAT_KEYS)
    if "stress" not in e:
        raise doc.error(key, f"{where}: missing required key 'stress'")
    locs = {k: doc.loc(n) for k, n in e.items()}
    given = [k for k in ("strain", "F") if k in e]
    if len(given) != 1:
        raise doc.error(e[given[1]] if given else key,
                        f"{where}: name the input a UMAT fills, the strain (strain:, small strain) or the "
                        f"deformation gradient (F:, finite strain): one of them")
    kin = given[0]
    x = _umat_name(doc, e[kin], f"{where}.{kin}")
    if x not in model.inputs:
        raise doc.error(e[kin], f"{where}.{kin}: '{x}' is not an input of model '{model.name}' "
                                f"(its inputs: {', '.join(model.inputs)})")
    if model.inputs[x].shape != (3, 3):
        what = "the strain" if kin == "strain" else "the deformation gradient"
        raise doc.error(e[kin], f"{where}.{kin}: input '{x}' has shape {list(model.inputs[x].shape)}; {what} of a "
                                f"UMAT is a 3x3 tensor (shape [3, 3])")
    stress = _umat_name(doc, e["stress"], f"{where}.stress")
    energy = next((o for o in model.outputs if stress == derivative_name(o, (x,))), None)
    if stress not in model.outputs and energy is None:
        raise doc.error(e["stress"], f"{where}.stress: '{stress}' is not an output of model '{model.name}', nor the "
                                     f"gradient d<output>_d{x} of one (its outputs: {', '.join(model.outputs)})")
    if stress in model.outputs:
        energy = None
    measure = _umat_measure(doc, e, kin, energy, where)
    state = _umat_state(doc, key, e, model, kin, x, stress, locs)
    props = _umat_props(doc, e, model)
    return UmatDecl(kin, x, stress, energy, measure, state, props, doc.loc(key), locs)


def _umat_state(doc, key, e, model, kin, x, stress, locs):
    """export.umat.state: ((new output, old input), ...); every input but x must be an old one."""
    where = "export.umat"
    state = []
    for out, n in doc.mapping(e.get("state", EMPTY), f"{where}.state").items():
        locs[f"state.{out}"] = doc.loc(n)
        old = _umat_name(doc, n, f"{where}.state.{out}")
        if out not in model.outputs:
            raise doc.error(n, f"{where}.state: '{out}' is not an output of model '{model.name}' "
                               f"(its outputs: {', '.join(model.outputs)})")
        if out == stress:
            raise doc.error(n, f"{where}.state: '{out}' is the stress; a state output is another output")
        if old not in model.inputs or old == x:
            raise doc.error(n, f"{where}.state.{out}: its old value '{old}' is not an input of model '{model.name}' "
                               f"other than the {'strain' if kin == 'strain' else 'deformation gradient'} "
                               f"(its inputs: {', '.join(model.inputs)}); a new state output is paired with the "
                               f"input that holds its value at the start of the increment")
        twice = [o for o, i in state if i == old]
        if twice:
            raise doc.error(n, f"{where}.state.{out}: input '{old}' already holds the old value of '{twice[0]}'")
        state.append((out, old))
    olds = {i for _, i in state}
    for name in model.inputs:
        if name != x and name not in olds:
            raise doc.error(e.get("state", key),
                            f"{where}: input '{name}' of model '{model.name}' is neither the {kin} input nor the "
                            f"old value of a state output; a UMAT gets nothing else per point (pair it with its "
                            f"new value under state:)")
    return tuple(state)


def _umat_props(doc, e, model):
    """export.umat.props: param names, in PROPS's order."""
    where = "export.umat"
    props = []
    if "props" in e:
        names = doc.name_list(e["props"], f"{where}.props") if doc.value(e["props"]) else ()
        for name in names:
            if name not in model.params:
                raise doc.error(e["props"], f"{where}.props: '{name}' is not a param of model '{model.name}' "
                                            f"(its params: {', '.join(model.params) or 'none'})")
            if name in props:
                raise doc.error(e["props"], f"{where}.props: '{name}' is listed twice")
            props.append(name)
    return tuple(props)


def _umat_name(doc, node, where):
    value = doc.value(node) if isinstance(node, yaml.ScalarNode) else None
    if not isinstance(value, str) or not _is_name(value):
        raise doc.error(node, f"{where}: a name of the model, got {value if value is not None else 'a collection'!r}")
    return value


def _umat_measure(doc, e, kin, energy, where):
    """"small" for a small-strain UMAT; a finite-strain one's stress measure (an energy's gradient
    wrt F is the first Piola-Kirchhoff stress)."""
    measure = str(doc.value(e["measure"])) if "measure" in e else None
    if kin == "strain":
        if measure is not None:
            raise doc.error(e["measure"], f"{where}.measure: a measure is for a finite-strain UMAT (F:); a "
                                          f"small-strain one's stress is the stress")
        return "small"
    if measure is not None and measure not in UMAT_MEASURES:
        raise doc.error(e["measure"], f"{where}.measure: '{measure}' is not one of {', '.join(UMAT_MEASURES)}")
    if energy is not None:
        if measure not in (None, "first_piola"):
            raise doc.error(e["measure"], f"{where}.measure: the gradient of an energy wrt F is the first "
                                          f"Piola-Kirchhoff stress (first_piola), not {measure}")
        return "first_piola"
    if measure is None:
        raise doc.error(e["stress"], f"{where}: say which stress the output '{doc.value(e['stress'])}' is: "
                                     f"measure: {' | '.join(UMAT_MEASURES)}")
    return measure


# ---- the run config: one function per section ----------------------------------------------------------
def load_config_file(path):
    doc = _Doc(path, _read(path))
    allowed = ("adgrad", "model", "sizes", "params", "input", "output", "compute", "mode", "engine", "export")
    top = doc.mapping(doc.root, "config", allowed=allowed, required=("model",))
    _check_version(doc, top, "config")
    base_dir = os.path.dirname(os.path.abspath(path))
    locs = {k: doc.loc(n) for k, n in top.items()}
    model = _config_model(doc, top["model"], base_dir, top.get("sizes"))
    return Config(path, doc.text, model,
                  params=_overrides(doc, top.get("params"), model, base_dir),
                  input=_input_section(doc, top.get("input"), model, base_dir, locs),
                  output=_output_section(doc, top.get("output"), base_dir),
                  mode=_mode(doc, top.get("mode")),
                  compute=_compute_section(doc, top.get("compute"), model),
                  engine=_engine_section(doc, top.get("engine")),
                  loc=locs,
                  export=_export(doc, top["export"], model) if "export" in top else None)


def _path(doc, node, where):
    """A file path: a string (or a number, which YAML reads as one: `2024`), not null, empty or a list."""
    value = doc.value(node)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
        raise doc.error(node, f"{where}: a path is a string, got {value!r}")
    return str(value)


def _relative(base_dir, p):
    return os.path.normpath(os.path.join(base_dir, str(p)))


def _config_model(doc, node, base_dir, sizes_node):
    """The config's model, with the config's sizes: (each a size the model declares) in place of its own."""
    sizes, nodes = {}, doc.mapping(sizes_node or EMPTY, "sizes")
    for name, n in nodes.items():
        sizes[name] = _size(doc.value(n), lambda message, n=n: doc.error(n, f"sizes.{name}: {message}"))
    size_error = lambda name, message: doc.error(nodes[name], f"sizes.{name}: {message}")  # noqa: E731
    if isinstance(node, yaml.MappingNode):
        model_doc = _ModelInline(doc, node)
    else:
        path = _relative(base_dir, _path(doc, node, "model"))
        model_doc = _Doc(path, _read(path))
    return _model_from_doc(model_doc, sizes=sizes, size_error=size_error)


def _overrides(doc, node, model, base_dir):
    overrides = {}
    for name, n in doc.mapping(node or EMPTY, "params").items():
        if name not in model.params:
            raise doc.error(n, f"params: '{name}' is not a param of model '{model.name}' "
                               f"(its params: {', '.join(model.params) or 'none'})")
        overrides[name] = _param(doc, name, n, base_dir)
    return overrides


def _input_section(doc, node, model, base_dir, locs):
    datasets = {n: n for n in model.inputs}
    if node is None:
        return InputSection(None, datasets)
    e = doc.mapping(node, "input", allowed=("path", "datasets", "one_based"), required=("path",))
    locs["input.path"] = doc.loc(e["path"])
    for name, n in doc.mapping(e.get("datasets", EMPTY), "input.datasets").items():
        if name not in model.inputs:
            raise doc.error(n, f"input.datasets: '{name}' is not an input of model '{model.name}'")
        datasets[name] = str(doc.value(n))
        locs[f"input.datasets.{name}"] = doc.loc(n)
    one_based = doc.name_list(e["one_based"], "input.one_based") if "one_based" in e else ()
    for name in one_based:      # LAMMPS's atom types 1..n as the species indices 0..n-1 that lookups take
        if name not in model.inputs:
            raise doc.error(e["one_based"], f"input.one_based: '{name}' is not an input of model '{model.name}' "
                                            f"(its inputs: {', '.join(model.inputs)})")
        if one_based.count(name) > 1:
            raise doc.error(e["one_based"], f"input.one_based: '{name}' is named twice")
        datasets[name] = DatasetName(datasets[name], -1.0)
    return InputSection(_relative(base_dir, _path(doc, e["path"], "input.path")), datasets)


def _output_section(doc, node, base_dir):
    if node is None:
        return OutputSection()
    e, default = doc.mapping(node, "output", allowed=("path", "dtype", "compression")), OutputSection()
    path = _relative(base_dir, _path(doc, e["path"], "output.path")) if "path" in e else default.path
    dtype = str(doc.value(e["dtype"])) if "dtype" in e else default.dtype
    if dtype not in ("float64", "float32"):
        raise doc.error(e["dtype"], f"output.dtype: '{dtype}' is not float64 or float32")
    compression = str(doc.value(e["compression"])) if "compression" in e else default.compression
    if compression not in ("none", "gzip", "lzf"):
        raise doc.error(e["compression"], f"output.compression: '{compression}' is not none, gzip or lzf")
    return OutputSection(path, dtype, compression)


def _mode(doc, node):
    mode = str(doc.value(node)) if node is not None else "auto"
    if mode not in MODES:
        raise doc.error(node, f"mode: '{mode}' is not one of {', '.join(MODES)}")
    return mode


def _compute_section(doc, node, model):
    if node is None:
        return ComputeSection(tuple(model.outputs))
    e = doc.mapping(node, "compute", allowed=("values", "derivatives"))
    values, derivs = tuple(model.outputs), ()
    if "values" in e:
        values = doc.name_list(e["values"], "compute.values") if doc.value(e["values"]) else ()
        for v in values:
            if v not in model.outputs:
                raise doc.error(e["values"], f"compute.values: '{v}' is not an output of model '{model.name}' "
                                             f"(its outputs: {', '.join(model.outputs)})")
    if "derivatives" in e:
        dnode = e["derivatives"]
        if not isinstance(dnode, yaml.SequenceNode):
            raise doc.error(dnode, "compute.derivatives must be a list of {of, wrt} mappings")
        derivs = tuple(_derivative_request(doc, n, i, model) for i, n in enumerate(dnode.value))
    return ComputeSection(values, derivs)


def _engine_section(doc, node):
    if node is None:
        return EngineSection()
    e, default = doc.mapping(node, "engine", allowed=("threads", "chunk", "nan", "math", "memory")), EngineSection()
    threads = doc.value(e["threads"]) if "threads" in e else default.threads
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise doc.error(e["threads"], "engine.threads must be a non-negative integer (0 = all cores)")
    chunk = doc.value(e["chunk"]) if "chunk" in e else default.chunk
    if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or not 1 <= chunk <= MAX_CHUNK):
        raise doc.error(e["chunk"], f"engine.chunk must be an integer from 1 to {MAX_CHUNK:,} (points per chunk)")
    nan = str(doc.value(e["nan"])) if "nan" in e else default.nan
    if nan not in ("propagate", "error"):
        raise doc.error(e["nan"], "engine.nan must be 'propagate' or 'error'")
    math = str(doc.value(e["math"])) if "math" in e else default.math
    if math not in ("vector", "libm"):
        raise doc.error(e["math"], "engine.math must be 'vector' or 'libm'")
    memory = default.memory
    if "memory" in e:
        try:
            memory = parse_bytes(doc.value(e["memory"]))
        except ValueError as exc:
            raise doc.error(e["memory"], f"engine.memory: {exc}") from None
    return EngineSection(threads, chunk, nan, math, memory)


UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text):
    """Bytes from an integer or a size such as "512 MiB", "2GiB" or "1.5 GB"; at least MIN_MEMORY."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ValueError(f"must be a size in bytes such as 2GiB or 512 MiB, not {text!r}")
    number, unit = (text, "") if isinstance(text, int) else _split_size(text)
    value = int(number * UNITS[unit])
    if not MIN_MEMORY <= value <= 1 << 50:
        raise ValueError(f"must be from 1 MiB to 1 PiB, not {text!r}")
    return value


def _split_size(text):
    s = text.strip().lower()
    digits = s.rstrip("kmgtib ")
    unit = s[len(digits):].strip()
    try:
        number = float(digits)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or unit not in UNITS:
        raise ValueError(f"must be a size in bytes such as 2GiB or 512 MiB, not {text!r}")
    return number, unit


class _ModelInline(_Doc):
    """A model written inline in a config: same document, rooted at the `model:` mapping."""

    def __init__(self, doc, node):
        self.path, self.text, self.root, self.sizes = doc.path, doc.text, node, {}


def _derivative_request(doc, node, i, model):
    where = f"compute.derivatives[{i}]"
    e = doc.mapping(node, where, allowed=("of", "wrt", "reduce", "direction", "cotangent", "mode"),
                    required=("of", "wrt"))
    of = str(doc.value(e["of"]))
    if of not in model.outputs:
        raise doc.error(e["of"], f"{where}.of: '{of}' is not an output of model '{model.name}' "
                                 f"(its outputs: {', '.join(model.outputs)})")
    wrt = doc.name_list(e["wrt"], f"{where}.wrt")
    if len(wrt) not in (1, 2):
        raise doc.error(e["wrt"], f"{where}.wrt: give one name (first derivative) or two (second derivative)")
    for w in wrt:
        if w not in model.inputs and w not in model.params:
            raise doc.error(e["wrt"], f"{where}.wrt: '{w}' is not an input or param of model '{model.name}'")
    opt = {k: str(doc.value(e[k])) for k in ("reduce", "direction", "cotangent", "mode") if k in e}
    if "reduce" in opt and opt["reduce"] != "sum":
        raise doc.error(e["reduce"], f"{where}.reduce: only 'sum' is supported")
    if "mode" in opt and opt["mode"] not in MODES:
        raise doc.error(e["mode"], f"{where}.mode: '{opt['mode']}' is not one of {', '.join(MODES)}")
    return DerivativeRequest(of, wrt, loc=doc.loc(node), **opt)
