"""Shared pieces of the offline objectives: splits, padding and sequence log-probs."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import tiny_model, tokenizer
from rlvr.rollout.batch import encode_prompt_completion, pad_right
from rlvr.algorithms.common import completion_logprobs, split_holdout


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 200), st.floats(0.0, 0.9), st.integers(0, 10))
def test_split_holdout_partitions(n, fraction, seed):
    items = list(range(n))
    if fraction > 0 and n - max(1, round(fraction * n)) < 1:
        with pytest.raises(ValueError, match="cannot hold out"):
            split_holdout(items, fraction, seed)
        return
    train, held = split_holdout(items, fraction, seed)
    assert sorted(train + held) == items
    assert len(held) == (max(1, round(fraction * n)) if fraction > 0 else 0)
    assert (train, held) == split_holdout(items, fraction, seed)  # deterministic


def test_split_holdout_rejects_bad_fraction():
    with pytest.raises(ValueError, match="eval_fraction"):
        split_holdout([1, 2, 3], 1.0, 0)


def test_pad_right_by_hand():
    ids, mask = pad_right([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_encode_prompt_completion_appends_eos():
    tok = tokenizer()
    prompt, completion = encode_prompt_completion(tok, "sort 2 1=", "1 2")
    assert tok.decode(prompt) == "sort 2 1="
    assert completion[-1] == tok.eos_token_id and tok.decode(completion[:-1]) == "1 2"


def test_completion_logprobs_match_explicit_log_softmax():
    tok = tokenizer()
    model = tiny_model(tok).double()
    seqs = [encode_prompt_completion(tok, "sort 3 1=", "1 3"), encode_prompt_completion(tok, "sort 9 0 5 1=", "0")]
    logps, lengths = completion_logprobs(model, [p for p, _ in seqs], [c for _, c in seqs], tok.pad_token_id)
    assert lengths.tolist() == [len(c) for _, c in seqs]
    for i, (p, c) in enumerate(seqs):  # one unpadded sequence at a time, log_softmax + gather by hand
        ids = torch.tensor([p + c])
        logprobs = model(input_ids=ids).logits[0].log_softmax(-1)
        expected = sum(logprobs[len(p) + t - 1, tok_id] for t, tok_id in enumerate(c))
        torch.testing.assert_close(logps[i], expected, rtol=0, atol=1e-10)


def test_completion_logprobs_length_mismatch():
    tok = tokenizer()
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        completion_logprobs(tiny_model(tok), [[1], [1]], [[2]], 0)
