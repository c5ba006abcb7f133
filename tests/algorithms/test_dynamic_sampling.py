"""DAPO dynamic sampling (refill logic, by hand and as properties) and overlong filtering."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.dynamic_sampling import (
    RolloutSampler,
    choose_groups,
    informative_groups,
    next_round_size,
    overlong_filter,
    overlong_loss_mask,
)
from rlvr.rewards.base import RewardOutput
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.tasks.base import Example
from rlvr.rewards.scoring import build_reward
from rlvr.seeds import derive_seed


def test_informative_groups_by_hand():
    flags = informative_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5]), 2)
    assert flags.tolist() == [False, True, False]
    with pytest.raises(ValueError):
        informative_groups(torch.ones(5), 2)


def test_next_round_size_by_hand():
    assert next_round_size(missing=4, kept=4, sampled=8, cap=8) == 8  # keep rate 1/2: 4 / 0.5
    assert next_round_size(missing=2, kept=6, sampled=8, cap=8) == 3  # 2 / 0.75 = 2.67 -> 3
    assert next_round_size(missing=3, kept=0, sampled=8, cap=8) == 8  # nothing kept yet: a full batch
    assert next_round_size(missing=1, kept=1, sampled=1, cap=8) == 1
    with pytest.raises(ValueError):
        next_round_size(missing=9, kept=0, sampled=8, cap=8)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.integers(0, 64), st.integers(0, 64))
def test_next_round_size_is_within_missing_and_cap(cap, kept, extra):
    missing = max(1, cap - kept % (cap + 1))
    size = next_round_size(missing, kept, kept + extra, cap)
    assert missing <= size <= cap


def test_choose_groups_prefers_informative_and_pads_with_flat():
    assert choose_groups([False, True, False, True], 3) == [1, 3, 0]
    assert choose_groups([True, True, True], 2) == [0, 1]
    with pytest.raises(ValueError):
        choose_groups([True], 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=30), st.data())
def test_choose_groups_properties(flags, data):
    k = data.draw(st.integers(1, len(flags)))
    chosen = choose_groups(flags, k)
    assert len(chosen) == len(set(chosen)) == k
    assert sum(flags[i] for i in chosen) == min(k, sum(flags))  # as many informative groups as exist


def test_overlong_filter_zeroes_truncated_rows():
    adv = torch.tensor([1.0, -2.0, 3.0])
    assert overlong_filter(adv, torch.tensor([False, True, False])).tolist() == [1.0, 0.0, 3.0]
    per_token = torch.ones(2, 3)
    assert overlong_filter(per_token, torch.tensor([True, False])).tolist() == [[0.0] * 3, [1.0] * 3]
    with pytest.raises(ValueError):
        overlong_filter(adv, torch.tensor([0, 1, 0]))


# --- the sampler, on a scripted engine: prompt "flat*" always answers 0, "mixed*" answers 0, 1, 0, 1 ---

class ListStream:
    def __init__(self, prompts):
        self.prompts, self.position = prompts, 0

    def next(self, n):
        out = self.prompts[self.position : self.position + n]
        self.position += n
        return out


class ScriptedEngine:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), sampling.seed))
        out = []
        for p in prompts:
            for j in range(n):
                text = str(j % 2) if p.startswith("mixed") else "0"
                out.append(Completion(p, [1], [5] * (1 + j), [0.0] * (1 + j), text, "stop"))
        return out


class BitTask:
    name = "bits"

    def reward_fn(self):
        return lambda prompt, completion, example: RewardOutput(float(completion == "1"))

    def is_correct(self, completion, example):
        return completion == "1"


def _sampler(prompts, num_groups=2, dynamic=True, rounds=3, extra=(), metric="reward"):
    task = BitTask()
    return RolloutSampler(ScriptedEngine(), ListStream([Example(p, "1") for p in prompts]), task,
                          build_reward(task, extra), SamplingParams(max_new_tokens=4), group_size=2,
                          num_groups=num_groups, seed=7, dynamic=dynamic, max_extra_rounds=rounds, metric=metric)


def test_refills_flat_groups_in_an_extra_round():
    sampler = _sampler(["flat0", "mixed0", "flat1", "mixed1", "mixed2"])
    batch = sampler.sample(step=3)
    assert [c.prompt for c in batch.completions] == ["mixed0", "mixed0", "mixed1", "mixed1"]
    assert batch.scores.rewards == [0.0, 1.0, 0.0, 1.0]
    assert batch.stats == {"sampling/rounds": 2.0, "sampling/sampled_groups": 4.0,
                           "sampling/informative_share": 0.5, "sampling/padded_groups": 0.0,
                           "sampling/reward/task": 0.25}  # 2 of the 8 sampled completions answered 1
    # round 0 uses the seed of a run without dynamic sampling; round 1 asks 1 missing / keep rate 1/2 = 2
    (first, seed0), (second, seed1) = sampler.engine.calls
    assert seed0 == derive_seed(7, 3, 0) != seed1 == derive_seed(7, 3, 0, 1) and len(second) == 2


def test_cap_on_extra_rounds_pads_with_flat_groups():
    sampler = _sampler([f"flat{i}" for i in range(20)], rounds=1)
    batch = sampler.sample(step=1)
    assert len(batch.completions) == 4 and len(sampler.engine.calls) == 2
    assert batch.stats["sampling/padded_groups"] == 2.0 and batch.stats["sampling/informative_share"] == 0.0


def test_without_dynamic_sampling_one_round_as_is():
    sampler = _sampler(["flat0", "mixed0", "mixed1"], dynamic=False)
    batch = sampler.sample(step=1)
    assert [c.prompt for c in batch.completions] == ["flat0", "flat0", "mixed0", "mixed0"] and batch.stats == {}


def test_extra_rewards_are_added_and_can_make_a_group_informative():
    # overlong with max_len 4 (the sampler's budget) and cache 2: lengths 1, 2 -> 0; 3 -> -0.5
    extra = [{"name": "overlong", "weight": 2.0, "options": {"cache_len": 2}}]
    sampler = _sampler(["flat0", "flat1"], num_groups=1, extra=extra, rounds=0)
    batch = sampler.sample(step=1)
    assert batch.scores.rewards == [0.0, 0.0] and batch.scores.components["reward/overlong"] == 0.0
    sampler = _sampler(["flat0"], num_groups=1, dynamic=False, extra=extra)
    sampler.group_size = 3
    batch = sampler.sample(step=1)
    assert batch.scores.rewards == [0.0, 0.0, -1.0]


def test_reward_terms_describe_the_trained_batch_not_the_dropped_groups():
    """reward/<term> averages the same completions as `reward` (the kept groups); the means over every
    sampled completion are logged apart, as sampling/reward/<term>."""
    batch = _sampler(["flat0", "mixed0", "flat1", "mixed1", "mixed2"]).sample(step=3)
    reward = sum(batch.scores.rewards) / len(batch.scores.rewards)
    assert batch.scores.components["reward/task"] == reward == 0.5
    assert batch.stats["sampling/reward/task"] == 0.25
    # several terms: the weighted sum of the term means is the batch's mean reward
    extra = [{"name": "overlong", "weight": 2.0, "options": {"cache_len": 3}}]  # lengths 1, 2 -> 0, -1/3
    batch = _sampler(["flat0", "mixed0", "flat1", "mixed1"], extra=extra, metric="accuracy").sample(step=1)
    c = batch.scores.components
    assert [x.prompt for x in batch.completions] == ["mixed0", "mixed0", "mixed1", "mixed1"]
    assert c["reward/task"] + 2.0 * c["reward/overlong"] == pytest.approx(sum(batch.scores.rewards) / 4)


def test_metric_accuracy_ignores_shaping_terms():
    extra = [{"name": "overlong", "weight": 1.0, "options": {"cache_len": 3}}]  # lengths 1, 2 -> 0, -1/3
    by_reward = _sampler(["flat0", "mixed0", "mixed1"], num_groups=1, extra=extra, metric="reward")
    by_accuracy = _sampler(["flat0", "mixed0", "mixed1"], num_groups=1, extra=extra, metric="accuracy")
    assert by_reward.sample(step=1).completions[0].prompt == "flat0"  # lengths differ: rewards differ
    assert by_accuracy.sample(step=1).completions[0].prompt == "mixed0"  # all wrong: dropped


def test_concat_weights_component_means_by_completions_and_sums_errors():
    from rlvr.algorithms.dynamic_sampling import Rollout
    from rlvr.rewards.scoring import Scores

    def part(n, task, errors):
        comps = [Completion("p", [1], [2], [0.0], "0", "stop")] * n
        return Rollout(comps, [None] * n, Scores([0.0] * n, [False] * n, {"reward/task": task, "reward/errors": errors}))

    merged = Rollout.concat([part(2, 1.0, 1.0), part(4, 0.0, 2.0)])
    assert merged.scores.components == {"reward/errors": 3.0, "reward/task": pytest.approx(1 / 3)}
    assert len(merged.completions) == 6


def test_default_rule_is_dapos_accuracy_strictly_between_0_and_1():
    """An all-wrong group whose overlong penalty varies is flat in accuracy: DAPO drops it."""
    extra = [{"name": "overlong", "weight": 1.0, "options": {"cache_len": 3}}]  # lengths 1, 2 -> 0, -1/3
    task = BitTask()
    sampler = RolloutSampler(ScriptedEngine(), ListStream([Example(p, "1") for p in ["flat0", "mixed0"]]), task,
                             build_reward(task, extra), SamplingParams(max_new_tokens=4), group_size=2,
                             num_groups=1, seed=7, dynamic=True, max_extra_rounds=1)
    batch = sampler.sample(step=1)
    assert [c.prompt for c in batch.completions] == ["mixed0", "mixed0"]
    assert batch.stats["sampling/informative_share"] == 0.5
    from rlvr.config import load_config

    assert load_config(None, ["algorithm.preset=dapo"]).algorithm.dynamic_sampling_metric == "accuracy"
    assert load_config(None, []).algorithm.dynamic_sampling_metric == "accuracy"


def test_overlong_loss_mask_clears_truncated_rows_unless_all_are():
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    out = overlong_loss_mask(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[True, True, False], [False, False, False], [True, False, False]]
    assert overlong_loss_mask(mask, torch.ones(3, dtype=torch.bool)).tolist() == mask.tolist()
    with pytest.raises(ValueError, match="truncated"):
        overlong_loss_mask(mask, torch.tensor([0, 1, 0]))


def _overlong_objective(aggregation):
    """The group objective with one optimizer step per rollout, no reference, the overlong filter on: its
    `prepare` asks the Learner for no pass."""
    from rlvr.algorithms.grpo import GroupPolicyGradient, GroupObjective

    return GroupObjective(GroupPolicyGradient(aggregation=aggregation, loss_constant=4.0), single_step=True,
                          overlong_filter=True)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum", "seq_sum_constant"])
def test_overlong_filter_removes_truncated_tokens_from_the_loss(aggregation):
    """DAPO: the loss with a truncated completion equals the loss of the batch without its tokens, so a
    truncated completion no longer counts in token_mean's denominator (it did when only its advantage was 0)."""
    from rlvr.algorithms.grpo import accumulation_denominator
    from rlvr.rollout.batch import build_batch
    from rlvr.rollout.scored import ScoredBatch

    scored = ScoredBatch(prompts=["p", "p", "q", "q"], prompt_ids=[[1]] * 4,
                         completion_ids=[[5, 6], [5, 6, 7, 8], [5], [5, 6, 7]], sampler_logprobs=[[0.0]] * 4,
                         rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]), correct=[True, False, True, False],
                         finish_reasons=["stop", "length", "stop", "stop"], group_size=2)
    objective = _overlong_objective(aggregation)
    batch = build_batch(scored.prompt_ids, scored.completion_ids, None, scored.rewards, 0)
    assert objective.prepare(batch, scored, passes=None) == {}
    adv = batch.advantages
    assert adv[1] == 0 and not batch.mask[1].any() and batch.mask.sum() == 6  # 2 + 1 + 3 tokens left
    logp = torch.linspace(-2.0, -0.5, batch.mask.numel()).reshape(batch.mask.shape).requires_grad_()
    loss, _ = objective.pg.loss(logp, logp.detach(), adv, batch.mask, None,
                             accumulation_denominator(aggregation, batch.mask))
    kept = torch.tensor([0, 2, 3])
    ref, _ = objective.pg.loss(logp[kept], logp.detach()[kept], adv[kept], batch.mask[kept], None,
                            accumulation_denominator(aggregation, batch.mask[kept]))
    if aggregation == "token_mean":
        torch.testing.assert_close(loss, ref)  # same token count: the truncated row is out of the denominator
    else:
        torch.testing.assert_close(loss * 4, ref * 3)  # per-sequence modes still divide by B = 4
