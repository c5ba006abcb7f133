"""Guess a hidden number in `low..high`: the items of the `guess` environment (`rlvr.environments.guess`).

Alone, as a one-turn task, it is a single guess: the answer is right when it names the hidden number, so a
policy that does not see the number can be right 1 time in `high - low + 1`. Its demonstrations (an SFT
warm start) are single guesses of uniformly drawn numbers: they teach the format of a guess, not how to
use feedback. The `guess` environment turns it into the game with higher/lower feedback, where a
policy that halves the interval finds any number in ceil(log2(span + 1)) guesses.

The item space is the `high - low + 1` hidden numbers, so nothing can be held out: the held-out set cycles
through every number in turn (each as often as the size allows), and training draws them uniformly.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

from rlvr.rewards.base import RewardOutput, bounded
from rlvr.tasks.base import Example, register_task

_NUMBER = re.compile(r"-?\d+")


def parse_guess(text: str) -> int | None:
    """The guess a message names: the whole message stripped must be a whole number ('7', ' 12 '); else None."""
    text = text.strip()
    return int(text) if _NUMBER.fullmatch(text) else None


@bounded
class GuessReward:
    """1 when the single guess names the hidden number, else 0."""

    __name__ = "guess"

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        return RewardOutput(float(parse_guess(completion) == int(example["answer"])))


@dataclass
class GuessTask:
    """A hidden whole number in `low..high`, the prompt `prompt` with {low} and {high} filled in."""

    low: int = 1
    high: int = 15
    prompt: str = "guess {low}-{high}:"
    name: str = "guess"

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high <= 9999:
            raise ValueError(f"guess: need 0 <= low < high <= 9999, got low={self.low}, high={self.high}")

    def _example(self, hidden: int) -> Example:
        return Example(prompt=self.prompt.format(low=self.low, high=self.high), answer=str(hidden),
                       fields={"low": self.low, "high": self.high})

    def train_examples(self, n: int, seed: int) -> list[Example]:
        rng = random.Random(seed)
        return [self._example(rng.randint(self.low, self.high)) for _ in range(n)]

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        span = self.high - self.low + 1
        start = random.Random(seed).randrange(span)  # which number comes first when n is not a multiple
        return [self._example(self.low + (start + i) % span) for i in range(n)]

    def reward_fn(self) -> GuessReward:
        return GuessReward()

    def is_correct(self, completion: str, example: Example) -> bool:
        return parse_guess(completion) == int(example.answer)


register_task("guess")(GuessTask)
