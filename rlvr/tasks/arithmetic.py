"""Integer arithmetic: `37+85=` -> `122`.

Two rewards: `exact` (1 if the integer answer is right, else 0) and `digits` (partial credit: the
share of right-aligned digit positions that match, sign included, over the longer of answer and
target; 1 only for the exact answer). Held-out examples are a fixed hash partition of all
problems, so training never sees them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from rlvr.rewards.base import RewardOutput, bounded
from rlvr.tasks.base import HELD_OUT_SHARE, Example, TooFewExamples, draw_partition, register_task

REWARDS = ("exact", "digits")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_INT = re.compile(r"0|-?[1-9]\d*")  # canonical integers only: no leading zeros, no "-0"


def parse_int(completion: str) -> str | None:
    """The stripped completion if it is exactly one integer in canonical form ("122", "-9"), else
    None: exact match means the answer as a person would write it, so "0122" does not count."""
    text = completion.strip()
    return text if _INT.fullmatch(text) else None


def digit_credit(answer: str | None, target: str) -> float:
    """Share of right-aligned characters of `answer` equal to those of `target`."""
    if answer is None:
        return 0.0
    width = max(len(answer), len(target))
    a, t = answer.rjust(width), target.rjust(width)
    return sum(x == y for x, y in zip(a, t)) / width


@bounded
class ArithmeticReward:
    def __init__(self, design: str):
        self.design = design

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        answer, target = parse_int(completion), example["answer"]
        if self.design == "exact":
            return RewardOutput(float(answer == target))
        return RewardOutput(digit_credit(answer, target))


@dataclass
class ArithmeticTask:
    """`a op b =` with operands of 1..`digits` digits and `op` drawn from `ops`."""

    digits: int = 2
    ops: str = "+"
    reward: str = "exact"
    name: str = "arithmetic"

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 9:
            raise ValueError(f"arithmetic: digits must be in 1..9, got {self.digits}")
        bad = sorted(set(self.ops) - set(OPS)) or ([] if self.ops else ["(empty)"])
        if bad:
            raise ValueError(f"arithmetic: unknown ops {bad}; choose from {sorted(OPS)}")
        if self.reward not in REWARDS:
            raise ValueError(f"arithmetic: unknown reward {self.reward!r}; choose from {list(REWARDS)}")

    def _example(self, a: int, op: str, b: int) -> Example:
        answer = str(OPS[op](a, b))
        return Example(prompt=f"{a}{op}{b}=", answer=answer, fields={"a": a, "b": b, "op": op})

    def _sample(self, n: int, seed: int, held: bool) -> list[Example]:
        hi = 10**self.digits - 1
        out = draw_partition(lambda rng: self._example(rng.randint(0, hi), rng.choice(self.ops), rng.randint(0, hi)),
                             n, seed, held, n * HELD_OUT_SHARE * 20 + 1000)
        if out is None:
            raise TooFewExamples(f"arithmetic: could not draw {n} distinct held-out problems of {self.digits} "
                                 f"digit(s) (one problem in {HELD_OUT_SHARE} is held out)")
        return out

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held=False)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held=True)

    def reward_fn(self) -> ArithmeticReward:
        return ArithmeticReward(self.reward)

    def is_correct(self, completion: str, example: Example) -> bool:
        return parse_int(completion) == example.answer


register_task("arithmetic")(ArithmeticTask)
