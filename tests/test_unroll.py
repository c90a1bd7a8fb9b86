"""The unroll pass: small loops become straight-line code, workspace slots become locals only when
every access is at a constant offset, and long vectors keep their loops."""
from adgrad.engine.codegen import unroll as U


def test_small_loops_unroll_and_workspace_becomes_locals():
    lines = [
        "    for i0 in range(2):",
        "        for i1 in range(3):",
        "            # %1: f64[2,3] = mul(x, y)",
        "            v1 = (in_x[i0*3 + i1] * in_y[i1])",
        "            work[4 + i0*3 + i1] = v1",
        "    out_E[0] = work[4] + work[9]",
    ]
    out = U.unroll(lines)
    code = [line for line in out if not line.lstrip().startswith("#")]
    assert "    v1 = (in_x[5] * in_y[2])" in code
    assert "    w9 = v1" in code and "    out_E[0] = w4 + w9" in code
    assert sum(line.lstrip().startswith("#") for line in out) == 1     # the IR comment once
    assert not any("for " in line for line in out)


def test_long_vectors_keep_their_loop_and_the_workspace():
    lines = [
        "    for i0 in range(100):",
        "        work[i0] = in_x[i0]",
        "    for f0 in range(3):",
        "        work[100 + f0] = 0.0",
    ]
    out = U.unroll(lines)
    assert out[0] == "    for i0 in range(100):"
    assert "    work[101] = 0.0" in out and not any(line.strip().startswith("w1") for line in out)


def test_negative_strides_fold():
    out = U.unroll(["    for i0 in range(3):", "        v2 = in_x[2 + i0*-1]"])
    assert out == ["    v2 = in_x[2]", "    v2 = in_x[1]", "    v2 = in_x[0]"]


def test_a_kernel_too_long_once_unrolled_keeps_its_loops(monkeypatch):
    monkeypatch.setattr(U, "MAX_KERNEL", 5)
    lines = ["    for i0 in range(8):", "        v1 = in_x[i0]"]
    assert U.unroll(lines) == lines
