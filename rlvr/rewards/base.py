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


# --- batched form -------------------------------------------------------------------------------
# Rewards that need the whole batch (a worker pool, a sandbox farm, group statistics such as Kimi's
# length reward) implement `score_batch`. The n samples of one prompt are contiguous, as in
# `rlvr.rollout.base`, so `group_size` is enough to recover the groups.


@dataclass
class BatchContext:
    """What a batched reward may need beyond the text. All fields optional."""

    group_size: int = 1  # n samples per prompt, contiguous
    step: int = 0  # current optimizer step (for rewards switched on from a given step)
    lengths: list[int] | None = None  # completion lengths in tokens, one per completion
    max_new_tokens: int | None = None  # the sampler's length budget
    correct: list[bool] | None = None  # exact correctness if the caller already computed it

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")


@dataclass
class RewardBatch:
    """Scores of a batch plus named per-sample components (NaN = not applicable to that sample)."""

    scores: list[float]
    components: dict[str, list[float]] = field(default_factory=dict)
    errors: int = 0  # samples whose reward raised or timed out and got the fallback score
    timeouts: int = 0  # of those, the samples that timed out (reward.timeout, reward.step_timeout)

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Mean of each component over the samples where it applies, plus the error and timeout counts."""
        out: dict[str, float] = {}
        for name, values in self.components.items():
            seen = [v for v in values if v == v]  # drop NaN
            if seen:
                out[prefix + name] = sum(seen) / len(seen)
        out[prefix + "errors"], out[prefix + "timeouts"] = float(self.errors), float(self.timeouts)
        return out


COUNTS = ("errors", "timeouts")  # the metrics of a RewardBatch that count samples (the others are means)


@runtime_checkable
class BatchRewardFn(Protocol):
    def score_batch(self, prompts: list[str], completions: list[str], examples: list[Mapping[str, Any]],
                    ctx: BatchContext | None = None) -> RewardBatch: ...


class RewardConfigError(ValueError):
    """A reward was set up or called wrongly (e.g. missing lengths). Never swallowed by SafeReward:
    a misconfigured reward must stop the run at once, not quietly score the fallback forever."""


# --- running time -------------------------------------------------------------------------------
# SafeReward puts a reward from outside rlvr (a custom task's verifier, a registered function, a TRL
# callable) under `reward.timeout`. rlvr's own rewards are marked `bounded` and run as they are: fast
# pure functions, or batched rewards that time out each sample themselves (math grader pool, sandbox).

BOUNDED = "rlvr_bounded"


def bounded(reward: Any) -> Any:
    """Mark a reward function or class whose running time is bounded without help: SafeReward then
    runs it with no deadline and never in worker processes."""
    setattr(reward, BOUNDED, True)
    return reward


def is_bounded(reward: Any) -> bool:
    return getattr(reward, BOUNDED, False) is True
