import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch import Tensor

from rlvr.core import apply_top_k, apply_top_p, process_logits
from rlvr.models.head import scored_logprobs
from rlvr.rollout.sampling import invert_cdf, sample_next

NEG = float("-inf")


def test_top_k_by_hand():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [5.0, 5.0, 1.0, 2.0]])
    out = apply_top_k(logits, 2)
    assert torch.equal(out, torch.tensor([[NEG, 3.0, 2.0, NEG], [5.0, 5.0, NEG, NEG]]))
    assert torch.equal(apply_top_k(logits, 0), logits) and torch.equal(apply_top_k(logits, 4), logits)


def test_top_k_keeps_ties_with_the_kth():
    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    assert torch.equal(apply_top_k(logits, 2), torch.tensor([[2.0, 1.0, 1.0, NEG]]))


def test_top_p_by_hand():
    # probabilities 0.5, 0.25, 0.125, 0.125 (in a shuffled order)
    logits = torch.log(torch.tensor([[0.125, 0.5, 0.125, 0.25]]))
    # p = 0.6: 0.5 alone is < 0.6, add 0.25 -> 0.75 >= 0.6; keep {0.5, 0.25}
    assert torch.isinf(apply_top_p(logits, 0.6)).tolist() == [[True, False, True, False]]
    # p = 0.5: the most likely token alone reaches it
    assert torch.isinf(apply_top_p(logits, 0.5)).tolist() == [[True, False, True, True]]
    # p = 0.8: 0.75 < 0.8, so one of the 0.125 tokens is added (0.875); the other is dropped
    assert torch.isinf(apply_top_p(logits, 0.8)).sum().item() == 1
    assert torch.isinf(apply_top_p(logits, 0.9)).sum().item() == 0
    assert torch.equal(apply_top_p(logits, 1.0), logits)


def test_temperature_then_filters():
    logits = torch.tensor([[2.0, 4.0, 0.0]])
    assert torch.allclose(process_logits(logits, 2.0, 0, 1.0), logits / 2)
    assert torch.equal(process_logits(logits, 0.5, 1, 1.0), torch.tensor([[NEG, 8.0, NEG]]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=12), st.floats(0.01, 0.99))
def test_top_p_keeps_the_smallest_set_reaching_p(values, p):
    logits = torch.tensor([values])
    kept = ~torch.isinf(apply_top_p(logits, p))[0]
    probs = logits.softmax(-1)[0]
    assert kept.any()
    assert probs[kept].sum() >= p - 1e-5  # reaches p
    # every kept token is at least as likely as every dropped one
    if (~kept).any():
        assert probs[kept].min() >= probs[~kept].max() - 1e-7
        # without its least likely kept token the set would not reach p
        assert probs[kept].sum() - probs[kept].min() < p + 1e-5


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=12, unique=True), st.integers(1, 12))
def test_top_k_keeps_exactly_k_distinct(values, k):
    kept = ~torch.isinf(apply_top_k(torch.tensor([values], dtype=torch.float32) / 10, k))[0]
    assert kept.sum().item() == min(k, len(values))


def test_greedy_and_logprob_modes():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    raw = logits.log_softmax(-1)
    tokens, lp, _ = sample_next(logits, 0.0, 0, 1.0, None)
    assert tokens.tolist() == [1] and lp.item() == pytest.approx(raw[0, 1].item())
    gen = torch.Generator().manual_seed(0)
    tokens, lp, _ = sample_next(logits, 0.5, 1, 1.0, gen, "processed_logprobs")
    assert tokens.tolist() == [1] and lp.item() == 0.0  # top-1 leaves a single token of prob 1
    tokens, lp, _ = sample_next(logits, 0.5, 2, 1.0, gen, "processed_logprobs")
    t = tokens.item()
    expected = (logits / 0.5)[0, [1, 2]].log_softmax(-1)[[1, 2].index(t)].item()
    assert lp.item() == pytest.approx(expected)
    tokens, lp, _ = sample_next(logits, 0.5, 2, 1.0, gen, "raw_logprobs")
    assert lp.item() == pytest.approx(raw[0, tokens.item()].item())
    with pytest.raises(ValueError, match="logprobs_mode"):
        sample_next(logits, 1.0, 0, 1.0, gen, "logits")


def test_sampling_frequencies_follow_the_tempered_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0]]).expand(20000, 3)
    gen = torch.Generator().manual_seed(0)
    tokens, _, _ = sample_next(logits, 2.0, 0, 1.0, gen)
    freq = torch.bincount(tokens, minlength=3).float() / tokens.numel()
    expected = torch.tensor([0.0, 0.5, 1.0]).softmax(-1)
    # 4 standard errors of a proportion with n = 20000
    assert torch.all((freq - expected).abs() < 4 * torch.sqrt(expected * (1 - expected) / 20000))


def test_same_generator_seed_same_tokens():
    logits = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))
    a = sample_next(logits, 1.0, 0, 0.9, torch.Generator().manual_seed(3))
    b = sample_next(logits, 1.0, 0, 0.9, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert math.isfinite(a[1].sum().item())


def test_invert_cdf_by_hand():
    # C = [0, 0.5, 0.5, 1, 1]: token 1 owns u in (0, 0.5], token 3 owns (0.5, 1]; zeros own nothing
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).expand(5, 5)
    uniform = torch.tensor([0.0, 0.25, 0.5, 0.75, 0.999])  # u = 1 - uniform = 1, .75, .5, .25, .001
    assert invert_cdf(probs, uniform).tolist() == [3, 3, 1, 1, 1]
    # unnormalised rows: C = [1, 4], u = 4 (1 - uniform); token 0 owns u in (0, 1], i.e. uniform >= 0.75
    probs = torch.tensor([[1.0, 3.0]]).expand(3, 2)
    assert invert_cdf(probs, torch.tensor([0.7, 0.76, 0.0])).tolist() == [1, 0, 1]


def chi_square_critical(dof: int, quantile: float = 0.999) -> float:
    """Wilson-Hilferty (1931) approximation of the chi-square quantile (relative error < 1% for dof >= 3)."""
    z = torch.special.ndtri(torch.tensor(quantile, dtype=torch.float64)).item()
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def chi_square(tokens: Tensor, probs: Tensor) -> tuple[float, int]:
    """Pearson's statistic of the draws against probs (V,), over the tokens of nonzero probability."""
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    support = probs > 0
    assert counts[~support].sum() == 0, "a zero-probability token was drawn"
    expected = probs[support].double() * tokens.numel()
    return float(((counts[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1


def test_chi_square_by_hand():
    # p = [0.5, 0.25, 0.25], 8 draws: expected (4, 2, 2); counts (5, 1, 2) -> 1/4 + 1/2 + 0 = 0.75
    stat, dof = chi_square(torch.tensor([0, 0, 0, 0, 0, 1, 2, 2]), torch.tensor([0.5, 0.25, 0.25, 0.0]))
    assert stat == pytest.approx(0.75) and dof == 2


def test_inverse_cdf_draws_pass_chi_square_on_a_hand_computed_case():
    # temperature 1, top-k 3 of probabilities (0.4, 0.3, 0.2, 0.1) -> (4/9, 3/9, 2/9, 0)
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]])).expand(40000, 4)
    tokens, _, _ = sample_next(logits, 1.0, 3, 1.0, torch.Generator().manual_seed(0))
    stat, dof = chi_square(tokens, torch.tensor([4 / 9, 3 / 9, 2 / 9, 0.0]))
    assert dof == 2 and stat < chi_square_critical(dof)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-4, 4), min_size=4, max_size=40), st.floats(0.3, 2.0), st.integers(0, 6),
       st.floats(0.5, 1.0), st.integers(0, 2**31))
def test_draws_follow_the_processed_distribution(values, temperature, top_k, top_p, seed):
    logits = torch.tensor([values])
    target = process_logits(logits, temperature, top_k, top_p).softmax(-1)[0]  # (V,)
    # merge tokens expected < 5 times into one cell, as Pearson's test requires
    draws = 20000
    tokens, _, _ = sample_next(logits.expand(draws, -1), temperature, top_k, top_p,
                            torch.Generator().manual_seed(seed))
    assert bool((target[tokens] > 0).all()), "a filtered token was drawn"
    rare = target * draws < 5
    cells = torch.where(rare, target.numel(), torch.arange(target.numel()))  # rare tokens -> one extra cell
    merged = torch.zeros(target.numel() + 1, dtype=target.dtype).index_add_(0, cells, target)
    stat, dof = chi_square(cells[tokens], merged)
    if dof >= 1:
        assert stat < chi_square_critical(max(dof, 3), 0.9999)
    else:  # a single token carries all the mass
        assert tokens.unique().numel() == 1


def test_seeded_sampling_is_deterministic_and_seed_dependent():
    logits = torch.randn(256, 50, generator=torch.Generator().manual_seed(2))
    a, _, _ = sample_next(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(5))
    b, _, _ = sample_next(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(5))
    c, _, _ = sample_next(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("name", ["temperature", "top_p"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_sampling_params_refuse_a_non_finite_float(name, value):
    """`temperature < 0` let NaN through, and sampling then failed with "index 101 is out of bounds"."""
    from rlvr.rollout.base import SamplingParams

    with pytest.raises(ValueError, match=f"^{name} must be a finite number, got {value}$"):
        SamplingParams(**{name: value})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-4, 4), min_size=3, max_size=30), st.floats(0.3, 2.0), st.integers(0, 6),
       st.floats(0.3, 1.0), st.integers(0, 2**31))
def test_the_learner_scores_what_the_sampler_reports(values, temperature, top_k, top_p, seed):
    """At equal logits the learner's log q (keep = the sampled token) is the sampler's processed log-prob, so
    the importance weight is 1; keeping a token that is in the support changes nothing; q sums to 1."""
    logits = torch.tensor([values]).expand(8, -1)
    tokens, sampled, _ = sample_next(logits, temperature, top_k, top_p, torch.Generator().manual_seed(seed),
                                     "processed_logprobs")
    scored, entropy = scored_logprobs(logits, tokens, temperature, top_k, top_p, with_entropy=True)
    torch.testing.assert_close((scored - sampled).exp(), torch.ones(8), atol=1e-6, rtol=0)
    assert torch.equal(process_logits(logits, temperature, top_k, top_p, keep=tokens),
                       process_logits(logits, temperature, top_k, top_p))
    q = process_logits(logits, temperature, top_k, top_p).softmax(-1)
    torch.testing.assert_close(q.sum(-1), torch.ones(8))
    assert bool((entropy >= -1e-6).all()) and bool((entropy <= math.log(len(values)) + 1e-5).all())
