"""Shared pieces of the offline trainers: splits, padding, sequence log-probs and the
minibatch loop (gradient accumulation must not change the update)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import tiny_model, tokenizer
from rlvr.rollout.batch import encode_prompt_completion, pad_right
from rlvr.algorithms.common import (
    OfflineConfig, completion_logprobs, split_holdout, train_epochs,
)


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


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=0.0), "lr must be > 0"),
    (dict(batch_size=0), "batch_size must be > 0"),
    (dict(micro_batch_size=9), "micro_batch_size must be in 1..batch_size"),
    (dict(warmup_steps=-1), ">= 0"),
    (dict(schedule="step"), "unknown schedule"),
])
def test_offline_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OfflineConfig(**kwargs).validate()


def _regression_run(micro_batch_size):
    torch.manual_seed(0)
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    model = torch.nn.Linear(3, 1).double()
    cfg = OfflineConfig(lr=0.1, epochs=2, batch_size=4, micro_batch_size=micro_batch_size, max_grad_norm=0.0)

    def micro_loss(idx):
        err = model(x[idx]).squeeze(-1) - y[idx]
        return (err ** 2).sum(), {"abs_err": err.abs().mean().detach()}

    history = train_epochs(model, 10, cfg, micro_loss)
    return model, history


@pytest.mark.parametrize("micro", [1, 3])
def test_train_epochs_accumulation_equals_full_batch(micro):
    full, full_hist = _regression_run(None)
    accumulated, acc_hist = _regression_run(micro)
    for p, q in zip(full.parameters(), accumulated.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    assert len(full_hist) == 2 * 3  # ceil(10 / 4) steps per epoch, the last one with 2 items
    for a, b in zip(full_hist, acc_hist):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-12)
        assert a["abs_err"] == pytest.approx(b["abs_err"], abs=1e-12)
