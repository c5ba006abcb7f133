"""Countdown (TinyZero, Pan et al. 2025): combine the given numbers with + - * / to hit a target.

Every target is built from the numbers themselves, so each problem is solvable. A fixed hash
bucket of (numbers, target) is held out, so training never sees an evaluation problem.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Any

from rlvr.rewards.countdown import CountdownReward, countdown_equal, evaluate_countdown
from rlvr.rewards.format import final_answer
from rlvr.tasks.base import Example, register_task
from rlvr.tasks.templates import ANSWER_TAGS, render_prompt, set_up_template

_EVAL_BUCKETS = 10
_MAX_TARGET = 1000


def make_problem(rng: random.Random, n_numbers: int, max_number: int) -> tuple[list[int], int, str]:
    """(numbers, target, one solution): the target folds all numbers with random operations."""
    while True:
        numbers = [rng.randint(1, max_number) for _ in range(n_numbers)]
        order = rng.sample(numbers, len(numbers))
        expr, value = str(order[0]), order[0]
        for n in order[1:]:
            op = rng.choice("+-*/" if value % n == 0 else "+-*")  # "/" only when exact
            value = {"+": value + n, "-": value - n, "*": value * n}.get(op, value // n)
            expr = f"({expr} {op} {n})"
        if 0 < value <= _MAX_TARGET:
            return numbers, value, expr[1:-1] if expr.startswith("(") else expr


def question(numbers: list[int], target: int) -> str:
    return (f"Using the numbers {numbers}, create an equation that equals {target}. You can use "
            "+, -, * and /, and each number at most once.")


@dataclass
class CountdownTask:
    n_numbers: int = 4
    max_number: int = 99
    template: str = "auto"  # auto: the model's chat template when it has one, else r1_zero
    tokenizer: Any = None
    format_score: float = 0.0  # reward for a stated but wrong expression (TinyZero uses 0.1)
    name: str = "countdown"

    def __post_init__(self) -> None:
        if not 2 <= self.n_numbers <= 8:
            raise ValueError(f"countdown: n_numbers must be in 2..8, got {self.n_numbers}")
        if not 2 <= self.max_number <= 1000:
            raise ValueError(f"countdown: max_number must be in 2..1000, got {self.max_number}")
        self.template, self.tokenizer = set_up_template(self.template, self.tokenizer)

    def _sample(self, n: int, seed: int, held_out: bool) -> list[Example]:
        rng, out = random.Random(seed), []
        while len(out) < n:
            numbers, target, solution = make_problem(rng, self.n_numbers, self.max_number)
            if (zlib.crc32(repr((sorted(numbers), target)).encode()) % _EVAL_BUCKETS == 0) != held_out:
                continue
            prompt = render_prompt(self.template, question(numbers, target), self.tokenizer, ANSWER_TAGS)
            out.append(Example(prompt, str(target), {"numbers": numbers, "target": target, "solution": solution}))
        return out

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held_out=False)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held_out=True)

    def reward_fn(self) -> CountdownReward:
        return CountdownReward(self.format_score)

    def is_correct(self, completion: str, example: Example) -> bool:
        stated = final_answer(example.prompt, completion)
        return countdown_equal(stated, example.fields["numbers"], example.fields["target"])

    def format_ok(self, completion: str, example: Example) -> bool:
        return final_answer(example.prompt, completion) is not None

    def answer_key(self, completion: str, example: Example) -> str | None:
        stated = final_answer(example.prompt, completion)
        value = None if stated is None else evaluate_countdown(stated, example.fields["numbers"])
        return None if value is None else str(value)


register_task("countdown")(CountdownTask)
