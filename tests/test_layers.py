"""The architecture, checked: imports go one way through the layers, there is no import cycle, the
engine never imports click, and no function in engine/ is longer than about 60 lines without saying
why (a comment starting with `# long:` in its first lines).

    (cli | adapters) -> api -> (job | tools) -> (storage | compile) -> kernel -> codegen -> model -> (opt | ad) -> ir
        -> spec -> numeric -> errors

A module may import from its own layer and from layers below it; layers side by side (job and tools,
storage and compile, opt and ad) do not import each other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# top to bottom; a tuple is layers side by side. Each layer: its name and the modules (prefixes) in it.
LAYERS = [
    [("cli", ["cli"]), ("adapters", ["adapters"])],
    [("api", ["engine.api", "engine"])],
    [("job", ["engine.job"]), ("tools", ["engine.tools"]), ("export", ["engine.export"])],
    [("storage", ["engine.store"]), ("compile", ["engine.compile"])],
    [("kernel", ["engine.kernel", "engine.arguments"])],
    [("codegen", ["engine.codegen"])],
    [("model", ["engine.model", "engine.solve"])],
    [("opt", ["engine.opt"]), ("ad", ["engine.ad"])],
    [("ir", ["engine.ir"])],
    [("spec", ["engine.spec", "engine.parse"])],
    [("potentials", ["engine.potentials"])],
    [("numeric", ["engine.numeric"])],
    [("errors", ["engine.errors", "engine.version", "engine.limits"])],
]
ADAPTERS = ("ase", "felupe")       # packages adgrad.<name> in adapters/<name> (pyproject.toml)
RANK = {name: rank for rank, row in enumerate(LAYERS) for name, _ in row}
PREFIXES = sorted(((p, name) for row in LAYERS for name, ps in row for p in ps), key=lambda t: -len(t[0]))
LONG = 60


def modules():
    """{module name relative to adgrad (e.g. 'engine.ir.core'): path} of every source file."""
    out = {}
    for top in ("cli", "engine", "adapters"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def layer_of(module):
    for prefix, name in PREFIXES:
        if module == prefix or (prefix != "engine" and module.startswith(prefix + ".")):
            return name
    return None


def imports(module, path):
    """(line, imported adgrad module) for every import in the file, also inside functions."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] if node.module else [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("adgrad."):
                name = name[len("adgrad."):]
                if name.split(".")[0] in ADAPTERS:          # adgrad.ase is adapters/ase
                    name = "adapters." + name
            if name.split(".")[0] in ("cli", "engine", "adapters") or name == "click":
                found.append((node.lineno, name))
    return found


MODULES = modules()


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if layer_of(m) is None]
    assert not missing, f"modules outside every layer (add them to LAYERS): {missing}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down(module):
    here = layer_of(module)
    bad = []
    for line, target in imports(module, MODULES[module]):
        if target == "click":
            if module.startswith("engine"):
                bad.append(f"line {line}: the engine imports click")
            continue
        there = layer_of(target)
        if there is None or there == here:
            continue
        if RANK[there] <= RANK[here]:
            bad.append(f"line {line}: {module} ({here}) imports {target} ({there})")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    known = set(MODULES)

    def resolve(name):          # `from pkg import mod` names a submodule, else the module itself
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None
    graph = {m: {resolve(t) for _, t in imports(m, p) if t != "click"} - {None, m} for m, p in MODULES.items()}
    # a package importing its own submodules (to register them) is not a cycle back from them
    state, cycle = {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph[m]):
            if t.startswith(m + "."):
                continue
            if state.get(t) == "open":
                cycle.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycle, f"import cycles: {cycle}"


def long_functions():
    out = []
    for module, path in MODULES.items():
        if not module.startswith("engine"):
            continue
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                head = lines[node.lineno - 1: node.lineno + 4]
                if n > LONG and not any("# long:" in ln for ln in head):
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_long_functions_without_a_reason():
    assert not long_functions(), "functions over ~60 lines (split them, or say why with '# long:'):\n" + \
        "\n".join(long_functions())


def cached_functions(path):
    """Line numbers of the functions decorated with cache=True (numba's disk cache)."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and any(k.arg == "cache" and getattr(k.value, "value", None) is True
                                                for k in d.keywords) for d in node.decorator_list)]


@pytest.mark.parametrize("module", sorted(m for m, p in MODULES.items() if cached_functions(p)))
def test_cached_functions_get_adgrads_cache(module):
    """A module with cache=True functions imports engine/numeric/cache.py (or codegen/load.py, which does)
    before them: a process may import any module first, and a function decorated before the hook is in
    place is cached beside the installed sources, which may be read-only."""
    first = min(cached_functions(MODULES[module]))
    hooks = [line for line, name in imports(module, MODULES[module])
             if name in ("engine.numeric.cache", "engine.codegen.load") and line < first]
    assert hooks, f"{module}: import engine/numeric/cache.py before line {first}"
