"""Model and config files: YAML -> frozen dataclasses that remember where each value was written.

PyYAML's compose step keeps every node's line and column, so any later error (an unknown name in an
expression, a shape mismatch) can point at the file, line and column of the expression.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import yaml
from yaml.constructor import SafeConstructor

from .errors import SpecError


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
class InputDecl:
    name: str
    shape: tuple
    sample: tuple | None        # (low, high) or None
    loc: Loc


@dataclass(frozen=True)
class ParamDecl:
    name: str
    value: object               # a nested list of numbers, an Expr, or an H5Ref
    loc: Loc


@dataclass(frozen=True)
class H5Ref:
    file: str                   # absolute path
    dataset: str


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
    lets: dict                  # name -> Expr, in order
    outputs: dict               # name -> Expr
    derivatives: dict           # "d{of}_d{wrt}" -> Expr (hand-written, used by mode: manual)


@dataclass(frozen=True)
class DerivativeRequest:
    of: str
    wrt: tuple                  # one name (first order) or two (second order)
    reduce: str | None = None
    direction: str | None = None
    cotangent: str | None = None
    mode: str | None = None
    loc: Loc | None = None

    @property
    def name(self):
        base = f"d{self.of}_d{self.wrt[0]}" if len(self.wrt) == 1 else f"d2{self.of}_d{self.wrt[0]}_d{self.wrt[1]}"
        suffix = "_sum" if self.reduce else "_jvp" if self.direction else "_vjp" if self.cotangent else ""
        return base + suffix


@dataclass(frozen=True)
class Config:
    path: str
    text: str
    model: Model
    param_overrides: dict       # name -> ParamDecl
    input_path: str | None
    datasets: dict              # model input -> dataset name
    output_path: str | None
    dtype: str
    compression: str
    values: tuple
    derivatives: tuple          # DerivativeRequest
    mode: str
    threads: int
    chunk: int
    nan: str
    loc: dict = field(default_factory=dict)   # section name -> Loc, for data errors


MODES = ("auto", "forward", "reverse", "manual")


class _Doc:
    """A composed YAML document: converts nodes to Python values and errors to SpecErrors."""

    def __init__(self, path, text):
        self.path, self.text = path, text
        try:
            self.root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            raise SpecError(f"malformed YAML: {exc.problem or exc.context}", path,
                            mark.line + 1 if mark else None, mark.column + 1 if mark else None) from None
        if self.root is None:
            raise SpecError("the file is empty", path, 1, 1)

    def loc(self, node):
        return Loc(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node, message):
        return self.loc(node).error(message)

    def value(self, node):
        try:
            return SafeConstructor().construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(node, f"cannot read value: {exc}") from None

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
        if isinstance(val, int) and not isinstance(val, bool):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in val):
            raise self.error(node, f"{where}: a shape is a list of positive integers, got {val!r}")
        return tuple(val)

    def name_list(self, node, where):
        val = self.value(node)
        if isinstance(val, str):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise self.error(node, f"{where} must be a name or a list of names")
        return tuple(val)


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise SpecError(f"cannot read file: {exc.strerror}", path) from None


def _check_version(doc, entries, where):
    if "adgrad" in entries and doc.value(entries["adgrad"]) != 1:
        raise doc.error(entries["adgrad"], f"{where}: unsupported format version (this adgrad reads 'adgrad: 1')")


def _param(doc, name, node, base_dir):
    where = f"params.{name}"
    loc = doc.loc(node)
    if isinstance(node, yaml.MappingNode):
        entries = doc.mapping(node, where, allowed=("file", "dataset"), required=("file", "dataset"))
        file = str(doc.value(entries["file"]))
        return ParamDecl(name, H5Ref(os.path.normpath(os.path.join(base_dir, file)), str(doc.value(entries["dataset"]))), loc)
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":str"):
        return ParamDecl(name, doc.expr(node, where), loc)
    val = doc.value(node)

    def numeric(v):
        if isinstance(v, list):
            return all(numeric(x) for x in v)
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if not numeric(val):
        raise doc.error(node, f"{where}: a param is a number, a nested list of numbers, a constant expression or {{file, dataset}}")
    return ParamDecl(name, val, loc)


def _is_name(s):
    return s.isidentifier()


def _model_from_doc(doc, input_shapes=None):
    allowed = ("adgrad", "name", "description", "inputs", "params", "functions", "let", "outputs", "derivatives")
    top = doc.mapping(doc.root, "model", allowed=allowed, required=("inputs", "outputs"))
    _check_version(doc, top, "model")
    base_dir = os.path.dirname(os.path.abspath(doc.path))
    seen = {}

    def declare(name, node, kind):
        if not _is_name(name):
            raise doc.error(node, f"{kind} name '{name}' is not a valid identifier")
        if name in seen:
            raise doc.error(node, f"{kind} '{name}' is already defined as {seen[name]}")
        seen[name] = kind

    inputs = {}
    for name, node in doc.mapping(top["inputs"], "inputs").items():
        declare(name, node, "input")
        if isinstance(node, yaml.MappingNode):
            e = doc.mapping(node, f"inputs.{name}", allowed=("shape", "sample"))
        else:
            e = {"shape": node}
        shape = doc.shape(e["shape"], f"inputs.{name}.shape") if "shape" in e else ()
        if input_shapes and name in input_shapes:
            shape = tuple(input_shapes[name])
        sample = None
        if "sample" in e:
            s = doc.mapping(e["sample"], f"inputs.{name}.sample", allowed=("low", "high"), required=("low", "high"))
            sample = (float(doc.value(s["low"])), float(doc.value(s["high"])))
        inputs[name] = InputDecl(name, shape, sample, doc.loc(node))
    params = {}
    for name, node in doc.mapping(top.get("params") or yaml.MappingNode("tag:yaml.org,2002:map", []), "params").items():
        declare(name, node, "param")
        params[name] = _param(doc, name, node, base_dir)
    functions = {}
    if "functions" in top:
        for name, node in doc.mapping(top["functions"], "functions").items():
            declare(name, node, "function")
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
            functions[name] = FunctionDecl(name, args, shapes, doc.expr(e["expr"], f"{where}.expr"), deriv, doc.loc(node))
    lets = {}
    if "let" in top:
        for name, node in doc.mapping(top["let"], "let").items():
            declare(name, node, "let")
            lets[name] = doc.expr(node, f"let.{name}")
    outputs = {}
    for name, node in doc.mapping(top["outputs"], "outputs").items():
        if not _is_name(name):
            raise doc.error(node, f"output name '{name}' is not a valid identifier")
        outputs[name] = doc.expr(node, f"outputs.{name}")
    if not outputs:
        raise doc.error(top["outputs"], "outputs: the model has no outputs")
    derivatives = {}
    if "derivatives" in top:
        for name, node in doc.mapping(top["derivatives"], "derivatives").items():
            derivatives[name] = doc.expr(node, f"derivatives.{name}")
    get = lambda k, d: str(doc.value(top[k])) if k in top else d
    return Model(get("name", os.path.splitext(os.path.basename(doc.path))[0]), get("description", ""),
                 doc.path, doc.text, inputs, params, functions, lets, outputs, derivatives)


def load_model_file(path, input_shapes=None):
    return _model_from_doc(_Doc(path, _read(path)), input_shapes)


def load_config_file(path):
    doc = _Doc(path, _read(path))
    allowed = ("adgrad", "model", "params", "input", "output", "compute", "mode", "engine")
    top = doc.mapping(doc.root, "config", allowed=allowed, required=("model",))
    _check_version(doc, top, "config")
    base_dir = os.path.dirname(os.path.abspath(path))
    rel = lambda p: os.path.normpath(os.path.join(base_dir, str(p)))
    locs = {k: doc.loc(n) for k, n in top.items()}

    mnode = top["model"]
    if isinstance(mnode, yaml.MappingNode):
        model = _model_from_doc(_ModelInline(doc, mnode))
    else:
        model = load_model_file(rel(doc.value(mnode)))

    overrides = {}
    if "params" in top:
        for name, node in doc.mapping(top["params"], "params").items():
            if name not in model.params:
                raise doc.error(node, f"params: '{name}' is not a param of model '{model.name}' "
                                      f"(its params: {', '.join(model.params) or 'none'})")
            overrides[name] = _param(doc, name, node, base_dir)

    input_path, datasets = None, {n: n for n in model.inputs}
    if "input" in top:
        e = doc.mapping(top["input"], "input", allowed=("path", "datasets"), required=("path",))
        input_path = rel(doc.value(e["path"]))
        locs["input.path"] = doc.loc(e["path"])
        if "datasets" in e:
            for name, node in doc.mapping(e["datasets"], "input.datasets").items():
                if name not in model.inputs:
                    raise doc.error(node, f"input.datasets: '{name}' is not an input of model '{model.name}'")
                datasets[name] = str(doc.value(node))
                locs[f"input.datasets.{name}"] = doc.loc(node)

    output_path, dtype, compression = None, "float64", "none"
    if "output" in top:
        e = doc.mapping(top["output"], "output", allowed=("path", "dtype", "compression"))
        if "path" in e:
            output_path = rel(doc.value(e["path"]))
        dtype = str(doc.value(e["dtype"])) if "dtype" in e else dtype
        if dtype not in ("float64", "float32"):
            raise doc.error(e["dtype"], f"output.dtype: '{dtype}' is not float64 or float32")
        compression = str(doc.value(e["compression"])) if "compression" in e else compression
        if compression not in ("none", "gzip", "lzf"):
            raise doc.error(e["compression"], f"output.compression: '{compression}' is not none, gzip or lzf")

    mode = str(doc.value(top["mode"])) if "mode" in top else "auto"
    if mode not in MODES:
        raise doc.error(top["mode"], f"mode: '{mode}' is not one of {', '.join(MODES)}")

    values, derivs = tuple(model.outputs), ()
    if "compute" in top:
        e = doc.mapping(top["compute"], "compute", allowed=("values", "derivatives"))
        if "values" in e:
            values = doc.name_list(e["values"], "compute.values") if doc.value(e["values"]) else ()
            for v, n in zip(values, [e["values"]] * len(values)):
                if v not in model.outputs:
                    raise doc.error(n, f"compute.values: '{v}' is not an output of model '{model.name}' "
                                       f"(its outputs: {', '.join(model.outputs)})")
        if "derivatives" in e:
            dnode = e["derivatives"]
            if not isinstance(dnode, yaml.SequenceNode):
                raise doc.error(dnode, "compute.derivatives must be a list of {of, wrt} mappings")
            derivs = tuple(_derivative_request(doc, n, i, model) for i, n in enumerate(dnode.value))

    threads, chunk, nan = 0, 65536, "propagate"
    if "engine" in top:
        e = doc.mapping(top["engine"], "engine", allowed=("threads", "chunk", "nan"))
        if "threads" in e:
            threads = doc.value(e["threads"])
            if not isinstance(threads, int) or threads < 0:
                raise doc.error(e["threads"], "engine.threads must be a non-negative integer (0 = all cores)")
        if "chunk" in e:
            chunk = doc.value(e["chunk"])
            if not isinstance(chunk, int) or chunk < 1:
                raise doc.error(e["chunk"], "engine.chunk must be a positive integer")
        if "nan" in e:
            nan = str(doc.value(e["nan"]))
            if nan not in ("propagate", "error"):
                raise doc.error(e["nan"], "engine.nan must be 'propagate' or 'error'")
    return Config(path, doc.text, model, overrides, input_path, datasets, output_path, dtype, compression,
                  values, derivs, mode, threads, chunk, nan, locs)


class _ModelInline(_Doc):
    """A model written inline in a config: same document, rooted at the `model:` mapping."""

    def __init__(self, doc, node):
        self.path, self.text, self.root = doc.path, doc.text, node


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
