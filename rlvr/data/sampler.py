"""Prompt samplers the training loop can draw batches from: failure-rate weighted and curriculum.

Both follow one small protocol, so the loop never sniffs which one it holds:
`sample(k) -> indices`, `update(indices, outcomes)` after the rewards are known (one outcome in
[0, 1] per sampled completion, the prompt index repeated for each of its G samples), and
`state_dict()` / `load_state_dict()` for exact resume (the RNG state is included).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class PromptSampler(Protocol):
    def sample(self, k: int) -> list[int]: ...

    def update(self, indices: Sequence[int], outcomes: Sequence[float]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _check_update(n_items: int, indices: Sequence[int], outcomes: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    idx = np.asarray(indices, dtype=np.int64)
    out = np.asarray(outcomes, dtype=np.float64)
    if idx.shape != out.shape or idx.ndim != 1:
        raise ValueError(f"indices {idx.shape} and outcomes {out.shape} must be 1-D and of equal length")
    if idx.size and (idx.min() < 0 or idx.max() >= n_items):
        raise ValueError(f"indices must be in 0..{n_items - 1}, got min {idx.min()}, max {idx.max()}")
    if not np.all((out >= 0) & (out <= 1)):
        raise ValueError("outcomes must be in [0, 1] (1 = solved); got values outside, or NaN")
    return idx, out


class FailureRateSampler:
    """Sample prompts with probability proportional to their smoothed failure rate.

    Kimi k1.5 (Sec. 2.3.4, "prioritized sampling") samples problem i with probability ~ 1 - s_i, its
    success rate. A raw rate would never again draw a prompt solved once in one try, so the rate is
    the posterior mean under a Beta(`prior_fail`, `prior_success`) prior:
    f_i = (failures_i + prior_fail) / (attempts_i + prior_fail + prior_success); with no data every
    prompt has the prior mean, i.e. sampling starts uniform. `decay` < 1 shrinks old counts at each
    update, so the estimate follows the changing policy rather than its whole history.
    """

    def __init__(self, n_items: int, *, prior_fail: float = 1.0, prior_success: float = 1.0,
                 decay: float = 1.0, seed: int = 0):
        if n_items < 1:
            raise ValueError(f"n_items must be >= 1, got {n_items}")
        if prior_fail <= 0 or prior_success <= 0:
            raise ValueError(f"prior counts must be > 0, got {prior_fail}, {prior_success}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.n_items, self.prior_fail, self.prior_success, self.decay = n_items, prior_fail, prior_success, decay
        self.failures = np.zeros(n_items)  # (N,) possibly fractional after decay
        self.attempts = np.zeros(n_items)  # (N,)
        self.rng = np.random.default_rng(seed)

    def failure_rates(self) -> np.ndarray:
        return (self.failures + self.prior_fail) / (self.attempts + self.prior_fail + self.prior_success)  # (N,)

    def probabilities(self) -> np.ndarray:
        f = self.failure_rates()
        return f / f.sum()  # (N,)

    def sample(self, k: int, replace: bool = False) -> list[int]:
        if not 1 <= k <= (np.inf if replace else self.n_items):
            raise ValueError(f"cannot draw {k} distinct prompts from {self.n_items}")
        return self.rng.choice(self.n_items, size=k, replace=replace, p=self.probabilities()).tolist()

    def update(self, indices: Sequence[int], outcomes: Sequence[float]) -> None:
        idx, out = _check_update(self.n_items, indices, outcomes)
        self.failures *= self.decay
        self.attempts *= self.decay
        np.add.at(self.failures, idx, 1.0 - out)
        np.add.at(self.attempts, idx, 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"failures": self.failures.tolist(), "attempts": self.attempts.tolist(),
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["failures"]) != self.n_items:
            raise ValueError(f"state holds {len(state['failures'])} items, this sampler {self.n_items}")
        self.failures = np.asarray(state["failures"], dtype=np.float64)
        self.attempts = np.asarray(state["attempts"], dtype=np.float64)
        self.rng.bit_generator.state = state["rng"]
