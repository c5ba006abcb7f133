"""Reward timeouts bound a batch, not a sample: one deadline for the batch (reward.step_timeout), samples scored
concurrently in the worker pool, and a circuit breaker that stops the run (one line naming the reward) when a
reward keeps timing out; timeouts are counted in reward/timeouts. A reward hanging on every sample cost
reward.timeout per sample of every step (64 x 10 s) and trained on fallback scores."""

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rewards import CombinedReward, RewardOutput, SafeReward, TRLReward
from rlvr.rewards.breaker import Breaker, RewardTimingOut, TimeoutLimits
from rlvr.rewards.pool import LATE, OK, WorkerPool
from rlvr.sandbox.deadline import Budget

FOREVER = 10**6
OFF = TimeoutLimits()
# No test here bounds the wall-clock time of a batch by the time its samples take: a busy machine (two xdist
# workers, Ray, load 70 on 2 cores) stretches start-up and scheduling by seconds. What is asserted is what the
# samples themselves record (when they ran, how many started) and which outcome each got.


def _note(example):
    """Count a call in the file the example names (worker processes too)."""
    if "log" in example:
        with open(example["log"], "a") as log:
            log.write("call\n")


def _calls(log) -> int:
    return log.read_text().count("\n") if log.exists() else 0


def hangs(prompt, completion, example):
    _note(example)
    time.sleep(FOREVER)


def sleeps(prompt, completion, example):
    """0.3 s a sample; returns when it ran (time.monotonic is CLOCK_MONOTONIC: one clock for every process)."""
    start = time.monotonic()
    time.sleep(0.3)
    return RewardOutput(1.0, {"start": start, "end": time.monotonic(), "pid": os.getpid()})


def hangs_on_h(prompt, completion, example):
    if completion == "h":
        time.sleep(FOREVER)
    return 1.0


def _sleep_item(seconds):
    time.sleep(seconds)
    return seconds


def _batch(safe, completions, log=None):
    examples = [{"log": str(log)} if log else {} for _ in completions]
    return safe.score_batch(["p"] * len(completions), completions, examples)


def test_the_budget_by_hand():
    assert Budget(None).left() is None and Budget(0).limit(3.0) == 3.0 and Budget(None).limit(None) is None
    budget = Budget(10.0)
    assert 9.0 < budget.left() <= 10.0 and budget.limit(2.0) == 2.0 and 9.0 < budget.limit(None) <= 10.0
    assert Budget(1e-9).limit(2.0) < 1e-3


@pytest.mark.parametrize("workers", [0, 1])
def test_a_step_deadline_bounds_the_batch_and_counts_what_it_cut(workers):
    """10 samples of 0.3 s (3 s) under a 1 s batch deadline: at most 3 end by the deadline and a worker's result
    read late is at most one more, so at most 4 are scored (fewer on a busy machine), the rest time out (0 each,
    counted in reward/timeouts, not toward the breaker's run of timeouts: none ran past its own)."""
    safe = SafeReward(sleeps, timeout=5.0, n_workers=workers, limits=TimeoutLimits(step=1.0, in_a_row=2))
    try:
        _batch(safe, ["a"])  # the workers start at first use, inside that batch's time
        batch = _batch(safe, ["a"] * 10)
    finally:
        safe.close()
    scored = batch.scores.count(1.0)
    assert scored <= 4 and batch.timeouts == batch.errors == 10 - scored and safe.breaker.in_a_row == 0
    assert batch.metrics()["reward/timeouts"] == 10 - scored and batch.scores.count(0.0) == 10 - scored


def test_samples_are_scored_concurrently_in_the_pool():
    """Told by when the samples ran, not by the batch's time (a busy machine once took 4.97 s for 16 x 0.3 s on 4
    workers): at some instant several samples were being scored at once, and never more than the 4 workers."""
    safe = SafeReward(sleeps, timeout=5.0, n_workers=4)
    try:
        pids = set()
        for _ in range(100):  # until each worker is up and has scored (their start-up is not what is measured)
            pids |= set(_batch(safe, ["a"] * 4).components["pid"])
            if len(pids) == 4:
                break
        batch = _batch(safe, ["a"] * 16)
    finally:
        safe.close()
    assert batch.scores == [1.0] * 16
    spans = list(zip(batch.components["start"], batch.components["end"]))
    at_once = max(sum(start <= t < end for start, end in spans) for t, _ in spans)
    assert 2 <= at_once <= 4, spans


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_reward_that_hangs_on_every_sample_trips_the_breaker_fast(workers, tmp_path):
    """The batch stops at the third timeout: 3 calls in this process, 3 + one started on each worker on a fair
    machine; all 64 (64 x 0.5 s) without the breaker. The bound, half the batch, leaves the workers 7 s of lead
    over a stalled trainer process."""
    safe = SafeReward(hangs, timeout=0.5, name="judge", n_workers=workers, limits=TimeoutLimits(in_a_row=3))
    try:
        with pytest.raises(RewardTimingOut, match=r"^reward 'judge' timed out on 3 samples in a row \(reward.timeout"
                                                  r"=0.5 s each, reward.max_timeouts_in_a_row=3\): it hangs"):
            _batch(safe, ["a"] * 64, tmp_path / "calls")
    finally:
        safe.close()
    calls = _calls(tmp_path / "calls")
    assert (calls == 3) if workers == 0 else (3 <= calls <= 32)


def test_the_share_of_a_batch_trips_the_breaker():
    # timeouts of 0.5 s, not less: a sample that returns at once must not time out on a stalled process
    safe = SafeReward(hangs_on_h, timeout=0.5, name="mostly", limits=TimeoutLimits(in_a_row=3, share=0.5))
    batch = _batch(safe, ["h", "h", "a", "h", "a", "a", "a", "a"])  # 3 of 8: under half, never 3 in a row
    assert batch.timeouts == 3 and safe.breaker.in_a_row == 0
    with pytest.raises(RewardTimingOut, match=r"^reward 'mostly' timed out on 4 of a batch's 8 samples \(50%, "
                                              r"reward.max_timeout_share=0.5; reward.timeout=0.5 s a sample\)"):
        _batch(safe, ["h", "h", "a", "h", "h", "a", "a", "a"])


def test_a_hanging_batched_reward_trips_on_its_batch():
    def judge(prompts, completions, **columns):
        time.sleep(FOREVER)

    safe = SafeReward(TRLReward(judge), timeout=0.05, name="judge", limits=TimeoutLimits(in_a_row=5))
    with pytest.raises(RewardTimingOut, match="timed out on 5 samples in a row"):
        _batch(safe, ["a"] * 8)
    cut = SafeReward(TRLReward(judge), timeout=10.0, limits=TimeoutLimits(step=0.2, in_a_row=5))
    batch = _batch(cut, ["a"] * 8)  # cut by the batch's deadline: counted, the run of timeouts untouched
    assert batch.timeouts == 8 and cut.breaker.in_a_row == 0


def test_without_limits_a_safe_reward_never_raises():
    safe = SafeReward(hangs, timeout=0.05)
    assert _batch(safe, ["a"] * 6).timeouts == 6 and safe.limits == OFF


def test_a_combined_reward_counts_its_parts_timeouts_and_passes_its_limits():
    combined = CombinedReward([(hangs_on_h, 1.0, "slow"), (lambda p, c, e: 0.5, 1.0, "fast")], timeout=0.5,
                              limits=TimeoutLimits(in_a_row=4))
    batch = combined.score_batch(["p"] * 3, ["h", "a", "h"], [{}] * 3)
    assert batch.timeouts == 2 and batch.errors == 2 and batch.metrics()["reward/timeouts"] == 2.0
    assert combined.parts[0][0].limits.in_a_row == 4 and combined.parts[1][0].breaker.in_a_row == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.integers(1, 6))
def test_the_breaker_trips_exactly_at_the_first_run_of_n_timeouts(outcomes, n):
    breaker, run = Breaker("r", TimeoutLimits(in_a_row=n), 1.0), 0
    for i, timed_out in enumerate(outcomes):
        run = run + 1 if timed_out else 0
        if run >= n:
            with pytest.raises(RewardTimingOut):
                breaker.sample(timed_out)
            return
        breaker.sample(timed_out)
    assert breaker.in_a_row == run


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 50), st.integers(1, 50), st.floats(0.01, 1.0))
def test_the_share_trips_exactly_at_its_fraction(timeouts, n, share):
    timeouts = min(timeouts, n)
    breaker = Breaker("r", TimeoutLimits(share=share), 1.0)
    if timeouts >= share * n:
        with pytest.raises(RewardTimingOut):
            breaker.batch(timeouts, n)
    else:
        breaker.batch(timeouts, n)


def test_the_pool_answers_late_items_at_its_deadline_and_replaces_the_busy_workers():
    with WorkerPool(_sleep_item, n_workers=2, timeout=30.0) as pool:
        assert pool.map([0.0, 0.0]) == [(OK, 0.0)] * 2  # started
        start = time.monotonic()
        results = pool.map([0.1, FOREVER, FOREVER, 0.1], deadline=time.monotonic() + 1.0)
        assert time.monotonic() - start < 30.0 / 2  # the deadline ended it, not the items' own 30 s timeout
        assert [status for status, _ in results].count(LATE) >= 2 and results[1][0] == LATE
        restarts = pool.restarts
        assert restarts >= 1 and pool.map([0.0, 0.0]) == [(OK, 0.0)] * 2  # fresh workers, no stale answers


def test_what_on_result_raises_ends_the_map_and_no_late_answer_leaks_into_the_next():
    seen = []

    def stop_at_the_first(index, status):
        seen.append(status)
        raise KeyError("enough")

    with WorkerPool(_sleep_item, n_workers=1, timeout=30.0, chunk_size=4) as pool:
        with pytest.raises(KeyError):
            pool.map([0.0, 0.5, 0.5, 0.5], on_result=stop_at_the_first)
        assert seen == [OK]
        assert pool.map([0.25]) == [(OK, 0.25)]  # not one of the abandoned chunk's answers

