"""Expression strings -> a checked Python `ast` tree. Nothing here (or anywhere) evaluates user text:
`ast.parse` only builds a tree, and every node type outside the whitelist is rejected with a caret."""
from __future__ import annotations

import ast
import math

from .spec import Expr

ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Constant,
    ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Attribute, ast.keyword, ast.Load,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.MatMult, ast.USub, ast.UAdd, ast.Invert,
    ast.BitAnd, ast.BitOr, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq,
)

HINTS = {
    ast.BoolOp: "use & and | (with parentheses) to combine conditions, not 'and'/'or'",
    ast.Lambda: "lambdas are not part of the model language; declare a function under functions:",
    ast.IfExp: "use where(cond, a, b) instead of 'a if cond else b'",
    ast.Mod: "the % operator is not supported",
    ast.FloorDiv: "the // operator is not supported",
}


TOO_DEEP = ("the expression is nested too deeply (a limit of Python's parser: a sum written out with more than "
            "about two thousand terms, or thousands of nested parentheses or signs); split it into let: entries, "
            "or use sum(...) over an array")


def parse(expr: Expr) -> ast.Expression:
    """Parse `expr.text` as one Python expression and reject any construct outside the language."""
    text = expr.text
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise expr.error(f"syntax error: {exc.msg}", col=col) from None
    except (RecursionError, MemoryError):
        raise expr.error(TOO_DEEP, col=0, length=1) from None
    lead = len(text) - len(text.lstrip())
    for node in ast.walk(tree):
        if not isinstance(node, ALLOWED):
            hint = next((h for t, h in HINTS.items() if isinstance(node, t)), None)
            what = type(node).__name__
            msg = hint or f"unsupported syntax ({what})"
            col, length = span(node, lead)
            raise expr.error(msg, col=col, length=length)
        if isinstance(node, ast.Constant) and not (node.value is None or isinstance(node.value, (int, float, str))) or \
                isinstance(node, ast.Constant) and isinstance(node.value, bool):
            col, length = span(node, lead)
            raise expr.error(f"unsupported constant {node.value!r}", col=col, length=length)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not _finite(node.value):
            col, length = span(node, lead)
            raise expr.error("this number is beyond float64's range (it would be infinity)", col=col, length=length)
    tree.lead = lead
    return tree


def _finite(number):
    """Whether a number written in an expression is a float64 (1e400 or 400 digits would be infinity)."""
    try:
        return math.isfinite(float(number))
    except OverflowError:
        return False


def span(node, lead=0):
    """Column and length of a node in the original expression text (for the caret)."""
    col = getattr(node, "col_offset", 0)
    end = getattr(node, "end_col_offset", None)
    length = (end - col) if end is not None and getattr(node, "end_lineno", 1) == getattr(node, "lineno", 1) else 1
    return col + lead, length
