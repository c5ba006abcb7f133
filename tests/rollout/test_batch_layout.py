"""The one prompt + completion layout (`rlvr.rollout.batch`) recomputes exactly what the engine sampled."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.batch import build_batch, completion_values, micro_batches, pack, policy_logprobs


def test_policy_logprobs_recompute_the_sampler_logprobs(flat):
    model, tokenizer = flat
    completions = HFEngine(model, tokenizer).generate(["sort 3 1\n", "1+1=", "a"], 2,
                                                      SamplingParams(max_new_tokens=12, seed=3))
    batch = build_batch([c.prompt_ids for c in completions], [c.token_ids for c in completions], None,
                        torch.zeros(len(completions)), tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, temperature=1.0)  # (B, W)
    for row, c in enumerate(completions):
        got = logp[row][batch.mask[row]]  # completion tokens of this row, in order
        torch.testing.assert_close(got, torch.tensor(c.logprobs), atol=2e-5, rtol=0)


def test_completion_values_by_hand():
    # prompts of 2 and 1 tokens, completions of 2 and 3: start = 0, W = 3
    _, _, mask, _ = pack([[5, 6], [7]], [[1, 2], [3, 4, 9]], pad_id=0)
    assert mask.tolist() == [[False, True, True], [True, True, True]]
    out = completion_values(mask, [[-0.1, -0.2], [-0.3, -0.4, -0.5]])
    torch.testing.assert_close(out, torch.tensor([[0.0, -0.1, -0.2], [-0.3, -0.4, -0.5]]))
    with pytest.raises(ValueError, match="completion lengths"):
        completion_values(mask, [[-0.1], [-0.3, -0.4, -0.5]])


def test_micro_batches_by_hand():
    lengths = torch.tensor([3, 9, 5, 9, 2])
    attn = torch.arange(10)[None, :] < lengths[:, None]  # (5, 10)
    assert [g.tolist() for g in micro_batches(attn, rows=2, tokens=0)] == [[0, 1], [2, 3], [4]]
    # longest first: 9+9 fills 18; 5, 3 and 2 fit under 5 x 3 = 15 <= 18
    assert [g.tolist() for g in micro_batches(attn, rows=2, tokens=18)] == [[1, 3], [2, 0, 4]]
    assert [g.tolist() for g in micro_batches(attn, rows=2, tokens=4)] == [[1], [3], [2], [0], [4]]  # too long: alone


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=40), st.integers(0, 200), st.integers(1, 8))
def test_micro_batches_partition_within_budget(lengths, tokens, rows):
    lengths = torch.tensor(lengths)
    attn = torch.arange(30)[None, :] < lengths[:, None]
    groups = micro_batches(attn, rows, tokens)
    assert sorted(torch.cat(groups).tolist()) == list(range(len(lengths)))  # every row exactly once
    for g in groups:
        if tokens > 0:
            assert len(g) == 1 or len(g) * int(lengths[g].max()) <= tokens
        else:
            assert len(g) <= rows
