"""Behaviour-policy correction: truncated (TIS) and masked importance weights pi_old / pi_behaviour."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.grpo import GroupPolicyGradient
from rlvr.core import behaviour_is_weights

SETTINGS = settings(max_examples=50, deadline=None)


def test_by_hand():
    # ratios 2, 1/2, 4 (cap 3) and one padding token
    old = torch.tensor([[math.log(0.4), math.log(0.1), math.log(0.8), 0.0]])
    beh = torch.tensor([[math.log(0.2), math.log(0.2), math.log(0.2), -5.0]])
    mask = torch.tensor([[True, True, True, False]])
    w, m = behaviour_is_weights(old, beh, mask, cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 3.0, 0.0]]))
    torch.testing.assert_close(m["is/weight_mean"], torch.tensor(5.5 / 3))
    torch.testing.assert_close(m["is/ratio_max"], torch.tensor(4.0))
    torch.testing.assert_close(m["is/truncated_share"], torch.tensor(1 / 3))
    w, m = behaviour_is_weights(old, beh, mask, cap=3.0, mode="mask")  # band [1/3, 3]: drops the 4
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 0.0, 0.0]]))
    torch.testing.assert_close(m["is/truncated_share"], torch.tensor(1 / 3))


def test_rejects_bad_cap_and_mode():
    x, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="cap"):
        behaviour_is_weights(x, x, mask, cap=1.0)
    with pytest.raises(ValueError, match="choose from"):
        behaviour_is_weights(x, x, mask, cap=2.0, mode="clip")


@SETTINGS
@given(old=st.lists(st.floats(-8, 0), min_size=1, max_size=6), shift=st.floats(-3, 3), cap=st.floats(1.01, 10))
def test_bounded_and_one_on_policy(old, shift, cap):
    old_t = torch.tensor([old])
    mask = torch.ones_like(old_t, dtype=torch.bool)
    w, _ = behaviour_is_weights(old_t, old_t - shift, mask, cap)  # ratio exp(shift) on every token
    assert (w >= 0).all() and (w <= cap + 1e-6).all()
    torch.testing.assert_close(w, torch.full_like(w, min(math.exp(shift), cap)))
    on_policy, m = behaviour_is_weights(old_t, old_t, mask, cap)  # synchronous, same kernels: no correction
    torch.testing.assert_close(on_policy, torch.ones_like(on_policy))
    assert m["is/truncated_share"] == 0


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


@SETTINGS
@given(seed=st.integers(0, 2**31), cap=st.floats(1.01, 10), spread=st.floats(0.0, 3.0))
def test_mask_mode_keeps_exactly_the_tokens_inside_the_band(seed, cap, spread):
    """MIS (mode "mask"): w = 1 when 1/cap <= ratio <= cap on a valid token, else 0; the reported share is
    the fraction of valid tokens dropped."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    beh = old + spread * torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=g) < 0.8
    mask[0, 0] = True
    w, m = behaviour_is_weights(old, beh, mask, cap, mode="mask")
    ratio = (old - beh).exp()
    inside = (ratio >= 1 / cap) & (ratio <= cap) & mask
    assert torch.equal(w, inside.double())
    torch.testing.assert_close(m["is/truncated_share"], (~inside[mask]).double().mean())
    torch.testing.assert_close(m["is/weight_mean"], inside[mask].double().mean())


@SETTINGS
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
    w, _ = behaviour_is_weights(log_old[None], log_beh[None], mask, cap=ratio_max * 2)
    torch.testing.assert_close((log_beh.exp() * w[0] * f).sum(), (log_old.exp() * f).sum())
    if ratio_max > 1.01:
        w, _ = behaviour_is_weights(log_old[None], log_beh[None], mask, cap=(1 + ratio_max) / 2)
        assert (log_beh.exp() * w[0] * f).sum() < (log_old.exp() * f).sum()
