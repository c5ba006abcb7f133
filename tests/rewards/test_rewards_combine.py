"""Composition, the TRL adapter, SafeReward (fallback, counting, log once, timeout) and the registry."""

import logging
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rewards import (REWARDS, BatchContext, CombinedReward, RewardBatch, RewardConfigError, RewardOutput,
                          SafeReward, TRLReward, reward_from_name)
from rlvr.tasks.base import Example


def length_reward(prompt, completion, example):
    return float(len(completion))


def slow_reward(prompt, completion, example):
    if completion == "hang":
        time.sleep(30)
    return 1.0


def trl_style(prompts, completions, answer, **kwargs):
    # TRL passes dataset columns as keyword lists; None = not applicable
    return [None if a is None else float(c == a) for c, a in zip(completions, answer)]


def broken(prompt, completion, example):
    if completion == "boom":
        raise RuntimeError("reward bug")
    return 0.5


def test_weighted_sum_and_components_by_hand():
    combined = CombinedReward([(length_reward, 0.5, "len"), (TRLReward(trl_style), 2.0, "match")])
    batch = combined.score_batch(["p"] * 3, ["ab", "x", "zzzz"],
                                 [{"answer": "ab"}, {"answer": None}, {"answer": "q"}])
    # sample 0: 0.5*2 + 2*1 = 3; sample 1: 0.5*1 + (None -> nothing) = 0.5; sample 2: 0.5*4 + 2*0 = 2
    assert batch.scores == [3.0, 0.5, 2.0]
    assert batch.components["len"] == [2.0, 1.0, 4.0]
    assert batch.components["match"][0] == 1.0 and math.isnan(batch.components["match"][1])
    metrics = batch.metrics()
    assert metrics == {"reward/len": 7 / 3, "reward/match": 0.5, "reward/errors": 0.0, "reward/timeouts": 0.0}


def test_sample_with_no_applicable_part_scores_zero():
    combined = CombinedReward([(TRLReward(lambda prompts, completions, **kw: [None] * len(completions)), 1.0, "n")])
    batch = combined.score_batch(["p"], ["c"], [{}])
    assert batch.scores == [0.0] and "reward/n" not in batch.metrics()


def test_reward_output_components_are_namespaced():
    def with_parts(prompt, completion, example):
        return RewardOutput(1.0, {"format": 1.0, "correct": 0.0})

    batch = CombinedReward([(with_parts, 1.0, "r1")]).score_batch(["p"], ["c"], [Example("p", "a")])
    assert set(batch.components) == {"r1", "r1/format", "r1/correct"}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=1, max_size=8), st.floats(-3, 3), st.floats(-3, 3))
def test_combination_is_linear(values, w1, w2):
    def table(prompt, completion, example):
        return values[int(completion)]

    idx = [str(i) for i in range(len(values))]
    args = (["p"] * len(idx), idx, [{}] * len(idx))
    both = CombinedReward([(table, w1, "a"), (table, w2, "b")]).score_batch(*args).scores
    assert both == pytest.approx([(w1 + w2) * v for v in values], abs=1e-9)


def test_safe_reward_fallback_counts_and_logs_first_traceback_once(caplog):
    safe = SafeReward(broken, fallback=-1.0)
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards"):
        batch = safe.score_batch(["p"] * 4, ["ok", "boom", "boom", "ok"], [{}] * 4)
        safe.score_batch(["p"], ["boom"], [{}])
    assert batch.scores == [0.5, -1.0, -1.0, 0.5] and batch.errors == 2
    assert safe.errors == 3
    logged = [r for r in caplog.records if "reward 'broken' failed" in r.getMessage()]
    assert len(logged) == 1 and "RuntimeError: reward bug" in logged[0].getMessage()


def test_combined_counts_errors_for_reward_errors_metric():
    combined = CombinedReward([(broken, 1.0, "b"), (length_reward, 1.0, "l")], fallback=0.0)
    batch = combined.score_batch(["p"] * 2, ["boom", "ok"], [{}] * 2)
    assert batch.errors == 1 and batch.metrics()["reward/errors"] == 1.0
    assert batch.scores == [4.0, 2.5]


def test_safe_reward_timeout_runs_in_worker_and_falls_back():
    safe = SafeReward(slow_reward, fallback=0.0, timeout=0.5, n_workers=1)
    try:
        batch = safe.score_batch(["p"] * 3, ["a", "hang", "b"], [{}] * 3)  # unstopped, "hang" never ends
        assert batch.scores == [1.0, 0.0, 1.0] and batch.errors == 1 and safe.timeouts == 1
    finally:
        safe.close()


def test_worker_processes_need_a_picklable_per_sample_function():
    with pytest.raises(ValueError, match="picklable"):
        SafeReward(lambda p, c, e: 1.0, timeout=1.0, n_workers=1)
    assert SafeReward(TRLReward(trl_style), timeout=1.0, n_workers=1).n_workers == 0  # batched: in this process


def test_bad_return_types_are_errors_not_crashes():
    returns = {"str": "1.0", "inf": math.inf, "list": [1], "nan": math.nan, "none": None, "ok": 0.5}
    safe = SafeReward(lambda p, c, e: returns[c])
    batch = safe.score_batch(["p"] * 6, list(returns), [{}] * 6)
    assert batch.errors == 4 and batch.scores[:4] == [0.0] * 4 and batch.scores[5] == 0.5
    assert math.isnan(batch.scores[4])  # None: not applicable, not an error


def test_trl_wrong_length_is_counted_and_config_errors_propagate():
    short = TRLReward(lambda prompts, completions, **kw: [1.0])
    assert SafeReward(short).score_batch(["p"] * 2, ["a", "b"], [{}] * 2).errors == 2

    class Misconfigured:
        def score_batch(self, prompts, completions, examples, ctx=None):
            raise RewardConfigError("needs lengths")

    with pytest.raises(RewardConfigError):
        CombinedReward([(Misconfigured(), 1.0, "m")]).score_batch(["p"], ["c"], [{}])


def test_combined_validates_parts():
    with pytest.raises(ValueError):
        CombinedReward([])
    with pytest.raises(ValueError, match="unique"):
        CombinedReward([(broken, 1, "a"), (broken, 1, "a")])
    with pytest.raises(ValueError, match="^weight of 'a' must be a finite number, got inf$"):
        CombinedReward([(broken, math.inf, "a")])
    with pytest.raises(ValueError, match="^weight of 'a' must be a finite number, got True$"):
        CombinedReward([(broken, True, "a")])  # float(True) was accepted as weight 1.0
    for timeout, words in ((math.nan, "timeout must be a finite number, got nan"), (-1, "timeout must be >= 0")):
        with pytest.raises(ValueError, match=f"^{words}"):
            SafeReward(broken, timeout=timeout)
    with pytest.raises(ValueError, match="reward, weight, name"):
        CombinedReward([(broken, 1.0)])


def test_per_sample_call_matches_batch():
    combined = CombinedReward.single(length_reward)
    out = combined("p", "abc", {})
    assert out.score == 3.0 and out.components == {"task": 3.0}


def test_registry_names_and_errors():
    for name in ("math", "r1_zero", "format", "format_strict", "language", "countdown"):
        assert callable(reward_from_name(name)) or hasattr(reward_from_name(name), "score_batch")
    assert set(REWARDS) >= {"math", "r1_zero", "format", "language", "kimi_length", "overlong", "code"}
    with pytest.raises(ValueError, match="choose from .*'math'"):
        reward_from_name("maths")
    with pytest.raises(ValueError, match="bad options"):
        reward_from_name("language", langue="en")
    with pytest.raises(ValueError, match="no options"):
        reward_from_name("format", strict=True)


def test_batch_context_validation():
    with pytest.raises(ValueError):
        BatchContext(group_size=0)
    assert RewardBatch([1.0]).metrics() == {"reward/errors": 0.0, "reward/timeouts": 0.0}


def test_a_slow_reward_without_timeout_is_logged_not_silent(caplog):
    def slow(prompt, completion, example):
        time.sleep(2.0 if completion == "slow" else 0.0)
        return 1.0

    # a margin of a second either side: a busy machine must not stall a quick sample past warn_after
    safe = SafeReward(slow, name="slow_one", warn_after=1.0, timeout=None)
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards"):
        assert safe.score_batch(["p"] * 3, ["a", "slow", "b"], [{}] * 3).scores == [1.0] * 3
        safe.score_batch(["p"] * 2, ["a", "b"], [{}] * 2)
    warnings = [r.getMessage() for r in caplog.records if "has no timeout" in r.getMessage()]
    assert len(warnings) == 1 and "reward 'slow_one'" in warnings[0] and "sample 1 of the batch" in warnings[0]
