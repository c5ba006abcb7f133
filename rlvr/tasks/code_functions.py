"""Write a small Python function: procedural problems with assert tests, graded in the code sandbox.

    "Write a Python function f(x) that returns 3 * x + 4." -> tests ["assert f(0) == 4", "assert f(2) == 10", ...]

Families (`FAMILIES`, each drawn with small random parameters): an affine map, the sum of a list's numbers above
a threshold, a string repeated, a string's last characters, divisibility, counting a letter, a quadratic, a list
scaled. The expected values
come from a reference implementation here; the program runs in `rlvr.sandbox` and is graded by
`rlvr.rewards.code` (the fraction of the tests passed), alone as a one-turn task or in the `code`
environment, which feeds the failing tests back for further attempts. One problem in ten (by a hash of its
text) is held out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.rewards.code import CodeReward, extract_code, pass_fraction
from rlvr.tasks.base import HELD_OUT_SHARE, Example, TooFewExamples, draw_partition, register_task

ANSWER_FORMAT = "Answer with the function alone in a ```python block."


FAMILIES = ("affine", "sum_above", "repeat", "suffix", "divisible", "count", "quadratic", "scale")


def _family(rng: random.Random, families: list[str]) -> tuple[str, str, Callable[[Any], Any], list[Any]]:
    """(what f must return, a reference solution's body, the reference f, the arguments to test it on)."""
    kind = FAMILIES.index(rng.choice(families))
    if kind == 0:
        a, b = rng.choice([k for k in range(-9, 10) if k not in (0, 1)]), rng.randint(-50, 50)
        return f"f(x) that returns {a} * x + {b}", f"return {a} * x + {b}", lambda x: a * x + b, [0, 1, 3, -2]
    if kind == 1:
        k = rng.randint(-20, 40)
        return (f"f(xs) that returns the sum of the numbers in the list xs that are greater than {k}",
                f"return sum(x for x in xs if x > {k})", lambda xs: sum(x for x in xs if x > k),
                [[1, 2, 30, 8], [k, k + 1, 0], [], [9, -1, 26, k]])
    if kind == 2:
        k = rng.randint(2, 20)
        return f"f(s) that returns the string s repeated {k} times", f"return s * {k}", lambda s: s * k, ["ab", "x", ""]
    if kind == 3:
        k = rng.randint(1, 9)
        return (f"f(s) that returns the last {k} characters of the string s", f"return s[-{k}:]",
                lambda s: s[-k:], ["abcdefgh", "xy", "hello world"])
    if kind == 4:
        k = rng.randint(2, 30)
        return (f"f(n) that returns True when n is divisible by {k}, else False", f"return n % {k} == 0",
                lambda n: n % k == 0, [0, k, k + 1, 3 * k, 1])
    if kind == 5:
        letter = rng.choice("abcdefghijklmnopqrstuvwxyz")
        return (f"f(s) that returns how many times the letter '{letter}' occurs in the string s",
                f"return s.count({letter!r})", lambda s: s.count(letter), ["banana", "queue", "", "the quick fox"])
    if kind == 6:
        a, b = rng.randint(1, 5), rng.randint(-30, 30)
        return (f"f(x) that returns {a} times x squared plus {b}", f"return {a} * x * x + {b}",
                lambda x: a * x * x + b, [0, 2, -3, 5])
    k = rng.choice([k for k in range(-9, 10) if k not in (0, 1)])
    return (f"f(xs) that returns the list xs with every number multiplied by {k}", f"return [x * {k} for x in xs]",
            lambda xs: [x * k for x in xs], [[1, 2, 3], [], [-1, 0]])


@dataclass
class FunctionTask:
    """Small Python functions with assert tests (see the module docstring); `families`: the families drawn from,
    comma-separated (`FAMILIES`), or all."""

    families: str = "all"
    name: str = "py_functions"

    def __post_init__(self) -> None:
        chosen = list(FAMILIES) if self.families == "all" else [f.strip() for f in self.families.split(",")]
        unknown = [f for f in chosen if f not in FAMILIES]
        if unknown or not chosen:
            raise ValueError(f"py_functions: unknown families {unknown}; choose from {list(FAMILIES)} or all")
        self.chosen = chosen

    def _example(self, rng: random.Random) -> Example:
        spec, body, ref, args = _family(rng, self.chosen)
        question = f"Write a Python function {spec}.\n{ANSWER_FORMAT}"
        parameter = spec[spec.index("(") + 1:spec.index(")")]
        solution = f"```python\ndef f({parameter}):\n    {body}\n```"  # the reference answer, an SFT demonstration
        tests = [f"assert f({a!r}) == {ref(a)!r}" for a in args]
        return Example(prompt=question, answer=solution, fields={"question": question, "tests": tests})

    def _sample(self, n: int, seed: int, held: bool) -> list[Example]:
        out = draw_partition(self._example, n, seed, held, n * HELD_OUT_SHARE * 50 + 1000)
        if out is None:
            raise TooFewExamples(f"py_functions: could not draw {n} distinct held-out problems of families "
                                 f"{self.chosen} (one problem in {HELD_OUT_SHARE} is held out)")
        return out

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held=False)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held=True)

    def reward_fn(self) -> CodeReward:
        return CodeReward()

    def is_correct(self, completion: str, example: Example) -> bool:
        return pass_fraction(extract_code(completion), example.as_dict()) == 1.0


register_task("py_functions")(FunctionTask)
