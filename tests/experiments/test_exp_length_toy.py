"""The free-length toy: its length law by hand, its exact statistics against sampling, its token
log-probs against the law, Kimi's reward in it, and the two normalisers' drift on wrong answers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.pipelines.experiments.length_toy import (LengthPolicy, LengthToyConfig, exact_stats, length_law,
                                                   rewards_of, run_length_toy, sample)


def test_length_law_by_hand():
    """T = 2, stop probability 1/2 at each step: stop at once (1/2, answer + end = 2 tokens), after one
    working token (1/4, 3 tokens) or run to the budget (1/4, answer + 2 working = 3 tokens, no end)."""
    probs, lengths = length_law(torch.zeros(2))
    assert probs.tolist() == [0.5, 0.25, 0.25] and lengths.tolist() == [2, 3, 3]
    probs, _ = length_law(torch.tensor([math.log(3.0), 0.0, 0.0]))  # stop 3/4 at step 0, then 1/2
    assert probs.tolist() == pytest.approx([0.75, 0.125, 0.0625, 0.0625])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-6, 6), min_size=1, max_size=10))
def test_length_law_is_a_distribution(logits):
    probs, lengths = length_law(torch.tensor(logits, dtype=torch.float64))
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12) and (probs >= 0).all()
    assert lengths.tolist() == [1 + min(j + 1, len(logits)) for j in range(len(logits) + 1)]


def _model(cfg: LengthToyConfig) -> LengthPolicy:
    torch.manual_seed(cfg.seed)
    return LengthPolicy(cfg)


def test_exact_stats_match_sampling():
    cfg = LengthToyConfig(seeds=2, responses=4000, prompts=2, answers=3, budget=6, need=2)
    model = _model(cfg)
    exact = exact_stats(model, cfg)
    answers, n, _, mask = sample(model, cfg)
    right = answers == (torch.arange(cfg.prompts) % cfg.answers).view(1, -1, 1)
    lengths = mask.reshape(cfg.seeds, cfg.prompts, cfg.responses, -1).sum(-1).double()  # (K, P, G)
    accuracy = (right & (n >= cfg.need)).double().mean((1, 2))
    # 4000 samples per prompt: standard errors about 0.008 (accuracy) and 0.03 (length)
    torch.testing.assert_close(accuracy, exact["accuracy"].double(), atol=0.03, rtol=0)
    torch.testing.assert_close(lengths.mean((1, 2)), exact["length"].double(), atol=0.1, rtol=0)
    wrong = [(lengths[k, p][~right[k, p]]).mean() for k in range(2) for p in range(2)]
    torch.testing.assert_close(torch.stack(wrong).reshape(2, 2).mean(1), exact["wrong_length"].double(),
                               atol=0.15, rtol=0)


def test_token_logprobs_add_up_to_the_law():
    """Summed over a response's tokens, the log-probs are log pi(a) + log P(n | a): nothing dropped or
    double-counted by the mask."""
    cfg = LengthToyConfig(seeds=2, responses=16, prompts=3, answers=4, budget=5, need=2)
    model = _model(cfg)
    answers, n, logprobs, mask = sample(model, cfg)
    total = (logprobs * mask).sum(-1).reshape(2, 3, 16)
    pi = torch.log_softmax(model.answer, -1)
    probs, lengths = length_law(model.stop)  # (K, P, V, T + 1)
    for k in range(2):
        for p in range(3):
            for g in range(16):
                a, j = answers[k, p, g], n[k, p, g]
                expected = pi[k, p, a] + probs[k, p, a, j].log()
                assert total[k, p, g].item() == pytest.approx(expected.item(), abs=1e-5)
                assert mask[(k * 3 + p) * 16 + g].sum().item() == lengths[j].item()


def test_rewards_with_and_without_kimi_by_hand():
    """One group of 3: right with 2 working tokens (need 2), right but too short, wrong and long. Lengths
    4, 3, 6 tokens (budget 8): lambda = 0.5 - (len - 3) / 3 = 1/6, 1/2, -1/2; Kimi gives a right answer
    lambda and a wrong one min(0, lambda)."""
    cfg = LengthToyConfig(prompts=1, answers=2, budget=8, need=2, responses=3, seeds=1)
    answers, n = torch.tensor([[[0, 0, 1]]]), torch.tensor([[[2, 1, 4]]])
    assert rewards_of(answers, n, cfg, kimi=False).tolist() == [[[1.0, 0.0, 0.0]]]
    with_kimi = rewards_of(answers, n, cfg, kimi=True)[0, 0].tolist()
    assert with_kimi == pytest.approx([1 + 1 / 6, 0.0, -0.5])


def test_per_sequence_normaliser_grows_wrong_answers_and_constant_does_not():
    """Dr. GRPO's argument at a small size: under SGD the constant normaliser has no expected drift on
    wrong answers' lengths; dividing by each response's length does (a few replicas, one seed)."""
    runs = {agg: run_length_toy(LengthToyConfig(aggregation=agg, seeds=8, steps=120))
            for agg in ("seq_mean_token_mean", "seq_sum_constant")}
    growth = {agg: sum(r.final("wrong_length")) / 8 - sum(r.wrong_length[0]) / 8 for agg, r in runs.items()}
    assert growth["seq_mean_token_mean"] > 0.2 and abs(growth["seq_sum_constant"]) < 0.1
    assert runs["seq_mean_token_mean"].steps == list(range(121))


def test_config_is_checked():
    with pytest.raises(ValueError, match="unknown aggregation"):
        LengthToyConfig(aggregation="token_mean")
    with pytest.raises(ValueError, match="unknown optimizer"):
        LengthToyConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="need must be"):
        LengthToyConfig(need=20, budget=12)
    with pytest.raises(ValueError, match="at least 2 responses"):
        LengthToyConfig(responses=1)
