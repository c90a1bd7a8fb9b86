"""`adgrad bench`: a row per kernel variant and mode with sane ns/point and points/s, compile times
cold and cached, manual mode only where the model has hand-written derivatives."""
from __future__ import annotations

import math
import re

from click.testing import CliRunner

from adgrad.cli.main import cli

MODEL = """\
adgrad: 1
name: ring
inputs:
  x: {shape: [4], sample: {low: 0.5, high: 1.5}}
params:
  a: 2.0
outputs:
  E: a * sum(log(x))
derivatives:
  dE_dx: a / x
"""

CONFIG = """\
adgrad: 1
model: model.yaml
compute:
  derivatives:
    - {of: E, wrt: x}
    - {of: E, wrt: a, reduce: sum}
engine:
  threads: 1
"""

ROW = re.compile(r"^(values.*?)\s{2,}(\S.*?)\s{2,}([\d,.]+)\s+([\d,]+)$")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def rows(output):
    return {m.group(1): (m.group(2), float(m.group(3).replace(",", "")), float(m.group(4).replace(",", "")))
            for m in map(ROW.match, output.splitlines()) if m}


def test_config_rows_numbers_and_compile_times(tmp_path):
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    res = invoke("bench", tmp_path / "cfg.yaml", "--points", 3000, "--repeat", 3)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("model ring: 3000 sampled points, 1 thread(s), median of 3, compute only, math: vector\n")
    table = rows(out)
    assert list(table) == ["values only", "values + derivatives (auto)", "values + derivatives, forward",
                           "values + derivatives, reverse", "values + derivatives, manual"]
    assert table["values only"][0] == "-"
    assert table["values + derivatives, manual"][0] == "dE_dx: manual, dE_da_sum: forward"
    assert table["values + derivatives, reverse"][0].startswith("dE_dx: reverse")
    for label, (_, ns, rate) in table.items():
        assert 0 < ns < 1e6 and math.isclose(ns * rate, 1e9, rel_tol=0.01), (label, ns, rate)
    cold, cached = map(float, re.search(r"compile: ([\d.]+) s cold \(empty caches\), ([\d.]+) s cached", out).groups())
    assert 0 < cached < cold < 120


def test_model_without_manual_rule_and_errors(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL.split("derivatives:")[0])
    res = invoke("bench", tmp_path / "m.yaml", "--points", 100, "--repeat", 1, "--threads", 2,
                 "--no-compile-time")
    assert res.exit_code == 0, res.output
    assert list(rows(res.stdout)) == ["values only", "values + derivatives (auto)",
                                      "values + derivatives, forward", "values + derivatives, reverse"]
    assert "compile:" not in res.stdout and "2 thread(s)" in res.stdout
    (tmp_path / "bad.yaml").write_text("adgrad: 1\nmodel: m.yaml\nmode: sideways\n")
    res = invoke("bench", tmp_path / "bad.yaml")
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {tmp_path / 'bad.yaml'}:3:7: mode: 'sideways'")


def test_help():
    text = " ".join(invoke("bench", "--help").output.split())
    for words in ("Time the kernels of CONFIG", "ns/point", "--points", "--repeat", "--threads", "--seed",
                  "--no-compile-time"):
        assert words in text


def test_bench_and_check_compile_with_the_configs_math(tmp_path, monkeypatch):
    """engine.math: libm reaches every kernel bench and check compile (they time and check what a run of
    the config computes), and bench's header names it."""
    from adgrad.engine.tools import bench as bench_engine, check as check_engine
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "cfg.yaml").write_text(CONFIG + "  math: libm\n")
    seen = []
    for module in (bench_engine, check_engine):
        real = module.compile_model
        monkeypatch.setattr(module, "compile_model",
                            lambda *a, real=real, **k: seen.append(k.get("math")) or real(*a, **k))
    res = invoke("bench", tmp_path / "cfg.yaml", "--points", 200, "--repeat", 1, "--no-compile-time")
    assert res.exit_code == 0, res.output
    assert ", math: libm\n" in res.stdout.splitlines()[0] + "\n"
    res = invoke("check", tmp_path / "cfg.yaml", "--points", 4)
    assert res.exit_code == 0, res.output
    assert len(seen) >= 6 and set(seen) == {"libm"}
