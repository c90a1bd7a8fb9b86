"""Golden tests of the code generator's stages for the shipped models: the fusion schedule (which
equations share a loop nest, tests/golden/<name>.schedule.txt) and the whole generated kernel module
(tests/golden/<name>.source.txt). After an intended change of scheduling or emission, regenerate with
ADGRAD_UPDATE_GOLDEN=1 pytest tests/test_codegen_golden.py and review the diff."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from adgrad.engine import compile_model
from adgrad.engine.codegen.schedule import format_schedule
from adgrad.engine.model import build
from adgrad.engine.spec import load_config_file

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ADGRAD_UPDATE_GOLDEN") == "1"
CONFIGS = {"eam": "configs/eam.yaml", "neohookean": "configs/neohookean.yaml",
           "attention": "configs/attention.yaml", "attention_einsum": "configs/attention_einsum.yaml",
           "cu_eam": "configs/cu_eam.yaml"}


@pytest.fixture(scope="module")
def kernels():
    cache = {}

    def get(name):
        if name not in cache:
            config = load_config_file(str(ROOT / CONFIGS[name]))
            model = build(config.model).with_params(config.params)
            cache[name] = compile_model(model, config.compute.derivatives, mode=config.mode, values=list(config.compute.values))
        return cache[name]
    return get


def check_golden(path, got, what):
    if UPDATE:
        path.write_text(got)
        return
    assert path.exists(), f"missing {path}; create it with ADGRAD_UPDATE_GOLDEN=1"
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), f"golden/{path.name}", "now"))
        pytest.fail(f"{what} differs from {path} (regenerate with ADGRAD_UPDATE_GOLDEN=1 if intended):\n{diff}")


@pytest.mark.parametrize("name", CONFIGS)
def test_schedule_golden(kernels, name):
    k = kernels(name)
    check_golden(GOLDEN / f"{name}.schedule.txt", format_schedule(k.code_graph) + "\n", f"the schedule of {name}")


@pytest.mark.parametrize("name", CONFIGS)
def test_source_golden(kernels, name):
    check_golden(GOLDEN / f"{name}.source.txt", kernels(name).source, f"the kernel source of {name}")
