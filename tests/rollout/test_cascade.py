import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rollout.cascade import cascade_attention, group_slots, merge_attention, prefix_bias


def test_merge_weighs_each_part_by_its_share_of_the_softmax_sum():
    """Keys with exp-scores 1, 3 (values 0, 4) and 4 (value 1): the whole softmax gives (0 + 12 + 4) / 8 = 2;
    the parts give out1 = 3, lse1 = ln 4 and out2 = 1, lse2 = ln 4."""
    out = merge_attention(torch.tensor([[3.0]]), torch.tensor([math.log(4)]), torch.tensor([[1.0]]),
                          torch.tensor([math.log(4)]))
    assert out.tolist() == [[2.0]]
    unequal = merge_attention(torch.tensor([[3.0]]), torch.tensor([math.log(4)]), torch.tensor([[1.0]]),
                              torch.tensor([math.log(12)]))  # sums 4 and 12: weights 1/4, 3/4
    torch.testing.assert_close(unequal, torch.tensor([[1.5]]))


def test_group_slots_lay_scattered_rows_out_by_group():
    """Rows of groups [1, 0, 1, 2], two slots per group: row 1 -> slot 0, rows 0 and 2 -> slots 2, 3, row 3 -> 4."""
    slot_of_row, row_of_slot = group_slots(torch.tensor([1, 0, 1, 2]), num_groups=3, width=2)
    assert slot_of_row.tolist() == [2, 0, 3, 4]
    assert row_of_slot.tolist() == [1, 0, 0, 2, 3, 0]  # empty slots (1 and 5) point at row 0


def test_cascade_attention_by_hand():
    """One head, d = 1, scaling 1, query 1: group 0's prompt is [pad, 0, ln 3] (values [100, 0, 4]), row 0's
    completion [ln 4] (value 1): the padding key is left out and the answer is 2 (as in the merge test).
    Group 1's prompt [0, 0, 0] (values [6, 6, 6]) and row 1's completion [0] (value 2): (18 + 2) / 4 = 5."""
    q = torch.ones(2, 1, 1, 1)
    prefix_k = torch.tensor([[9.0, 0, math.log(3)], [0, 0, 0]]).view(2, 1, 3, 1)
    prefix_v = torch.tensor([[100.0, 0, 4], [6, 6, 6]]).view(2, 1, 3, 1)
    prompt_mask = torch.tensor([[False, True, True], [True, True, True]])
    suffix_k = torch.tensor([math.log(4), 0]).view(2, 1, 1, 1)
    suffix_v = torch.tensor([1.0, 2]).view(2, 1, 1, 1)
    slots = group_slots(torch.tensor([1, 0]), 2, 1)  # row 0 is group 1's, row 1 group 0's
    out = cascade_attention(q.flip(0), prefix_k, prefix_v, prefix_bias(prompt_mask), slots, suffix_k.flip(0),
                            suffix_v.flip(0), scaling=1.0)
    torch.testing.assert_close(out.view(2), torch.tensor([5.0, 2.0]))


def plain_attention(q, prefix_k, prefix_v, prompt_mask, group, suffix_k, suffix_v, scaling):
    """Per row: softmax attention over its group's real prompt keys then its completion keys, query heads
    sharing key/value heads in order (repeat_interleave), as transformers' repeat_kv does."""
    R, Hq, _, d = q.shape
    share = Hq // prefix_k.shape[1]
    rows = []
    for r in range(R):
        g = int(group[r])
        k = torch.cat([prefix_k[g][:, prompt_mask[g]], suffix_k[r]], dim=1).repeat_interleave(share, 0)  # (Hq, T, d)
        v = torch.cat([prefix_v[g][:, prompt_mask[g]], suffix_v[r]], dim=1).repeat_interleave(share, 0)
        weights = (q[r] @ k.transpose(-1, -2) * scaling).softmax(-1)  # (Hq, 1, T)
        rows.append(weights @ v)
    return torch.stack(rows)  # (R, Hq, 1, d)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2), (6, 3)]),
       st.integers(1, 6), st.integers(1, 5), st.sampled_from([4, 8]), st.integers(0, 2**31 - 1))
def test_cascade_equals_softmax_attention_over_prompt_and_completion(groups, most_rows, heads, prompt, suffix, d,
                                                                     seed):
    """Random shapes, grouped-query heads, left padding per group, a group's rows scattered in random order
    and groups with fewer rows than the slots (finished rows dropped)."""
    g = torch.Generator().manual_seed(seed)
    Hq, Hk = heads
    sizes = torch.randint(1, most_rows + 1, (groups,), generator=g)  # live rows per group
    group = torch.repeat_interleave(torch.arange(groups), sizes)
    group = group[torch.randperm(group.numel(), generator=g)]  # scattered
    R = group.numel()
    pads = torch.randint(0, prompt, (groups,), generator=g)  # at least one real token per prompt
    prompt_mask = torch.arange(prompt)[None, :] >= pads[:, None]  # (G, P)

    def randn(*shape):
        return torch.randn(*shape, generator=g) * 2

    q, prefix_k, prefix_v = randn(R, Hq, 1, d), randn(groups, Hk, prompt, d), randn(groups, Hk, prompt, d)
    suffix_k, suffix_v = randn(R, Hk, suffix, d), randn(R, Hk, suffix, d)
    slots = group_slots(group, groups, most_rows)
    out = cascade_attention(q, prefix_k, prefix_v, prefix_bias(prompt_mask), slots, suffix_k, suffix_v,
                            scaling=d ** -0.5)
    expected = plain_attention(q, prefix_k, prefix_v, prompt_mask, group, suffix_k, suffix_v, d ** -0.5)
    # float32 log-sum-exps of scores up to ~20 carry ~20 x 2**-24 of error into the merge weights (the kernel's lse
    # is float32 whatever the inputs): 1e-6 failed by 2.6e-6 at seed 3
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)


def test_prefix_bias_masks_left_padding_and_is_none_without_padding():
    """By hand: prompts [pad, a, b] and [c, d, e] -> one -inf at (0, 0), zeros elsewhere, shaped to broadcast over
    heads and queries; no padding at all -> None (the kernel then runs unmasked)."""
    bias = prefix_bias(torch.tensor([[False, True, True], [True, True, True]]))
    expected = torch.tensor([[float("-inf"), 0.0, 0.0], [0.0, 0.0, 0.0]]).view(2, 1, 1, 3)
    assert bias.dtype == torch.float32 and bias.shape == (2, 1, 1, 3)
    torch.testing.assert_close(bias, expected)
    assert prefix_bias(torch.ones(2, 3, dtype=torch.bool)) is None
