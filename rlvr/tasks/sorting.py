"""Digit sorting: `sort 3 9 1 4=` -> `1 3 4 9`, with three reward designs.

The three rewards show how reward design shapes what RL learns (CS336 lecture on policy gradient,
"sort numbers" toy):

- `sparse`: 1 if the answer is exactly the sorted list, else 0. Honest, but gives no signal to a
  model that is never right.
- `positional`: the fraction of positions holding the right digit (denominator: the longer of answer
  and target, so extra digits cost credit). Dense and still maximised only by the right answer.
- `inclusion`: half for covering the prompt's digits, half for adjacent pairs in order. Dense, but it
  can be gamed, as its two halves never look at what else the answer holds: with repeated digits in the
  prompt, dropping the duplicates (`sort 3 3 1` -> `1 3`) scores full marks while being wrong; and the
  answer `0 1 2 ... max_digit` (every digit, in order) scores full marks on *any* prompt, a constant answer
  that a policy can learn without reading the prompt. Exact-match accuracy is logged beside it so gaming
  shows.

Held-out examples are a fixed hash partition of all digit lists, so training never sees them.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rlvr.rewards.base import RewardOutput, bounded
from rlvr.tasks.base import Example, TooFewExamples, register_task

REWARDS = ("sparse", "positional", "inclusion")
_EVAL_BUCKETS = 10  # one hash bucket in ten is held out


def parse_digits(completion: str) -> list[int] | None:
    """`" 1 3 4 9"` -> [1, 3, 4, 9]; None when any whitespace-separated field is not one digit."""
    fields = completion.split()
    if not all(len(f) == 1 and f.isdigit() for f in fields):
        return None
    return [int(f) for f in fields]


def sparse_reward(answer: list[int] | None, digits: list[int]) -> RewardOutput:
    return RewardOutput(float(answer == sorted(digits)))


def positional_reward(answer: list[int] | None, digits: list[int]) -> RewardOutput:
    if answer is None:
        return RewardOutput(0.0)
    target = sorted(digits)
    hits = sum(a == t for a, t in zip(answer, target))
    return RewardOutput(hits / max(len(answer), len(target)))


def inclusion_reward(answer: list[int] | None, digits: list[int]) -> RewardOutput:
    """0.5 * (share of distinct prompt digits present) + 0.5 * (share of adjacent pairs in order).

    Blind spot (module docstring): neither half penalises digits the prompt does not hold, so
    `0 1 2 ... max_digit` earns 1.0 on every prompt, and so do a prompt's distinct digits in order (repeats dropped)."""
    if not answer:
        return RewardOutput(0.0, {"inclusion": 0.0, "ordered_pairs": 0.0})
    wanted = set(digits)
    inclusion = len(wanted & set(answer)) / len(wanted)
    pairs = [a <= b for a, b in zip(answer, answer[1:])]
    ordered = sum(pairs) / len(pairs) if pairs else 1.0
    return RewardOutput(0.5 * inclusion + 0.5 * ordered, {"inclusion": inclusion, "ordered_pairs": ordered})


_REWARD_FNS: dict[str, Callable[[list[int] | None, list[int]], RewardOutput]] = {
    "sparse": sparse_reward,
    "positional": positional_reward,
    "inclusion": inclusion_reward,
}


@bounded
class SortReward:
    """RewardFn: parses the completion and scores it against `example["digits"]`."""

    def __init__(self, design: str):
        self.design = design
        self._fn = _REWARD_FNS[design]

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        return self._fn(parse_digits(completion), list(example["digits"]))


@dataclass
class SortTask:
    """Sort `length` digits drawn from 0..`max_digit` (repeats allowed)."""

    length: int = 4
    max_digit: int = 9
    reward: str = "sparse"
    name: str = "sort"

    def __post_init__(self) -> None:
        if self.length < 2:
            raise ValueError(f"sort: length must be >= 2, got {self.length}")
        if not 1 <= self.max_digit <= 9:
            raise ValueError(f"sort: max_digit must be in 1..9, got {self.max_digit}")
        if self.reward not in REWARDS:
            raise ValueError(f"sort: unknown reward {self.reward!r}; choose from {list(REWARDS)}")

    def _example(self, digits: list[int]) -> Example:
        text = " ".join(map(str, digits))
        answer = " ".join(map(str, sorted(digits)))
        return Example(prompt=f"sort {text}=", answer=answer, fields={"digits": digits})

    def _is_held_out(self, digits: list[int]) -> bool:
        return zlib.crc32(bytes(digits)) % _EVAL_BUCKETS == 0

    def _sample(self, n: int, seed: int, held_out: bool) -> list[Example]:
        """`n` examples of one partition; the held-out ones are distinct so no eval item counts twice."""
        rng = random.Random(seed)
        out: list[Example] = []
        seen: set[tuple[int, ...]] = set()
        space = (self.max_digit + 1) ** self.length
        for _ in range(n * _EVAL_BUCKETS * 20 + space):
            digits = [rng.randint(0, self.max_digit) for _ in range(self.length)]
            if self._is_held_out(digits) != held_out or (held_out and tuple(digits) in seen):
                continue
            seen.add(tuple(digits))
            out.append(self._example(digits))
            if len(out) == n:
                return out
        if not held_out:
            raise TooFewExamples(f"sort: could not draw {n} training lists of length {self.length}")
        raise TooFewExamples(f"sort: could not draw {n} distinct held-out lists: only about {space // _EVAL_BUCKETS} "
                             f"of the {space} lists of length {self.length} (digits 0-{self.max_digit}) are held out")

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held_out=False)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self._sample(n, seed, held_out=True)

    def reward_fn(self) -> SortReward:
        return SortReward(self.reward)

    def is_correct(self, completion: str, example: Example) -> bool:
        return parse_digits(completion) == sorted(example.fields["digits"])


register_task("sort")(SortTask)
