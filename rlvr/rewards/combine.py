"""Weighted composition of rewards, and TRL-style reward callables used unchanged.

`CombinedReward([(fn, weight, name), ...])` scores a batch with every part and sums
`weight * score`; each part's scores are kept as component `name` (logged as `reward/<name>`).

Not-applicable scores (None from a TRL callable, NaN from ours) follow TRL's `GRPOTrainer`:
`rewards = nansum(weights * rewards_per_func)`, i.e. such a part adds nothing to that sample's sum
and the other weights are NOT renormalised; a sample where no part applies scores 0. The logged
component mean skips those samples.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from rlvr.config import check_finite_number
from rlvr.rewards.base import BatchContext, RewardBatch, RewardOutput
from rlvr.rewards.breaker import TimeoutLimits
from rlvr.rewards.safe import DEFAULT_TIMEOUT, SafeReward, as_mapping


PROMPT_MESSAGES = "prompt_messages"  # an example field: the conversation its prompt text was rendered from


class TRLReward:
    """Adapter for a TRL reward function `f(prompts, completions, **columns) -> list[float | None]`.

    The example fields (except `prompt`) are passed as columns, one list per field, as TRL passes
    dataset columns. None means "not applicable" (see the module docstring). Conversational examples (each with
    its prompt's messages in the field `prompt_messages`, as `rlvr.tasks.dataset` keeps them) are passed in TRL's
    conversational form: prompts as those message lists, each completion as `[{"role": "assistant",
    "content": text}]`.
    """

    def __init__(self, fn: Callable[..., Sequence[float | None]], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"TRLReward needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = name or getattr(fn, "__name__", type(fn).__name__)

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        rows = [as_mapping(e) for e in examples]
        keys = sorted({k for r in rows for k in r} - {"prompt", "prompts", "completions", PROMPT_MESSAGES})
        columns = {k: [r.get(k) for r in rows] for k in keys}
        texts: list[Any] = list(completions)
        if rows and all(isinstance(r.get(PROMPT_MESSAGES), list) for r in rows):
            prompts = [r[PROMPT_MESSAGES] for r in rows]
            texts = [[{"role": "assistant", "content": text}] for text in texts]
        out = list(self.fn(prompts=list(prompts), completions=texts, **columns))
        if len(out) != len(completions):
            raise ValueError(f"{self.__name__} returned {len(out)} rewards for {len(completions)} completions")
        return RewardBatch([math.nan if v is None else float(v) for v in out])


class CombinedReward:
    """`sum_i weight_i * reward_i` with every part made safe (exceptions and timeouts -> fallback, counted).

    parts: (reward, weight, name) triples; a reward is a per-sample `RewardFn`, or anything with
        `score_batch` (`TRLReward`, `MathReward`, `CodeReward`, length rewards, ...).
    timeout, n_workers, limits: of each part's `SafeReward` (a part given as a SafeReward keeps its own).
    """

    def __init__(self, parts: Sequence[tuple[Any, float, str]], fallback: float = 0.0,
                 timeout: float | None = DEFAULT_TIMEOUT, n_workers: int = 0,
                 limits: TimeoutLimits = TimeoutLimits()) -> None:
        if not parts:
            raise ValueError("CombinedReward needs at least one (reward, weight, name) part")
        self.parts: list[tuple[SafeReward, float, str]] = []
        for part in parts:
            if not (isinstance(part, tuple) and len(part) == 3):
                raise ValueError(f"each part must be (reward, weight, name), got {part!r}")
            fn, weight, name = part
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"a part name must be a non-empty string without '/', got {name!r}")
            weight = check_finite_number(f"weight of {name!r}", weight)
            safe = fn if isinstance(fn, SafeReward) else SafeReward(fn, fallback, timeout, name, n_workers,
                                                                    limits=limits)
            self.parts.append((safe, weight, name))
        names = [n for _, _, n in self.parts]
        if len(set(names)) != len(names):
            raise ValueError(f"part names must be unique, got {names}")

    @classmethod
    def single(cls, fn: Any, name: str = "task", fallback: float = 0.0, timeout: float | None = DEFAULT_TIMEOUT,
               n_workers: int = 0) -> "CombinedReward":
        return cls([(fn, 1.0, name)], fallback, timeout, n_workers)

    @property
    def errors(self) -> int:
        return sum(fn.errors for fn, _, _ in self.parts)

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str],
                    examples: Sequence[Any], ctx: BatchContext | None = None) -> RewardBatch:
        total = [0.0] * len(completions)
        components: dict[str, list[float]] = {}
        errors = timeouts = 0
        for fn, weight, name in self.parts:
            part = fn.score_batch(prompts, completions, examples, ctx)
            errors, timeouts = errors + part.errors, timeouts + part.timeouts
            components[name] = part.scores
            for sub, values in part.components.items():
                components[f"{name}/{sub}"] = values
            # TRL semantics: nansum over parts, no renormalisation.
            total = [t + weight * s if s == s else t for t, s in zip(total, part.scores)]
        return RewardBatch(total, components, errors, timeouts)

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        batch = self.score_batch([prompt], [completion], [example])
        return RewardOutput(batch.scores[0], {k: v[0] for k, v in batch.components.items()})

    def close(self) -> None:
        for fn, _, _ in self.parts:
            fn.close()
