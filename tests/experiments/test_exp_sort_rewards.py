"""The sorting toy's three reward designs (CS336 lecture 17) and the hack of the inclusion reward."""

import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rlvr.pipelines.experiments.sort_rewards import (
    LECTURE_PROMPTS,
    PROMPT_SETS,
    REPEATED_PROMPTS,
    SORT_REWARDS,
    exact_match,
    inclusion_ordering_reward,
    max_sort_reward,
    position_reward,
)
from rlvr.pipelines.experiments.sort_toy import SortToyConfig, run_sort_toy


def test_rewards_by_hand():
    p = torch.tensor([3, 1, 0, 2])  # sorted: 0 1 2 3
    assert exact_match(p, torch.tensor([0, 1, 2, 3])).item() == 1.0
    assert exact_match(p, torch.tensor([0, 1, 3, 2])).item() == 0.0
    assert position_reward(p, torch.tensor([0, 1, 3, 2])).item() == 2.0  # positions 0 and 1 match
    assert position_reward(p, torch.tensor([3, 2, 1, 0])).item() == 0.0
    # the hack: [1 0 2 2] sorted is [0 1 2 2]; [0 0 1 2] has every prompt token and 3 ordered pairs
    hacked, prompt = torch.tensor([0, 0, 1, 2]), torch.tensor([1, 0, 2, 2])
    assert inclusion_ordering_reward(prompt, hacked).item() == 7.0 == max_sort_reward("inclusion", 4)
    assert exact_match(prompt, hacked).item() == 0.0 and position_reward(prompt, hacked).item() == 2.0
    with pytest.raises(ValueError, match="lengths differ"):
        exact_match(p, torch.tensor([0, 1]))


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=5), st.data())
def test_reward_properties(prompt, data):
    response = data.draw(st.lists(st.integers(0, 4), min_size=len(prompt), max_size=len(prompt)))
    p, r, L = torch.tensor(prompt), torch.tensor(response), len(prompt)
    for name, fn in SORT_REWARDS.items():
        assert 0 <= fn(p, r).item() <= max_sort_reward(name, L)
        assert fn(p, p.sort().values).item() == max_sort_reward(name, L)  # the sorted answer scores the maximum
    assert exact_match(p, r).item() == float(position_reward(p, r).item() == L)  # exact = every position
    # a loop over the lecture's definitions
    truth = sorted(prompt)
    assert position_reward(p, r).item() == sum(x == y for x, y in zip(response, truth))
    assert inclusion_ordering_reward(p, r).item() == (sum(x in response for x in prompt)
                                                      + sum(x <= y for x, y in zip(response, response[1:])))


def _maximisers(prompt):
    every = torch.tensor(list(itertools.product(range(5), repeat=len(prompt))))
    rewards = inclusion_ordering_reward(torch.tensor(prompt), every)
    return [tuple(r) for r in every[rewards == max_sort_reward("inclusion", len(prompt))].tolist()]


def test_inclusion_is_hackable_only_with_repeated_tokens():
    """Enumerating every response: on the lecture's prompts the sorted one is the only maximiser; on
    prompts that repeat a token, five responses score the maximum and only one is sorted."""
    for prompt in LECTURE_PROMPTS:
        assert _maximisers(prompt) == [tuple(sorted(prompt))]
    for prompt in REPEATED_PROMPTS:
        found = _maximisers(prompt)
        assert len(found) == 5 and tuple(sorted(prompt)) in found
    assert set(PROMPT_SETS) == {"lecture", "repeated"}


def test_run_records_exact_match_and_reward_at_max():
    res = run_sort_toy(SortToyConfig(delta="normalized", reward="position", prompts=REPEATED_PROMPTS, epochs=2,
                                     inner_steps=2, seeds=2))
    assert res.max_reward == 4.0 and len(res.exact_match) == 4 and len(res.exact_match[0]) == 2
    assert all(0 <= x <= 1 for x in [*res.final_exact_match, *res.final_at_max])
    # position reward at its maximum means every position matches: the same event as exact match
    assert res.final_at_max == pytest.approx(res.final_exact_match)
    with pytest.raises(ValueError, match="unknown reward 'bleu'"):
        SortToyConfig(reward="bleu")
