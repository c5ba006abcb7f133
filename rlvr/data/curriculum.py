"""A curriculum from easy to hard: order or bucket prompts by a difficulty score, unlock buckets over time.

Kimi k1.5 (Sec. 2.3.4, "curriculum sampling") starts on easier problems and moves to harder ones,
because a weak policy gets no reward (hence no signal) on hard prompts. The difficulty score is any
number where larger means harder; the usual one is 1 - pass rate from a best-of-N run
(`CurationResult.kept_scores()` of `difficulty_filter` gives pass rates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlvr.data.report import CurationResult
from rlvr.data.sampler import _check_update


def _check_scores(n_items: int, difficulty: Sequence[float]) -> np.ndarray:
    d = np.asarray(difficulty, dtype=np.float64)
    if d.shape != (n_items,):
        raise ValueError(f"need one difficulty per item: {n_items} items, difficulty shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("difficulty scores must be finite")
    return d


def easy_to_hard(difficulty: Sequence[float], seed: int | None = None) -> list[int]:
    """Indices sorted by increasing difficulty; ties keep input order, or are shuffled by `seed`."""
    d = _check_scores(len(difficulty), difficulty)
    tiebreak = np.arange(len(d)) if seed is None else np.random.default_rng(seed).permutation(len(d))
    return np.lexsort((tiebreak, d)).tolist()


def curriculum_buckets(difficulty: Sequence[float], n_buckets: int, seed: int | None = None) -> list[list[int]]:
    """`n_buckets` contiguous slices of the easy-to-hard order, sizes differing by at most one."""
    if not 1 <= n_buckets <= len(difficulty):
        raise ValueError(f"n_buckets must be in 1..{len(difficulty)}, got {n_buckets}")
    return [b.tolist() for b in np.array_split(np.asarray(easy_to_hard(difficulty, seed)), n_buckets)]


def curriculum_order(items: Sequence[Any], difficulty: Sequence[float], *, seed: int | None = None,
                     report_dir: str | Path | None = None) -> CurationResult:
    """All items, reordered easy to hard (nothing is removed; the report records the difficulty range)."""
    order = easy_to_hard(_check_scores(len(items), difficulty), seed)
    d = np.asarray(difficulty, dtype=np.float64)
    stats = {"min_difficulty": float(d.min()), "median_difficulty": float(np.median(d)),
             "max_difficulty": float(d.max())} if len(d) else {}
    result = CurationResult("curriculum", [items[i] for i in order], order, [], len(items), stats,
                            scores=d.tolist())
    if report_dir is not None:
        result.write_report(report_dir)
    return result


class CurriculumSampler:
    """Draw prompts uniformly from the buckets unlocked so far: bucket b (0 = easiest) unlocks after
    b * `steps_per_stage` calls to `sample`. Implements `PromptSampler`; `update` is accepted and
    ignored, since the schedule is fixed in advance."""

    def __init__(self, difficulty: Sequence[float], *, n_buckets: int = 3, steps_per_stage: int = 100,
                 seed: int = 0):
        if steps_per_stage < 1:
            raise ValueError(f"steps_per_stage must be >= 1, got {steps_per_stage}")
        self.n_items = len(difficulty)
        self.buckets = curriculum_buckets(difficulty, n_buckets, seed)
        self.steps_per_stage = steps_per_stage
        self.step = 0
        self.rng = np.random.default_rng(seed)

    @property
    def stage(self) -> int:
        return min(self.step // self.steps_per_stage, len(self.buckets) - 1)

    def pool(self) -> list[int]:
        return [i for bucket in self.buckets[: self.stage + 1] for i in bucket]

    def sample(self, k: int, replace: bool = False) -> list[int]:
        pool = self.pool()
        if not 1 <= k <= (np.inf if replace else len(pool)):
            raise ValueError(f"cannot draw {k} distinct prompts from the {len(pool)} unlocked at stage {self.stage}")
        self.step += 1
        return self.rng.choice(pool, size=k, replace=replace).tolist()

    def update(self, indices: Sequence[int], outcomes: Sequence[float]) -> None:
        _check_update(self.n_items, indices, outcomes)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["rng"]
