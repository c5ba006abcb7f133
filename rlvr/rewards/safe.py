"""Rewards never hang training: `SafeReward` turns an exception or a timeout into a fallback score.

Each failure is counted (`RewardBatch.errors` and `.timeouts`, logged by the trainer as `reward/errors` and
`reward/timeouts`) and the first traceback (and the first timeout) of each wrapped function is logged once,
so a broken reward is loud but not fatal. A run adds a deadline for each batch and a circuit breaker that
stops it when the reward keeps timing out (`limits`, `rlvr.rewards.breaker`).

Which path a reward takes:
- marked `bounded` (rlvr's own: format, language, countdown, the sort/arithmetic verifiers, length
  shaping, the reward model, and the math grader and code sandbox, which time out each sample
  themselves): called as it is;
- per-sample, from outside rlvr: each call under a deadline in this process (`rlvr.sandbox.deadline`,
  a SIGALRM timer on the main thread), or in warm worker processes (`rlvr.rewards.pool`) with
  `n_workers` >= 1, which also stops C code a signal cannot;
- batched, from outside rlvr (a `TRLReward`, any `score_batch`): the whole call under a deadline of
  timeout x batch size; on expiry every sample of the batch scores the fallback.
"""

from __future__ import annotations

import functools
import logging
import math
import pickle
import threading
import time
import traceback
from typing import Any, Callable, Mapping, Sequence

from rlvr.config import RewardConfig, check_finite_number
from rlvr.rewards.base import (BatchContext, BatchRewardFn, RewardBatch, RewardConfigError, RewardOutput,
                               is_bounded)
from rlvr.rewards.breaker import Breaker, TimeoutLimits
from rlvr.sandbox.deadline import Budget, DeadlineExceeded, call_with_deadline, can_interrupt
from rlvr.rewards.pool import LATE, OK, TIMEOUT, WorkerPool

logger = logging.getLogger("rlvr.rewards")
DEFAULT_TIMEOUT: float = RewardConfig.timeout  # seconds per sample, the config's default (reward.timeout)


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


def worker_problem(fn: Any) -> str | None:
    """Why `fn` cannot run in worker processes, or None when it can (or need not: bounded or batched
    rewards stay in this process). Workers are fresh interpreters that unpickle `fn` by its name."""
    if is_bounded(fn) or isinstance(fn, BatchRewardFn):
        return None
    try:
        payload = pickle.dumps(fn)
    except Exception as err:  # noqa: BLE001 - PicklingError, AttributeError (a local object), TypeError
        return f"cannot run in worker processes: it is not picklable ({err}); define it at module level"
    if b"__main__" in payload:
        return ("cannot run in worker processes: it is defined in __main__ (a script or notebook), which the "
                "workers do not import; move it into a module")
    return None


def _check_lengths(batch: RewardBatch, n: int, name: str) -> RewardBatch:
    if len(batch.scores) != n or any(len(v) != n for v in batch.components.values()):
        raise ValueError(f"reward {name!r} returned {len(batch.scores)} scores for {n} completions")
    return batch


class SafeReward:
    """Wrap a per-sample or batched reward so that it never raises and never hangs the run.

    fallback: the score of a sample whose reward raised or timed out (counted in `errors`).
    timeout: seconds per sample for a reward not marked `bounded` (None or 0: no limit); see the
        module docstring for where it is enforced.
    n_workers: 0 runs a per-sample reward in this process; N >= 1 in N worker processes (started on
        first use; the reward must be picklable and importable, see `worker_problem`).
    warn_after: a call in this process still running after this many seconds (with a timeout: twice
        the timeout plus one) is logged once per batch, naming the reward and the sample, so a reward
        that even the deadline cannot stop is never silent.
    limits: a deadline for each batch, and when to stop the run rather than go on scoring fallbacks
        (`rlvr.rewards.breaker`; off by default: then it never raises).
    """

    def __init__(self, fn: Any, fallback: float = 0.0, timeout: float | None = DEFAULT_TIMEOUT,
                 name: str | None = None, n_workers: int = 0, warn_after: float = 60.0,
                 limits: TimeoutLimits = TimeoutLimits()) -> None:
        if not callable(fn) and not isinstance(fn, BatchRewardFn):
            raise TypeError(f"a reward must be callable or have score_batch, got {type(fn).__name__}")
        if timeout is not None and check_finite_number("timeout", timeout) < 0:
            raise ValueError(f"timeout must be >= 0 (0 = none), got {timeout}")
        if n_workers < 0:
            raise ValueError(f"n_workers must be >= 0, got {n_workers}")
        self.fn, self.fallback = fn, float(fallback)
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self.timeout = float(timeout) if timeout and not is_bounded(fn) else None
        self.errors, self.timeouts, self.warn_after = 0, 0, warn_after
        self._logged: set[str] = set()
        self._pool: WorkerPool | None = None
        self.n_workers = n_workers if self.timeout is not None and not isinstance(fn, BatchRewardFn) else 0
        if n_workers and not timeout:
            raise ValueError("n_workers needs a timeout > 0 (the workers exist to stop a hung reward)")
        problem = worker_problem(fn) if self.n_workers else None
        if problem:
            raise ValueError(f"reward {self.name!r} {problem}")
        self.limits, self.breaker = limits, Breaker(self.name, limits, self.timeout)

    def _record(self, n_failed: int, kind: str, detail: str) -> None:
        """Count `n_failed` samples of outcome `kind` (TIMEOUT, LATE: past the batch's deadline, or an error);
        the first of each kind is logged."""
        self.errors += n_failed
        self.timeouts += n_failed if kind in (TIMEOUT, LATE) else 0
        if kind in self._logged:
            return
        self._logged.add(kind)
        if kind in (TIMEOUT, LATE):
            logger.warning("reward %r timed out (%s); scoring %s instead (logged once, counted in reward/errors "
                           "and reward/timeouts)", self.name, detail, self.fallback)
        else:
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
        budget, timeouts = Budget(self.limits.step), self.timeouts
        if isinstance(self.fn, BatchRewardFn):
            batch = self._batched(list(prompts), list(completions), examples, ctx, budget)
        else:
            outs = (self._pooled(list(zip(prompts, completions, examples)), budget) if self.n_workers
                    else self._in_process(prompts, completions, examples, budget))
            errors = sum(o is None for o in outs)
            outs = [o or RewardOutput(self.fallback) for o in outs]
            names = sorted({k for o in outs for k in o.components})
            comps = {k: [o.components.get(k, math.nan) for o in outs] for k in names}
            batch = RewardBatch([o.score for o in outs], comps, errors)
        batch.timeouts = self.timeouts - timeouts
        self.breaker.batch(batch.timeouts, n)
        return batch

    def _deadline(self, seconds: float | None, quiet: bool = False) -> Callable[..., Any] | None:
        """How to call under a deadline of `seconds` here, or None when there is none to enforce (off the main
        thread, said once unless `quiet`)."""
        if seconds is None:
            return None
        if can_interrupt():
            return lambda fn, *args: call_with_deadline(fn, seconds, *args)
        if "unenforced" not in self._logged and not quiet:
            self._logged.add("unenforced")
            logger.warning("reward %r: its %g s timeout cannot be enforced off the main thread (signals); it runs "
                           "without one here (reward.workers >= 1 runs it in worker processes)", self.name,
                           self.timeout)
        return None

    def _in_process(self, prompts, completions, examples, budget: Budget) -> list[RewardOutput | None]:
        """One sample after another, each under its timeout cut to what is left of the batch's `budget`; once
        that is spent, the samples left are not called (LATE)."""
        current = [0, time.monotonic()]  # the sample being scored, since when
        stop = self._watchdog(current, self._deadline(self.timeout, quiet=True) is not None)
        outs: list[RewardOutput | None] = []
        try:
            for i, item in enumerate(zip(prompts, completions, examples)):
                seconds = budget.limit(self.timeout)
                if seconds is not None and seconds <= 0:
                    self._record(len(completions) - i, LATE, f"the batch ran past reward.step_timeout="
                                 f"{self.limits.step:g} s; its {len(completions) - i} samples left were not scored")
                    return outs + [None] * (len(completions) - i)
                current[:] = [i, time.monotonic()]
                outs.append(self._one(i, item, self._deadline(seconds), cut=seconds != self.timeout))
        finally:
            stop.set()
        return outs

    def _watchdog(self, current: list, timed: bool) -> threading.Event:
        """A thread that logs (once per batch) a sample still running after `warn_after` seconds (timed:
        twice the timeout plus one); set the returned event to stop it."""
        stop, limit = threading.Event(), 2 * self.timeout + 1 if timed else self.warn_after

        def watch() -> None:
            while not stop.wait(min(1.0, limit / 4)):
                index, since = current
                if time.monotonic() - since > limit:
                    if not timed:
                        hint = "and has no timeout: it may hang the run (reward.timeout stops such calls)"
                    else:
                        hint = (f"past its {self.timeout:g} s timeout: a signal cannot stop it (C code) or it "
                                "swallows the timeout (a bare except); reward.workers >= 1 runs it in worker "
                                "processes, which are killed when stuck")
                    logger.warning("reward %r has been running for %.0f s on sample %d of the batch %s", self.name,
                                   time.monotonic() - since, index, hint)
                    return

        threading.Thread(target=watch, name=f"reward-watchdog-{self.name}", daemon=True).start()
        return stop

    def _one(self, index: int, item: tuple, deadline: Callable[..., Any] | None, cut: bool) -> RewardOutput | None:
        """One sample; `cut`: its deadline is what was left of the batch's, shorter than its own timeout."""
        try:
            out = to_output(deadline(self.fn, *item) if deadline else self.fn(*item))
        except DeadlineExceeded:
            if cut:
                self._record(1, LATE, f"sample {index} of a batch ran past reward.step_timeout={self.limits.step:g} s")
            else:
                self._record(1, TIMEOUT, f"sample {index} of a batch took longer than {self.timeout:g} s")
            self.breaker.sample(timed_out=not cut)
            return None
        except RewardConfigError:
            raise
        except Exception:  # noqa: BLE001 - the point of this class
            self._record(1, "error", traceback.format_exc())
            out = None
        self.breaker.sample(timed_out=False)
        return out

    def _pooled(self, items: list, budget: Budget) -> list[RewardOutput | None]:
        """In the workers, concurrently; the breaker hears of each sample as it ends."""
        if self._pool is None:
            self._pool = WorkerPool(functools.partial(_apply, self.fn), n_workers=self.n_workers,
                                    timeout=self.timeout)
        outs: list[RewardOutput | None] = []
        ended = self._pool.map(items, budget.end, lambda index, status: self.breaker.sample(status == TIMEOUT))
        for status, value in ended:
            if status == OK:
                outs.append(value)
            else:
                self._record(1, status, f"{status}: {value}")
                outs.append(None)
        return outs

    def _batched(self, prompts, completions, examples, ctx, budget: Budget) -> RewardBatch:
        """One call for the batch, under timeout x batch size cut to the batch's `budget`."""
        n = len(completions)
        own = None if self.timeout is None else self.timeout * max(1, n)
        seconds = budget.limit(own)
        call = functools.partial(self.fn.score_batch, prompts, completions, examples, ctx)
        try:
            if seconds is not None and seconds <= 0:
                raise DeadlineExceeded
            deadline = self._deadline(seconds)
            batch = _check_lengths(deadline(call) if deadline else call(), n, self.name)
        except DeadlineExceeded:
            cut = seconds != own
            self._record(n, LATE if cut else TIMEOUT, f"a batch of {n} took longer than "
                         + (f"reward.step_timeout={self.limits.step:g} s" if cut else f"{n} x {self.timeout:g} s"))
            for _ in range(n):
                self.breaker.sample(timed_out=not cut)
        except RewardConfigError:
            raise
        except Exception:  # noqa: BLE001
            self._record(n, "error", traceback.format_exc())
            self.breaker.sample(timed_out=False)
        else:
            self.breaker.sample(timed_out=False)
            return batch
        return RewardBatch([self.fallback] * n, {}, n)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
