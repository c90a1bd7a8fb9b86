"""The expression language is data: only whitelisted syntax parses, and every rejection points at
the offending spot with a caret."""
import pytest

from adgrad.engine.errors import SpecError
from adgrad.engine.parse import parse
from adgrad.engine.spec import Expr


def expr(text):
    return Expr(text, "model.yaml", 7, 6, "outputs.E")


@pytest.mark.parametrize("text, message, caret", [
    ("x and y", "use & and |", "^^^^^^^"),
    ("lambda: 1", "lambdas are not part", "^^^^^^^^^"),
    ("a if c else b", "use where(cond, a, b)", "^^^^^^^^^^^^^"),
    ("x % 2", "% operator", None),
    ("[i for i in x]", "unsupported syntax (ListComp)", "^^^^^^^^^^^^^^"),
    ("{'a': 1}", "unsupported syntax (Dict)", "^^^^^^^^"),
    ("exp(x) + (", "syntax error", None),
    ("x + True", "unsupported constant True", "    ^^^^"),
])
def test_rejected_syntax_names_the_spot(text, message, caret):
    with pytest.raises(SpecError) as info:
        parse(expr(text))
    err = str(info.value)
    assert err.startswith("model.yaml:7:6: outputs.E: ")
    assert message in err
    lines = err.splitlines()
    assert lines[1] == "    " + text
    if caret is not None:
        assert lines[2] == "    " + caret


def test_no_eval_of_dunder_tricks():
    # attribute access other than .T is rejected by the lowering, never evaluated
    tree = parse(expr("x.__class__"))
    assert tree is not None   # parses as syntax; lower() rejects the attribute (see test below)


def test_lowering_rejects_attributes(tmp_path):
    from adgrad.engine import load_model
    p = tmp_path / "m.yaml"
    p.write_text("inputs:\n  x: {shape: [3]}\noutputs:\n  E: sum(x.__class__)\n")
    with pytest.raises(SpecError) as info:
        load_model(p)
    err = str(info.value)
    assert f"{p}:4:6: outputs.E: unsupported attribute '.__class__' (only .T)" in err
    assert err.splitlines()[-1] == "        " + "^" * len("x.__class__")


@pytest.mark.parametrize("body, message", [
    ("sum(y)", "unknown name 'y'"),
    ("foo(x)", "unknown function 'foo'"),
    ("x + ones(4)", "add: shapes (3,) and (4,) do not broadcast"),
    ("x[3]", "index 3 is out of bounds for axis 0 with size 3"),
    ("x[0, 1]", "too many indices (2) for an array of shape (3,)"),
    ("sum(x, axis=1)", "axis 1 is out of range for an array of rank 1"),
    ("where(x, x, 0)", "where: the first argument must be a condition"),
    ("x > 0", "expected"),
])
def test_lowering_errors(tmp_path, body, message):
    from adgrad.engine import load_model
    p = tmp_path / "m.yaml"
    p.write_text(f"inputs:\n  x: {{shape: [3]}}\noutputs:\n  E: {body}\n")
    if message == "expected":
        load_model(p)   # a condition as an output is allowed at load time (it is a value of dtype bool)
        return
    with pytest.raises(SpecError) as info:
        load_model(p)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{p}:4:6: outputs.E: ")
