"""Countdown (TinyZero's task): reach `target` with + - * / and parentheses, using each of the
given `numbers` at most once. The expression is checked on its syntax tree and evaluated with
exact fractions; nothing is ever passed to `eval()`.
"""

from __future__ import annotations

import ast
import operator
from collections import Counter
from fractions import Fraction
from typing import Any, Mapping, Sequence

from rlvr.rewards.base import bounded
from rlvr.rewards.format import final_answer

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
MAX_EXPRESSION_CHARS = 200


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, used), _evaluate(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError("division by zero")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    raise ValueError(f"not allowed in a countdown expression: {ast.dump(node)[:60]}")


def evaluate_countdown(expression: str, numbers: Sequence[int]) -> Fraction | None:
    """Exact value of `expression`, or None if it is malformed, uses another operation, or uses a
    number more often than `numbers` provides it."""
    expression = expression.strip()
    if "=" in expression:  # "3*4+1 = 13": keep the left side
        expression = expression.split("=")[0]
    if not expression or len(expression) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval")
        used: list[int] = []
        value = _evaluate(tree.body, used)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
    return None if Counter(used) - Counter(numbers) else value


def countdown_equal(expression: str | None, numbers: Sequence[int], target: int) -> bool:
    if expression is None:
        return False
    value = evaluate_countdown(expression, numbers)
    return value is not None and value == target


@bounded
class CountdownReward:
    """1.0 when the stated expression reaches the target; `format_score` (TinyZero: 0.1) when an
    expression is stated but wrong; 0.0 when none is. Needs fields `numbers` and `target`."""

    __name__ = "countdown"

    def __init__(self, format_score: float = 0.0) -> None:
        self.format_score = format_score

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> float:
        expression = final_answer(prompt, completion)
        if expression is None:
            return 0.0
        ok = countdown_equal(expression, list(example["numbers"]), int(example["target"]))
        return 1.0 if ok else self.format_score
