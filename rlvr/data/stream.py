"""The training prompt stream: a fixed pool, drawn uniformly (reshuffled, seeded, every epoch) or through a
`rlvr.data` prompt sampler (failure-rate weighted, curriculum); either way resumable from `state_dict()`.

The rollout sampler only calls `next(n)`; the loop calls `update(examples, correct)` once the batch is
scored, which the uniform stream ignores and the weighted ones learn from.
"""

from __future__ import annotations

import random
from typing import Any, Generic, Sequence, TypeVar

import numpy as np

from rlvr.data.curriculum import CurriculumSampler
from rlvr.data.sampler import FailureRateSampler, PromptSampler

T = TypeVar("T")


class PromptStream(Generic[T]):
    """Yields the pool in a seeded random order, epoch after epoch.

    The order of epoch e depends only on (seed, e), so `state_dict()` = (epoch, position) is all a
    checkpoint needs to continue exactly where it stopped.
    """

    def __init__(self, pool: Sequence[T], seed: int):
        if not pool:
            raise ValueError("the training prompt pool is empty")
        self.pool, self.seed = list(pool), seed
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.pool)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[T]:
        out = []
        while len(out) < n:
            if self.position == len(self.pool):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            out.append(self.pool[self._order[self.position]])
            self.position += 1
        return out

    def update(self, examples: Sequence[T], outcomes: Sequence[float]) -> None:
        """Uniform sampling does not depend on outcomes (kept so that every stream has one protocol)."""

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._shuffled(self.epoch)


class SampledPromptStream(Generic[T]):
    """Draws each request of `n` distinct prompts through a `PromptSampler` and feeds outcomes back to it.

    `draws` counts how often each prompt of the pool was drawn (a record for reports and tests); it and
    the sampler's state (counts, RNG) form `state_dict()`, so a resumed run draws what the
    uninterrupted one did.
    """

    def __init__(self, pool: Sequence[T], sampler: PromptSampler):
        if not pool:
            raise ValueError("the training prompt pool is empty")
        self.pool, self.sampler = list(pool), sampler
        self._index = {id(ex): i for i, ex in enumerate(self.pool)}  # examples come back as the pool's objects
        self.draws = np.zeros(len(self.pool), dtype=np.int64)  # (P,)

    def next(self, n: int) -> list[T]:
        indices = self.sampler.sample(n)
        np.add.at(self.draws, indices, 1)
        return [self.pool[i] for i in indices]

    def update(self, examples: Sequence[T], outcomes: Sequence[float]) -> None:
        """One outcome in [0, 1] per completion (1 = correct); a prompt repeats once per sample."""
        self.sampler.update([self._index[id(ex)] for ex in examples], [float(o) for o in outcomes])

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict(), "draws": self.draws.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.draws = np.asarray(state["draws"], dtype=np.int64)


PROMPT_SAMPLERS = ("uniform", "failure_rate", "curriculum")


def difficulty_scores(pool: Sequence[Any], key: str) -> list[float]:
    """The curriculum's difficulty per example (larger = harder): the numeric field `key` of
    `Example.fields` (e.g. a task's problem size), or, for `prompt_length`, the prompt's length in
    characters (a crude proxy: longer problems tend to be harder)."""
    if key == "prompt_length":
        return [float(len(ex.prompt)) for ex in pool]
    missing = [i for i, ex in enumerate(pool) if not isinstance(ex.fields.get(key), (int, float))]
    if missing:
        raise ValueError(f"difficulty: example {missing[0]} has no numeric field {key!r}; use prompt_length "
                         f"or one of {sorted(pool[missing[0]].fields)}")
    return [float(ex.fields[key]) for ex in pool]


def build_prompt_stream(name: str, options: dict[str, Any], pool: Sequence[Any], seed: int) -> Any:
    """`task.prompt_sampler` + `task.sampler_options` -> the stream the rollout sampler draws from.

    failure_rate options: prior_fail, prior_success, decay (`FailureRateSampler`); curriculum options:
    n_buckets, steps_per_stage (`CurriculumSampler`) and difficulty (see `difficulty_scores`)."""
    if name == "uniform":
        if options:
            raise ValueError(f"uniform sampling takes no options, got {sorted(options)}")
        return PromptStream(pool, seed)
    if name == "failure_rate":
        return SampledPromptStream(pool, FailureRateSampler(len(pool), seed=seed, **options))
    if name == "curriculum":
        opts = dict(options)
        difficulty = difficulty_scores(pool, opts.pop("difficulty", "prompt_length"))
        return SampledPromptStream(pool, CurriculumSampler(difficulty, seed=seed, **opts))
    raise ValueError(f"unknown prompt sampler {name!r}; choose from {list(PROMPT_SAMPLERS)}")
