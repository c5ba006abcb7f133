"""The reward seam: text in, float out.

A reward function scores one completion given its prompt and the example's fields (e.g. the
ground-truth `answer`). It may return a float, or a `RewardOutput` with named components that the
trainer logs as `reward/<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable


@dataclass
class RewardOutput:
    score: float
    components: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class RewardFn(Protocol):
    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> float | RewardOutput: ...
