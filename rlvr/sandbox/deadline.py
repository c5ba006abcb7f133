"""A wall-clock deadline on one call in this process: a SIGALRM timer on the main thread.

Why a signal: a thread cannot be stopped, and a worker process needs a picklable function and costs
a start-up. A timer signal interrupts Python code and blocking calls (sleep, socket reads, waits) of
the main thread at the cost of two system calls. It cannot interrupt C code that never returns to
the interpreter (a regex backtracking for ever, a huge integer power): for such rewards use worker
processes (`rlvr.rewards.pool`), whose watchdog kills a stuck worker. The pool's workers use this
same deadline on their own main thread, and so do the environments' steps (`rlvr.rollout.episode`).
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from typing import Any, Callable

REPEAT = 1.0  # seconds between repeated alarms, should the call swallow the first one


class DeadlineExceeded(BaseException):
    """BaseException so that a reward's `except Exception` cannot swallow it."""


class Budget:
    """A deadline shared by several calls (a batch's rewards: reward.step_timeout): `left()` seconds, None for
    none, and `limit(own)`, the deadline of one call in it: the shorter of its own limit and what is left."""

    def __init__(self, seconds: float | None) -> None:
        self.end = time.monotonic() + seconds if seconds else None

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def limit(self, own: float | None) -> float | None:
        left = self.left()
        return own if left is None else left if own is None else min(own, left)


def can_interrupt() -> bool:
    """Whether `call_with_deadline` can stop a call here: POSIX timers, on the main thread only."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def call_with_deadline(fn: Callable[..., Any], seconds: float, *args: Any) -> Any:
    """`fn(*args)`, or DeadlineExceeded once `seconds` of wall-clock time have passed (main thread only).

    The alarm is raised again every REPEAT seconds should the call swallow it (a bare `except:`), and
    once more on return if the call swallowed it and then finished late: a late result is a timeout.
    An alarm that lands in this function's own bookkeeping (before `fn` starts or after it ended) only
    marks the call as late, so the timer is always cancelled and the previous handler restored. A
    timer armed by the caller (an enclosing deadline, a user's `signal.alarm`) is never extended: this
    call gets at most the time it has left, and it is re-armed with what remains afterwards.
    """
    if seconds <= 0:
        raise ValueError(f"a deadline needs seconds > 0, got {seconds}")
    here, expired = inspect.currentframe(), [False]

    def on_alarm(signum: int, frame: Any) -> None:
        expired[0] = True
        if frame is not here:  # inside fn, not in the bookkeeping below
            raise DeadlineExceeded(f"exceeded {seconds:g} s")

    start = time.monotonic()
    outer, outer_interval = signal.setitimer(signal.ITIMER_REAL, 0)  # pause the caller's timer, if any
    previous = signal.signal(signal.SIGALRM, on_alarm)
    delay = min(seconds, outer) if outer else seconds
    try:
        signal.setitimer(signal.ITIMER_REAL, delay, min(REPEAT, delay))
        value = _call(fn, args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)  # None: set from C
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-6), outer_interval)
    if expired[0]:
        raise DeadlineExceeded(f"exceeded {seconds:g} s")
    return value


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    """A frame of its own between the bookkeeping and `fn`: a C function (`time.sleep`) called straight
    from `call_with_deadline` would receive the alarm in the bookkeeping frame and never be stopped."""
    return fn(*args)
