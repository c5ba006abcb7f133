"""Length shaping: Kimi k1.5's group length reward and DAPO's soft overlong penalty.

Both are batched rewards that read token lengths from `BatchContext.lengths`; Kimi's also needs
the group layout (`ctx.group_size`, samples of a prompt contiguous) and correctness. `StepGated`
switches any reward on from a given optimizer step (Kimi k1.5 warms up without the length
penalty, since it slows early training).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from rlvr.rewards.base import BatchContext, RewardBatch, RewardConfigError, bounded
from rlvr.rewards.format import MathReward
from rlvr.rewards.safe import SafeReward


def kimi_length_reward(lengths: Sequence[int], correct: Sequence[bool]) -> list[float]:
    """Kimi k1.5 (Kimi Team 2025, sec. 2.3.3) over the responses of one prompt.

    lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len); a correct response gets lambda_i,
    a wrong one min(0, lambda_i): short correct answers are rewarded, long wrong ones penalised.
    All lengths equal -> 0 for every response.
    """
    if len(lengths) != len(correct):
        raise ValueError(f"{len(lengths)} lengths but {len(correct)} correctness flags")
    if not lengths:
        return []
    lo, hi = min(lengths), max(lengths)
    if hi == lo:
        return [0.0] * len(lengths)
    lam = [0.5 - (n - lo) / (hi - lo) for n in lengths]
    return [lm if ok else min(0.0, lm) for lm, ok in zip(lam, correct)]


def dapo_overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO (Yu et al. 2025, eq. 13) soft overlong punishment.

    0 up to max_len - cache_len tokens, then linear down to -1 at max_len, -1 beyond.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    free = max_len - cache_len
    if length <= free:
        return 0.0
    if length <= max_len:
        return (free - length) / cache_len
    return -1.0


def _lengths(ctx: BatchContext | None, n: int, who: str) -> list[int]:
    if ctx is None or ctx.lengths is None:
        raise RewardConfigError(f"{who} needs token lengths: pass BatchContext(lengths=...)")
    if len(ctx.lengths) != n:
        raise RewardConfigError(f"{who}: {len(ctx.lengths)} lengths for {n} completions")
    return list(ctx.lengths)


@bounded
class KimiLengthReward:
    """`kimi_length_reward` per group. Correctness comes from `ctx.correct` when the caller has it,
    else from `correct_fn` (a reward; score >= threshold counts as correct; default: math)."""

    __name__ = "kimi_length"

    def __init__(self, correct_fn: Any = None, threshold: float = 1.0) -> None:
        if correct_fn is None:
            correct_fn = MathReward()
        self.correct_fn, self.threshold = SafeReward(correct_fn, name="kimi_length/correct"), threshold

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        n = len(completions)
        lengths = _lengths(ctx, n, "kimi_length")
        g = ctx.group_size
        if n % g:
            raise RewardConfigError(f"kimi_length: group_size {g} does not divide the batch of {n}")
        if ctx.correct is not None:
            correct, errors = list(ctx.correct), 0
        else:
            judged = self.correct_fn.score_batch(prompts, completions, examples, ctx)
            correct, errors = [s >= self.threshold for s in judged.scores], judged.errors
        scores: list[float] = []
        for start in range(0, n, g):
            scores += kimi_length_reward(lengths[start:start + g], correct[start:start + g])
        return RewardBatch(scores, {}, errors)


@bounded
class OverlongPenalty:
    """`dapo_overlong_penalty` per sample; max_len defaults to the sampler's max_new_tokens."""

    __name__ = "overlong"

    def __init__(self, cache_len: int, max_len: int | None = None) -> None:
        if cache_len <= 0 or (max_len is not None and cache_len > max_len):
            raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
        self.cache_len, self.max_len = cache_len, max_len

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        lengths = _lengths(ctx, len(completions), "overlong")
        max_len = self.max_len or ctx.max_new_tokens
        if max_len is None:
            raise RewardConfigError("overlong needs max_len= or BatchContext(max_new_tokens=...)")
        if self.cache_len > max_len:  # every sample would fail alike: a setting, not a sample's error
            raise RewardConfigError(f"overlong: cache_len {self.cache_len} exceeds max_len {max_len} (the sampler's "
                                    "max_new_tokens unless given); need 0 < cache_len <= max_len")
        return RewardBatch([dapo_overlong_penalty(n, max_len, self.cache_len) for n in lengths])


@bounded
class StepGated:
    """`fn` from optimizer step `start_step` on (`ctx.step`); before that, not applicable (NaN:
    adds nothing to the combined reward and is left out of the logged mean)."""

    def __init__(self, fn: Any, start_step: int) -> None:
        if start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {start_step}")
        self.fn = fn if isinstance(fn, SafeReward) else SafeReward(fn)
        self.start_step = start_step
        self.__name__ = self.fn.name

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        step = ctx.step if ctx is not None else 0
        if step < self.start_step:
            return RewardBatch([math.nan] * len(completions))
        return self.fn.score_batch(prompts, completions, examples, ctx)
