"""The one prompt + completion layout (`rlvr.rollout.batch`) recomputes exactly what the engine sampled."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import build_batch, completion_values, micro_batches, pack, pad_right


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


def test_partition_splits_the_rows_and_trims_each_side():
    batch = build_batch([[5], [5], [6]], [[1, 2, 3], [4], [7, 8]], torch.tensor([0.5, 0.0, -1.0]),
                        torch.zeros(3), pad_id=0)
    kept, flat = batch.partition(batch.advantages == 0)
    assert kept.advantages.tolist() == [0.5, -1.0] and flat.advantages.tolist() == [0.0]
    assert flat.input_ids.tolist() == [[5, 4]] and flat.mask.tolist() == [[True]]  # padding trimmed to its row
    assert batch.partition(torch.zeros(3, dtype=torch.bool)) == (batch, None)
    assert batch.partition(torch.ones(3, dtype=torch.bool)) == (None, batch)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_partition_puts_every_row_on_exactly_one_side(where):
    n = len(where)
    batch = build_batch([[9]] * n, [[1 + i] * (1 + i % 3) for i in range(n)], torch.arange(n, dtype=torch.float32),
                        torch.zeros(n), pad_id=0)
    sides = batch.partition(torch.tensor(where))
    rows = [side.advantages.tolist() if side is not None else [] for side in sides]
    assert rows == [[i for i in range(n) if not where[i]], [i for i in range(n) if where[i]]]
    for side in sides:
        if side is not None:
            assert side.mask.any(0)[-1] and side.attention_mask.any(0)[-1]  # no all-padding column left


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


def test_pack_by_hand():
    ids, attn, mask, start = pack([[5, 6], [7]], [[8], [9, 10, 11]], pad_id=0)
    assert start == 0  # the shortest prompt's last token predicts the first completion token
    assert ids.tolist() == [[5, 6, 8, 0], [7, 9, 10, 11]]
    assert attn.tolist() == [[True, True, True, False], [True, True, True, True]]
    # label column j holds token j + 1: row 0's completion token 8 sits at position 2, column 1
    assert mask.tolist() == [[False, True, False], [True, True, True]]


def _pack_by_rows(prompts, completions, pad_id):
    """The plain loop `pack` vectorises: one row at a time."""
    seqs = [p + c for p, c in zip(prompts, completions)]
    L, start = max(map(len, seqs)), min(map(len, prompts)) - 1
    ids = torch.full((len(seqs), L), pad_id)
    attn = torch.zeros(len(seqs), L, dtype=torch.bool)
    mask = torch.zeros(len(seqs), L - 1 - start, dtype=torch.bool)
    for i, (p, seq) in enumerate(zip(prompts, seqs)):
        ids[i, : len(seq)], attn[i, : len(seq)] = torch.tensor(seq), True
        mask[i, len(p) - 1 - start : len(seq) - 1 - start] = True
    return ids, attn, mask, start


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(1, 50), min_size=1, max_size=6),
                          st.lists(st.integers(1, 50), min_size=1, max_size=6)), min_size=1, max_size=8))
def test_pack_equals_the_row_loop(rows):
    prompts, completions = [p for p, _ in rows], [c for _, c in rows]
    got, want = pack(prompts, completions, 0), _pack_by_rows(prompts, completions, 0)
    assert got[3] == want[3]
    for a, b in zip(got[:3], want[:3]):
        assert torch.equal(a, b)
    # every completion token is labelled exactly once, in order
    labels = got[0][:, got[3] + 1 :][got[2]]
    assert labels.tolist() == [t for c in completions for t in c]


def test_pad_right_by_hand():
    ids, attn = pad_right([[3, 4, 5], [6], []], pad_id=9)
    assert ids.tolist() == [[3, 4, 5], [6, 9, 9], [9, 9, 9]]
    assert attn.tolist() == [[True] * 3, [True, False, False], [False] * 3]
