"""Rewards never stop training: `SafeReward` turns an exception or a timeout into a fallback score.

Each failure is counted (`RewardBatch.errors`, logged by the trainer as `reward/errors`) and the
first traceback of each wrapped function is logged once, so a broken reward is loud but not fatal.
A per-sample timeout runs the function in a warm worker pool (`rlvr.rewards.pool`), since a thread
cannot be stopped and signals only work on the main thread.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import traceback
from typing import Any, Mapping, Sequence

from rlvr.rewards.base import BatchContext, BatchRewardFn, RewardBatch, RewardConfigError, RewardOutput
from rlvr.rewards.pool import OK, WorkerPool

logger = logging.getLogger("rlvr.rewards")


def as_mapping(example: Any) -> Mapping[str, Any]:
    """Accept `rlvr.tasks.Example` objects as well as plain dicts."""
    if isinstance(example, Mapping):
        return example
    if hasattr(example, "as_dict"):
        return example.as_dict()
    raise TypeError(f"an example must be a mapping or an Example, got {type(example).__name__}")


def to_output(value: Any) -> RewardOutput:
    """Validate what a reward returned. None means 'not applicable' and becomes NaN; a NaN or an
    infinity returned as a score is an error (a broken verifier, not an abstention)."""
    if isinstance(value, RewardOutput):
        score, comps = value.score, value.components
    elif value is None:
        return RewardOutput(math.nan)
    else:
        score, comps = value, {}
    if isinstance(score, (str, bytes)):
        raise TypeError(f"a reward must return a number, got {type(score).__name__}")
    score = float(score)  # TypeError for anything that is not a number
    if not math.isfinite(score):
        raise ValueError(f"a reward returned {score} (return None for 'not applicable')")
    return RewardOutput(score, {k: float(v) for k, v in comps.items()})


def _apply(fn, item: tuple[str, str, Mapping[str, Any]]) -> RewardOutput:
    return to_output(fn(*item))


def _check_lengths(batch: RewardBatch, n: int, name: str) -> RewardBatch:
    if len(batch.scores) != n or any(len(v) != n for v in batch.components.values()):
        raise ValueError(f"reward {name!r} returned {len(batch.scores)} scores for {n} completions")
    return batch


class SafeReward:
    """Wrap a per-sample or batched reward so that it never raises.

    fallback: the score of a sample whose reward raised or timed out.
    timeout: seconds per sample; runs `fn` in worker processes (it must be picklable). Batched
        rewards (with `score_batch`) must bring their own timeout (the math grader and the code
        sandbox do), so `timeout` is refused for them.
    warn_after: without a timeout, a call still running after this many seconds is logged (once
        per batch, naming the reward and the sample), so a hung reward is never silent.
    """

    def __init__(self, fn: Any, fallback: float = 0.0, timeout: float | None = None,
                 name: str | None = None, n_workers: int = 1, warn_after: float = 60.0) -> None:
        if not callable(fn) and not isinstance(fn, BatchRewardFn):
            raise TypeError(f"a reward must be callable or have score_batch, got {type(fn).__name__}")
        if timeout is not None and isinstance(fn, BatchRewardFn):
            raise ValueError("timeout= applies to per-sample rewards; batched rewards time out themselves")
        self.fn, self.fallback = fn, float(fallback)
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self.errors, self.warn_after = 0, warn_after
        self._logged = False
        self._pool = None
        if timeout is not None:
            self._pool = WorkerPool(functools.partial(_apply, fn), n_workers=n_workers, timeout=timeout)

    def _record(self, n_failed: int, detail: str) -> None:
        self.errors += n_failed
        if not self._logged:
            self._logged = True
            logger.warning("reward %r failed; scoring %s instead (logged once, counted in reward/errors):\n%s",
                           self.name, self.fallback, detail)

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        batch = self.score_batch([prompt], [completion], [example])
        return RewardOutput(batch.scores[0], {k: v[0] for k, v in batch.components.items()})

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        n = len(completions)
        if not len(prompts) == n == len(examples):
            raise ValueError(f"got {len(prompts)} prompts, {n} completions, {len(examples)} examples")
        examples = [as_mapping(e) for e in examples]
        if isinstance(self.fn, BatchRewardFn):
            return self._batched(list(prompts), list(completions), examples, ctx)
        if self._pool is not None:
            outs = self._pooled(list(zip(prompts, completions, examples)))
        else:
            outs = self._in_process(prompts, completions, examples)
        errors = sum(o is None for o in outs)
        outs = [o or RewardOutput(self.fallback) for o in outs]
        names = sorted({k for o in outs for k in o.components})
        comps = {k: [o.components.get(k, math.nan) for o in outs] for k in names}
        return RewardBatch([o.score for o in outs], comps, errors)

    def _in_process(self, prompts, completions, examples) -> list[RewardOutput | None]:
        current = [0, time.monotonic()]  # the sample being scored, since when

        def warn() -> None:
            logger.warning("reward %r has been running for %.0f s on sample %d of the batch and has no timeout: "
                           "it may hang the run (SafeReward(timeout=...) stops such calls)", self.name,
                           time.monotonic() - current[1], current[0])

        watchdog = threading.Timer(self.warn_after, warn)
        watchdog.daemon = True
        watchdog.start()
        outs = []
        try:
            for i, item in enumerate(zip(prompts, completions, examples)):
                current[:] = [i, time.monotonic()]
                outs.append(self._one(*item))
        finally:
            watchdog.cancel()
        return outs

    def _one(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput | None:
        try:
            return to_output(self.fn(prompt, completion, example))
        except RewardConfigError:
            raise
        except Exception:  # noqa: BLE001 - the point of this class
            self._record(1, traceback.format_exc())
            return None

    def _pooled(self, items: list) -> list[RewardOutput | None]:
        outs: list[RewardOutput | None] = []
        for status, value in self._pool.map(items):
            if status == OK:
                outs.append(value)
            else:
                self._record(1, f"{status}: {value}")
                outs.append(None)
        return outs

    def _batched(self, prompts, completions, examples, ctx) -> RewardBatch:
        try:
            return _check_lengths(self.fn.score_batch(prompts, completions, examples, ctx),
                                  len(completions), self.name)
        except RewardConfigError:
            raise
        except Exception:  # noqa: BLE001
            self._record(len(completions), traceback.format_exc())
            return RewardBatch([self.fallback] * len(completions), {}, len(completions))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
