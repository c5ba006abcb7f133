"""The processed distribution (temperature -> top-k -> top-p) that the sampler draws from and the learner
scores: hand-computed values and gradients, the `keep` rule, chunking. Sampler == learner at equal logits:
tests/rollout/test_sampling.py."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.core.processing as processing
from rlvr.core import filtered_out, process_logits, token_logprobs

NEG = float("-inf")


def test_temperature_top_k_top_p_by_hand():
    # logits / 0.5 = (2, 0, 4, -2): probabilities e^4, e^2, e^0 over the top-3 -> 0.867, 0.117, 0.016
    logits = torch.tensor([[1.0, 0.0, 2.0, -1.0]])
    assert torch.equal(process_logits(logits, 0.5, 3, 1.0), torch.tensor([[2.0, 0.0, 4.0, NEG]]))
    # top-p 0.9 after top-3: 0.867 < 0.9, so the second token (0.117) joins; the third has 0.984 before it
    assert torch.equal(process_logits(logits, 0.5, 3, 0.9), torch.tensor([[2.0, NEG, 4.0, NEG]]))
    assert torch.equal(process_logits(logits, 0.5, 0, 0.8), torch.tensor([[NEG, NEG, 4.0, NEG]]))
    assert torch.equal(process_logits(logits, 0.0, 1, 0.5), logits)  # greedy: the raw logits, nothing processed


def test_keep_holds_a_filtered_token_in_the_support():
    logits = torch.tensor([[1.0, 0.0, 2.0, -1.0], [0.0, 3.0, 0.0, 0.0]])
    out = process_logits(logits, 0.5, 0, 0.8, keep=torch.tensor([3, 1]))
    assert torch.equal(out, torch.tensor([[NEG, NEG, 4.0, -2.0], [NEG, 6.0, NEG, NEG]]))
    # log q of the kept token: -2 - log(e^4 + e^-2), finite, as a sampled token that left the nucleus keeps
    expected = -2.0 - math.log(math.exp(4.0) + math.exp(-2.0))
    assert token_logprobs(out[:1], torch.tensor([3])).item() == pytest.approx(expected, abs=1e-6)


def test_gradient_of_log_q_is_onehot_minus_q_over_the_kept_set_divided_by_t():
    """d log q(y) / dz_v = (1[v = y] - q_v) / T for v kept, 0 for a filtered v (a constant for the gradient)."""
    logits = torch.tensor([[1.0, 0.0, 2.0, -1.0]], requires_grad=True)
    logq = token_logprobs(process_logits(logits, 0.5, 0, 0.9), torch.tensor([0]))
    logq.sum().backward()
    q0, q2 = math.exp(2) / (math.exp(2) + math.exp(4)), math.exp(4) / (math.exp(2) + math.exp(4))
    expected = torch.tensor([[(1 - q0) / 0.5, 0.0, -q2 / 0.5, 0.0]])
    torch.testing.assert_close(logits.grad, expected, atol=1e-6, rtol=0)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(2, 9), st.integers(0, 4), st.floats(0.2, 1.0), st.integers(0, 1000))
def test_chunked_filter_equals_one_pass(rows, vocab, top_k, top_p, seed):
    logits = torch.randn(rows, 3, vocab, generator=torch.Generator().manual_seed(seed))
    whole = filtered_out(logits, top_k, top_p)
    original = processing._CHUNK_ELEMENTS
    processing._CHUNK_ELEMENTS = vocab  # one row per chunk
    try:
        chunked = filtered_out(logits, top_k, top_p)
    finally:
        processing._CHUNK_ELEMENTS = original
    assert (whole is None) == (chunked is None) and (whole is None or torch.equal(whole, chunked))


def test_filters_off_leave_the_scaled_logits_and_need_no_mask():
    logits = torch.randn(2, 3, 5)
    assert filtered_out(logits, 0, 1.0) is None and filtered_out(logits, 5, 1.0) is None
    torch.testing.assert_close(process_logits(logits, 2.0), logits / 2)
