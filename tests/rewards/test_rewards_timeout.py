"""Rewards get a default timeout: the in-process deadline, which rewards take which path, and the
fallback + reward/errors count of a timed-out sample."""

import logging
import math
import signal
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import RewardConfig
from rlvr.rewards import (CodeReward, CombinedReward, KimiLengthReward, MathReward, OverlongPenalty, SafeReward,
                          StepGated, TRLReward, reward_from_name)
from rlvr.rewards.base import bounded, is_bounded
from rlvr.sandbox.deadline import REPEAT, DeadlineExceeded, call_with_deadline, can_interrupt
from rlvr.rewards.safe import DEFAULT_TIMEOUT, worker_problem
from rlvr.tasks import get_task
from rlvr.tasks.gym import GymReward

FOREVER = 10**6  # seconds: a sleep that only a timeout ends
SLACK = 10.0  # seconds of scheduling slack: a busy machine (two xdist workers, Ray, load 70 on 2 cores) stalls a
# process for seconds; what an upper bound tells is that the deadline ended a call that alone would never end, not
# how fast the machine is (the lower bounds tell it did not end early)


def hangs_on_h(prompt, completion, example):
    if completion == "h":
        time.sleep(FOREVER)
    return 1.0


def _timer_is_clear() -> bool:
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


# --- the deadline ----------------------------------------------------------------------------------

def test_deadline_by_hand_value_sleep_busy_loop_and_c_function():
    handler = signal.getsignal(signal.SIGALRM)
    assert call_with_deadline(lambda a, b: a + b, 1.0, 2, 3) == 5
    for fn, args in [(time.sleep, (FOREVER,)), (lambda: [None for _ in iter(int, 1)], ())]:  # C sleep, busy loop
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            call_with_deadline(fn, 0.2, *args)
        assert 0.2 <= time.monotonic() - start < 0.2 + SLACK
    assert _timer_is_clear() and signal.getsignal(signal.SIGALRM) is handler


def test_a_swallowed_alarm_comes_again_and_a_late_result_is_a_timeout():
    caught = []

    def swallows_once():
        try:
            time.sleep(FOREVER)
        except BaseException:  # noqa: BLE001 - a careless reward
            caught.append(time.monotonic())
        time.sleep(FOREVER)

    def swallows_then_returns():
        try:
            time.sleep(FOREVER)
        except BaseException:  # noqa: BLE001
            return 1.0

    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        call_with_deadline(swallows_once, 0.2)
    again = min(REPEAT, 0.2)  # the alarm repeats every min(REPEAT, seconds)
    # measured from before the call: a timer never fires early, so the second alarm comes at 0.2 + `again` or
    # later (read from when the reward caught the first, a stalled process once read 0.198 s for 0.2 s)
    assert len(caught) == 1 and 0.2 + again <= time.monotonic() - start < 0.2 + again + SLACK
    with pytest.raises(DeadlineExceeded):
        call_with_deadline(swallows_then_returns, 0.2)
    assert time.monotonic() - start < 0.6 + SLACK and _timer_is_clear()


def test_an_outer_timer_is_restored_and_never_extended():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert call_with_deadline(lambda: 7, 5.0) == 7
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25.0 < left <= 30.0 and not fired  # the caller's timer goes on, less the time spent

        signal.setitimer(signal.ITIMER_REAL, 0.2)  # shorter than the deadline: it wins
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            call_with_deadline(time.sleep, 5.0, FOREVER)
        time.sleep(0.05)
        assert time.monotonic() - start < 0.2 + SLACK and len(fired) == 1  # and the caller's handler ran
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 100.0), st.lists(st.integers(-5, 5), max_size=5))
def test_a_call_within_its_deadline_returns_its_value_and_leaves_no_timer(seconds, values):
    handler = signal.getsignal(signal.SIGALRM)
    assert call_with_deadline(sorted, seconds, values) == sorted(values)
    assert _timer_is_clear() and signal.getsignal(signal.SIGALRM) is handler


def test_deadline_needs_the_main_thread_and_positive_seconds():
    assert can_interrupt()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(can_interrupt()))
    worker.start()
    worker.join()
    assert seen == [False]
    with pytest.raises(ValueError, match="seconds > 0"):
        call_with_deadline(sorted, 0.0, [])


# --- which rewards take which path --------------------------------------------------------------------

def test_rlvr_rewards_are_bounded_and_outside_ones_are_not():
    own = [reward_from_name(n) for n in ("math", "r1_zero", "format", "format_strict", "language", "countdown",
                                         "kimi_length")] + [reward_from_name("overlong", cache_len=4)]
    own += [get_task(name).reward_fn() for name in ("sort", "arithmetic")]
    own += [MathReward(), CodeReward(), KimiLengthReward(), StepGated(OverlongPenalty(4), 3)]
    assert all(is_bounded(r) for r in own)
    outside = [hangs_on_h, TRLReward(lambda prompts, completions, **kw: [1.0] * len(completions)), GymReward()]
    assert not any(is_bounded(r) for r in outside)  # GymReward: reasoning_gym's own scorers, not ours
    assert SafeReward(reward_from_name("format")).timeout is None and SafeReward(hangs_on_h).timeout == 10.0
    assert DEFAULT_TIMEOUT == RewardConfig.timeout == 10.0


def test_a_bounded_reward_runs_without_a_deadline():
    @bounded
    def slowish(prompt, completion, example):
        time.sleep(0.3)
        return 1.0

    safe = SafeReward(slowish, timeout=0.05)
    assert safe.score_batch(["p"], ["c"], [{}]).scores == [1.0] and safe.errors == 0


# --- a timed-out sample: fallback, counted, logged once ----------------------------------------------

def test_a_reward_that_sleeps_forever_is_an_error_within_the_timeout(caplog):
    combined = CombinedReward([(hangs_on_h, 1.0, "mine"), (lambda p, c, e: 0.5, 1.0, "other")], fallback=-1.0,
                              timeout=0.3)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards"):
        batch = combined.score_batch(["p"] * 4, ["a", "h", "h", "b"], [{}] * 4)
    assert time.monotonic() - start < 2 * 0.3 + SLACK
    assert batch.scores == [1.5, -0.5, -0.5, 1.5] and batch.components["mine"] == [1.0, -1.0, -1.0, 1.0]
    assert batch.errors == 2 and batch.metrics()["reward/errors"] == 2.0
    assert combined.parts[0][0].timeouts == 2
    logged = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(logged) == 1 and "reward 'mine'" in logged[0] and "0.3 s" in logged[0]


def test_a_hanging_trl_reward_scores_the_fallback_for_its_batch():
    def judge(prompts, completions, **columns):
        time.sleep(FOREVER)

    safe = SafeReward(TRLReward(judge), fallback=0.0, timeout=0.05)
    start = time.monotonic()
    batch = safe.score_batch(["p"] * 3, ["a", "b", "c"], [{}] * 3)
    assert batch.scores == [0.0] * 3 and batch.errors == 3 and safe.timeouts == 3
    assert time.monotonic() - start < 3 * 0.05 + SLACK


def test_timeout_zero_means_no_limit():
    def slow(prompt, completion, example):
        time.sleep(0.3)
        return 2.0

    assert SafeReward(slow, timeout=0).score_batch(["p"], ["c"], [{}]).scores == [2.0]
    with pytest.raises(ValueError, match="timeout"):
        SafeReward(slow, timeout=math.inf)
    with pytest.raises(ValueError, match="needs a timeout"):
        SafeReward(hangs_on_h, timeout=0, n_workers=1)


def test_off_the_main_thread_the_timeout_is_not_enforced_and_says_so(caplog):
    out = []
    safe = SafeReward(lambda p, c, e: 3.0, timeout=1.0, name="threaded")
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards"):
        worker = threading.Thread(target=lambda: out.append(safe.score_batch(["p"], ["c"], [{}]).scores))
        worker.start()
        worker.join()
    assert out == [[3.0]]
    assert any("reward 'threaded'" in r.getMessage() and "main thread" in r.getMessage() for r in caplog.records)


def test_worker_processes_stop_a_hung_reward():
    safe = SafeReward(hangs_on_h, fallback=0.0, timeout=0.5, n_workers=1)
    try:
        batch = safe.score_batch(["p"] * 3, ["a", "h", "b"], [{}] * 3)
        assert batch.scores == [1.0, 0.0, 1.0] and batch.errors == 1 and safe.timeouts == 1
    finally:
        safe.close()


def test_worker_problem_names_what_a_worker_cannot_import(monkeypatch):
    assert worker_problem(hangs_on_h) is None
    assert worker_problem(reward_from_name("format")) is None  # bounded: stays in this process
    assert "not picklable" in worker_problem(lambda p, c, e: 1.0)

    def scripted(prompt, completion, example):
        return 1.0

    scripted.__module__, scripted.__qualname__ = "__main__", "scripted"
    monkeypatch.setattr(sys.modules["__main__"], "scripted", scripted, raising=False)
    assert "__main__" in worker_problem(scripted)
