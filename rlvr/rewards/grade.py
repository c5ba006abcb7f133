"""Grade assert tests outside the sandbox, so that no verdict comes from untrusted code.

A test such as `assert sorted(f([3, 1])) == [1, 3]` is split into the parts that need the program
(`f([3, 1])`, evaluated in the sandbox, one fresh interpreter per test) and a check that needs only
their values (`sorted(_v0) == [1, 3]`, evaluated on plain data by `verdicts`). The expected side of a test
never enters the sandbox, and a value comes back as a literal of exact builtin types, so an object
that claims to equal everything, a patched `exec`, `compile` or `repr`, forged output lines or an
early exit can at most send a value, never a verdict. A part is lifted into the sandbox when it
uses a name other than a few plain builtins and `math`; comparisons, boolean and arithmetic
operators and calls of those builtins stay out of it.
The checks run in a short-lived interpreter of their own (this file, run as a script: stdlib only) under
RLIMIT_CPU, RLIMIT_AS and a wall-clock timeout, since a value is the program's choice: `10**15` makes
`sum(range(_v0))` or `[0] * _v0` a C loop or an allocation that neither a signal nor a thread of the trainer
could stop.
Residual: a test with no program-free side (`assert f(1) == f(2) - 1`, `assert all(...)` over the
program's results) is only as strong as the values the program chooses to send.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import resource
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

_SAFE = ("abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "frozenset", "int",
         "isinstance", "len", "list", "max", "min", "range", "reversed", "round", "set", "sorted", "str",
         "sum", "tuple", "zip")
SAFE_GLOBALS = {"__builtins__": {name: getattr(builtins, name) for name in _SAFE}, "math": math}
_KEPT_HERE = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.List, ast.Tuple, ast.Set,
              ast.Dict)
_SCOPED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class SplitTest:
    check: ast.Expression  # the assert's condition, lifted parts replaced by the names _v0, _v1, ...
    exprs: tuple[str, ...]  # the lifted parts, as source, evaluated in the sandbox


def _needs_program(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id not in SAFE_GLOBALS["__builtins__"] and n.id != "math"
               for n in ast.walk(node))


def _safe_call(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    named = isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name))
    return named and not _needs_program(func) and not any(
        isinstance(n, _SCOPED) for a in [*node.args, *node.keywords] for n in ast.walk(a))


class _Lift(ast.NodeTransformer):
    def __init__(self) -> None:
        self.exprs: list[str] = []

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.expr) and not _needs_program(node):
            return node
        if not isinstance(node, ast.expr) or isinstance(node, _KEPT_HERE) or _safe_call(node):
            return self.generic_visit(node)
        self.exprs.append(ast.unparse(node))
        return ast.Name(id=f"_v{len(self.exprs) - 1}", ctx=ast.Load())


def split_test(test: str) -> SplitTest:
    """Split one `assert` statement; raises ValueError naming the test when it is not one."""
    try:
        body = ast.parse(test).body
    except SyntaxError as e:
        raise ValueError(f"code test {test!r} is not valid Python: {e.msg}") from None
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        raise ValueError(f"a code test must be one assert statement, got {test!r}")
    lift = _Lift()
    check = ast.fix_missing_locations(ast.Expression(lift.visit(body[0].test)))
    return SplitTest(check, tuple(lift.exprs))


def parse_value(text: str) -> object:
    """A literal sent by the sandbox, read without evaluating anything; ValueError if it is not one."""
    def read(node: ast.AST) -> object:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords \
                and len(node.args) <= 1:
            if node.func.id in ("set", "frozenset"):
                return {"set": set, "frozenset": frozenset}[node.func.id](read(node.args[0]) if node.args else ())
            if node.func.id == "float" and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value in ("nan", "inf", "-inf"):
                return float(node.args[0].value)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [read(e) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {read(k): read(v) for k, v in zip(node.keys, node.values)}
        return ast.literal_eval(node)

    try:
        return read(ast.parse(text, mode="eval").body)
    except (SyntaxError, TypeError, RecursionError) as e:
        raise ValueError(f"not a literal: {e}") from None


def verdict(split: SplitTest, values: list[str | None] | None) -> bool:
    """Whether the test passes, given the serialised values of its lifted parts."""
    if values is None or len(values) != len(split.exprs) or any(v is None for v in values):
        return False
    try:
        env = dict(SAFE_GLOBALS, **{f"_v{i}": parse_value(v) for i, v in enumerate(values)})
        return bool(eval(compile(split.check, "<test>", "eval"), env))  # noqa: S307 - trusted test text, plain data
    except Exception:  # noqa: BLE001 - a value the check cannot handle is a failed test
        return False


def verdicts(tests: Sequence[str], values: Sequence[list[str | None] | None], cpu_seconds: int, memory_mb: int,
             wall_seconds: float) -> list[bool]:
    """Whether each test passes, given the serialised values of its lifted parts (None: none came back).

    The checks run in one short-lived interpreter under RLIMIT_CPU `cpu_seconds`, RLIMIT_AS `memory_mb` and a
    wall-clock timeout of `wall_seconds`, all the checks together: a check that hits a limit fails, and so do
    the checks after it. Raises RuntimeError when that interpreter fails for another reason (a bug, not a value).
    """
    todo = [i for i, v in enumerate(values) if v is not None]  # a test with no values fails unchecked
    passed = [False] * len(tests)
    if not todo:
        return passed
    job = json.dumps({"limits": [int(cpu_seconds), int(memory_mb)], "tests": [[tests[i], values[i]] for i in todo]})
    with subprocess.Popen([sys.executable, "-I", "-S", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(job.encode(), timeout=wall_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    if proc.returncode > 0:
        raise RuntimeError(f"the process grading code tests failed: {err.decode(errors='replace')[-2000:]}")
    for i, line in zip(todo, out.decode().splitlines()):
        passed[i] = line == "1"
    return passed


def _set_limit(which: int, value: int) -> None:
    hard = resource.getrlimit(which)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))


def _serve() -> None:
    """The check process: a JSON job on stdin, one line per test on stdout ("1" passed), written as it goes."""
    job = json.loads(sys.stdin.buffer.read())  # before the limits: plain JSON, bounded by the sandbox's output cap
    cpu_seconds, memory_mb = job["limits"]
    _set_limit(resource.RLIMIT_CPU, cpu_seconds)  # SIGXCPU ends the process: a C loop takes no signal handler
    _set_limit(resource.RLIMIT_AS, memory_mb << 20)
    for test, values in job["tests"]:
        try:
            ok = verdict(split_test(test), values)
        except Exception:  # noqa: BLE001 - MemoryError or RecursionError outside the check: a failed test
            ok = False
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
