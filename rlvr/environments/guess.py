"""`guess`: find a hidden number in `low..high` with higher/lower feedback, in as few turns as possible.

    user: guess 1-15:     assistant: 8     user: higher     assistant: 12     user: lower     assistant: 10 ...

Each turn the model names a number; the environment answers `higher` or `lower` (the option texts), or
`invalid` when the message is not a whole number in range (that turn is spent). Solved at turn t, the
reward is 1 - turn_cost * (t - 1); unsolved after the runner's `env.max_turns`, 0. So a policy is paid for
using the feedback: halving the interval finds any of 15 numbers in at most 4 guesses, where guesses that
ignore the feedback find it within 6 turns 1 - (14/15)^6 = 34% of the time. The items (the hidden numbers)
come from the `guess` task (`rlvr.tasks.guess`), whose one-guess demonstrations teach the format only.
"""

from __future__ import annotations

import random
from typing import Any

from rlvr.environments.base import register_environment
from rlvr.rollout.environment import Message, StepResult
from rlvr.tasks.guess import parse_guess


@register_environment("guess")
class GuessEnv:
    def __init__(self, turn_cost: float = 0.1, higher: str = "higher", lower: str = "lower",
                 invalid: str = "invalid") -> None:
        if not 0 <= turn_cost < 1:
            raise ValueError(f"turn_cost must be in [0, 1), got {turn_cost}")
        self.turn_cost, self.higher, self.lower, self.invalid = turn_cost, higher, lower, invalid

    def reset(self, item: Any) -> list[Message]:
        self.hidden, self.low, self.high = int(item.answer), int(item.fields["low"]), int(item.fields["high"])
        self.turns = 0
        return [{"role": "user", "content": item.prompt}]

    def step(self, message: Message) -> StepResult:
        self.turns += 1
        guess = parse_guess(message["content"])
        if guess == self.hidden:
            return StepResult([], 1.0 - self.turn_cost * (self.turns - 1), True, {"correct": True})
        if guess is None or not self.low <= guess <= self.high:
            feedback = self.invalid
        else:
            feedback = self.higher if guess < self.hidden else self.lower
        return StepResult([{"role": "user", "content": feedback}], 0.0, False, {"correct": False})

    def demonstration(self, item: Any, rng: random.Random) -> list[str]:
        """Guesses drawn uniformly from the range, the feedback ignored: they show the format of a turn, not the
        strategy (an SFT warm start on them leaves the use of the feedback to RL)."""
        low, high = int(item.fields["low"]), int(item.fields["high"])
        return [str(rng.randint(low, high)) for _ in range(high - low + 1)]
