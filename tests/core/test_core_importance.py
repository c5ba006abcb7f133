"""Behaviour-policy importance weights (rlvr.core.importance): each mode by hand, their invariants (hypothesis),
and the estimator they correct, by enumeration."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.grpo import GroupPolicyGradient
from rlvr.core import IS_MODES, behaviour_is_weights
from rlvr.core.importance import log_importance_ratio, masked_weights, sequence_log_ratio, truncated_weights

# row 0: ratios 2, 0.5, 3 (pi_old / pi_behaviour); row 1: ratios 1, e and one padded position
OLD = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, math.e * 0.1, 0.7]]))
BEHAVIOUR = torch.log(torch.tensor([[0.25, 0.4, 0.3], [0.3, 0.1, 0.01]]))
MASK = torch.tensor([[True, True, True], [True, True, False]])
GEO = (3.0 ** (1 / 3), math.exp(0.5))  # geometric means: (2 x 0.5 x 3)^(1/3), (1 x e)^(1/2)


def _close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-5, rtol=0)


def test_truncate_by_hand():
    weights, kept, metrics = behaviour_is_weights(OLD, BEHAVIOUR, MASK, 2.5, "truncate")
    _close(weights, [[2.0, 0.5, 2.5], [1.0, 2.5, 0.0]])  # e > 2.5: truncated
    assert kept.tolist() == MASK.tolist()  # truncation rejects nothing
    assert metrics["is/truncated_share"].item() == pytest.approx(2 / 5)  # 3 and e are above 2.5
    assert metrics["is/weight_mean"].item() == pytest.approx((2 + 0.5 + 2.5 + 1 + 2.5) / 5)
    assert metrics["is/ratio_max"].item() == pytest.approx(3.0)


def test_mask_keeps_the_ratio_inside_the_band_and_rejects_the_rest():
    """IcePop / MIS: w = rho inside [1/C, C] (the ratio, not 1), 0 and out of the loss mask outside."""
    weights, kept, metrics = behaviour_is_weights(OLD, BEHAVIOUR, MASK, 2.5, "mask")
    _close(weights, [[2.0, 0.5, 0.0], [1.0, 0.0, 0.0]])
    assert kept.tolist() == [[True, True, False], [True, False, False]]
    assert metrics["is/truncated_share"].item() == pytest.approx(2 / 5)
    # 1/C and C themselves are inside the band
    w, k = masked_weights(torch.tensor([math.log(2.0), -math.log(2.0), math.log(2.0001)]), 2.0)
    assert k.tolist() == [True, True, False]
    _close(w, [2.0, 0.5, 0.0])


def test_sequence_modes_bound_one_geometric_mean_ratio_per_sequence():
    weights, kept, _ = behaviour_is_weights(OLD, BEHAVIOUR, MASK, 2.0, "sequence_truncate")
    _close(weights, [[GEO[0]] * 3, [GEO[1], GEO[1], 0.0]])  # both under 2: the ratio itself
    assert kept.tolist() == MASK.tolist()
    weights, _, metrics = behaviour_is_weights(OLD, BEHAVIOUR, MASK, 1.5, "sequence_truncate")
    _close(weights, [[GEO[0]] * 3, [1.5, 1.5, 0.0]])  # e^0.5 = 1.65 truncated at 1.5
    assert metrics["is/truncated_share"].item() == pytest.approx(2 / 5)
    weights, kept, _ = behaviour_is_weights(OLD, BEHAVIOUR, MASK, 1.5, "sequence_mask")
    _close(weights, [[GEO[0]] * 3, [0.0, 0.0, 0.0]])  # 1.44 inside [2/3, 1.5], 1.65 outside: the row rejected
    assert kept.tolist() == [[True, True, True], [False, False, False]]


def test_building_blocks_by_hand():
    log_ratio = log_importance_ratio(OLD, BEHAVIOUR, MASK)
    _close(log_ratio, [[math.log(2), math.log(0.5), math.log(3)], [0.0, 1.0, 0.0]])  # padding: 0
    _close(sequence_log_ratio(log_ratio, MASK), [math.log(3) / 3, 0.5])
    assert sequence_log_ratio(log_ratio, torch.zeros_like(MASK)).tolist() == [0.0, 0.0]  # no token: ratio 1
    w, k = truncated_weights(torch.tensor([math.log(4.0), 0.0]), 2.0)
    _close(w, [2.0, 1.0])
    assert k.all()


def test_the_config_offers_the_modes_the_core_has():
    """rlvr.config lists them itself (it imports no torch, so `--help` stays fast): the two lists are one."""
    from rlvr.config.sections import IS_MODES as CONFIG_MODES

    assert CONFIG_MODES == IS_MODES


def test_bad_arguments():
    with pytest.raises(ValueError, match="cap must be > 1"):
        behaviour_is_weights(OLD, BEHAVIOUR, MASK, 1.0)
    with pytest.raises(ValueError, match="choose from"):
        behaviour_is_weights(OLD, BEHAVIOUR, MASK, 2.0, "clip")
    with pytest.raises(ValueError, match="shape"):
        behaviour_is_weights(OLD, BEHAVIOUR[:, :2], MASK, 2.0)


logprob_rows = st.lists(st.lists(st.floats(-6, 0), min_size=4, max_size=4), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(logprob_rows, logprob_rows, st.lists(st.integers(0, 4), min_size=4, max_size=4), st.floats(1.05, 10),
       st.sampled_from(IS_MODES))
def test_invariants(old, behaviour, lengths, cap, mode):
    rows = min(len(old), len(behaviour))
    old, behaviour = torch.tensor(old[:rows]), torch.tensor(behaviour[:rows])
    mask = torch.arange(4)[None] < torch.tensor(lengths[:rows])[:, None]
    weights, kept, metrics = behaviour_is_weights(old, behaviour, mask, cap, mode)
    assert bool((weights[~mask] == 0).all()) and not bool((kept & ~mask).any())  # padding: nothing
    assert bool((weights <= cap * (1 + 1e-6)).all()) and bool((weights >= 0).all())
    if mode.endswith("mask"):  # rejected -> 0, kept -> the ratio inside [1/C, C]
        assert bool((weights[mask & ~kept] == 0).all()) and bool((weights[kept] >= (1 / cap) * (1 - 1e-6)).all())
    else:
        assert torch.equal(kept, mask)
    if mode.startswith("sequence_"):  # one weight per sequence
        for row in range(rows):
            assert weights[row][mask[row]].unique().numel() <= 1
    on_policy, kept_all, _ = behaviour_is_weights(old, old, mask, cap, mode)  # sampler == pi_old: weight 1
    assert torch.equal(on_policy, mask.float()) and torch.equal(kept_all, mask)
    assert 0 <= metrics["is/truncated_share"].item() <= 1 or not mask.any()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-3, 0), min_size=1, max_size=6), st.lists(st.floats(-3, 0), min_size=1, max_size=6),
       st.integers(1, 4))
def test_the_geometric_mean_is_length_invariant(old, behaviour, repeats):
    """A sequence repeated k times has the same sequence ratio (an intensive quantity, verl's Geo-RS), where the
    product of the token ratios would be raised to the k-th power."""
    n = min(len(old), len(behaviour))
    log_ratio = torch.tensor(old[:n]) - torch.tensor(behaviour[:n])
    once = sequence_log_ratio(log_ratio[None], torch.ones(1, n, dtype=torch.bool))
    many = sequence_log_ratio(log_ratio.repeat(repeats)[None], torch.ones(1, n * repeats, dtype=torch.bool))
    torch.testing.assert_close(once, many, atol=1e-5, rtol=0)


def test_the_weights_correct_the_sampler_to_pi_old_by_enumeration():
    """E_{y ~ behaviour}[w(y) f(y)] over a 4-token vocabulary: with a cap above every ratio, truncation is the
    exact importance weight, so the sum equals E_{y ~ pi_old}[f]; a binding cap or a mask band moves it by the
    mass it cuts, which is computed here in closed form."""
    old, behaviour = torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0.4, 0.3, 0.2, 0.1])
    f = torch.tensor([1.0, -2.0, 3.0, 0.5])
    mask = torch.ones(1, 4, dtype=torch.bool)
    target = float((old * f).sum())
    weights, _, _ = behaviour_is_weights(old.log()[None], behaviour.log()[None], mask, 5.0, "truncate")
    assert float((behaviour * weights[0] * f).sum()) == pytest.approx(target, abs=1e-6)
    # cap 2: the last token's ratio 4 is cut to 2, losing behaviour(y) (4 - 2) f(y) = 0.1 x 2 x 0.5
    weights, _, _ = behaviour_is_weights(old.log()[None], behaviour.log()[None], mask, 2.0, "truncate")
    assert float((behaviour * weights[0] * f).sum()) == pytest.approx(target - 0.1 * 2 * 0.5, abs=1e-6)
    # mask, band [1/2, 2]: ratios 0.25 and 4 leave; the rest keep their exact weight
    weights, kept, _ = behaviour_is_weights(old.log()[None], behaviour.log()[None], mask, 2.0, "mask")
    assert kept.tolist() == [[False, True, True, False]]
    assert float((behaviour * weights[0] * f).sum()) == pytest.approx(0.2 * -2.0 + 0.3 * 3.0, abs=1e-6)


def test_weights_scale_the_policy_gradient_only():
    """With weights w the pg loss of a token is w times the unweighted one; the weights carry no gradient."""
    obj = GroupPolicyGradient(aggregation="token_mean")
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool)
    w = torch.tensor([[2.0, 0.5]])
    plain, _ = obj.loss(logp, logp.detach(), adv, mask, None, 2)
    (g_plain,) = torch.autograd.grad(plain, logp)
    weighted, _ = obj.loss(logp, logp.detach(), adv, mask, None, 2, w)
    (g_weighted,) = torch.autograd.grad(weighted, logp)
    torch.testing.assert_close(g_weighted, g_plain * w)
    assert g_weighted.abs().sum() > 0


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), v=st.integers(2, 8))
def test_untruncated_weights_correct_the_expectation_exactly(seed, v):
    """Importance sampling: with a cap above every ratio, E_{x~behaviour}[w(x) f(x)] = E_{x~old}[f(x)]
    exactly, by enumeration over a categorical; a binding cap biases it downwards for f >= 0."""
    g = torch.Generator().manual_seed(seed)
    log_old = torch.log_softmax(torch.randn(v, generator=g, dtype=torch.float64), -1)
    log_beh = torch.log_softmax(torch.randn(v, generator=g, dtype=torch.float64), -1)
    f = torch.rand(v, generator=g, dtype=torch.float64) + 0.1  # any positive per-token quantity
    mask = torch.ones(1, v, dtype=torch.bool)
    ratio_max = float((log_old - log_beh).exp().max())
    w, _, _ = behaviour_is_weights(log_old[None], log_beh[None], mask, cap=ratio_max * 2)
    torch.testing.assert_close((log_beh.exp() * w[0] * f).sum(), (log_old.exp() * f).sum())
    if ratio_max > 1.01:
        w, _, _ = behaviour_is_weights(log_old[None], log_beh[None], mask, cap=(1 + ratio_max) / 2)
        assert (log_beh.exp() * w[0] * f).sum() < (log_old.exp() * f).sum()
