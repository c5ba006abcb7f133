"""A task = examples (prompt + ground truth fields) + a prompt template + its verifier (reward).

Tasks are chosen by name in a config: `get_task("sort", **options)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from rlvr.rewards.base import RewardFn


@dataclass
class Example:
    prompt: str  # the full prompt text given to the model (template applied)
    answer: str  # ground truth used by the verifier and by exact-match accuracy
    fields: dict[str, Any] = field(default_factory=dict)  # anything else the reward needs

    def as_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "answer": self.answer, **self.fields}


class TooFewExamples(ValueError):
    """A task cannot draw as many distinct examples as asked (its space, or its held-out share, is
    smaller); callers name the setting that asked (task.eval_size, --num-examples)."""


@runtime_checkable
class Task(Protocol):
    name: str

    def train_examples(self, n: int, seed: int) -> list[Example]: ...

    def eval_examples(self, n: int, seed: int) -> list[Example]: ...

    def reward_fn(self) -> RewardFn: ...

    def is_correct(self, completion: str, example: Example) -> bool:
        """Exact correctness, reported beside the training reward so reward gaming shows."""
        ...


TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str):
    def deco(factory: Callable[..., Task]):
        if name in TASKS:
            raise ValueError(f"task {name!r} registered twice")
        TASKS[name] = factory
        return factory

    return deco


def get_task(name: str, **options: Any) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {sorted(TASKS)}")
    return TASKS[name](**options)
