"""GAE against a plain per-element reference loop, closed forms at lambda = 0 and 1."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import gae

SETTINGS = settings(max_examples=50, deadline=None)


def reference_gae(rewards, values, mask, gamma, lam):
    """Textbook GAE on each row's valid tokens only (Schulman et al. 2016), one scalar at a time."""
    advantages, returns = torch.zeros_like(values), torch.zeros_like(values)
    for b in range(rewards.shape[0]):
        idx = [t for t in range(rewards.shape[1]) if mask[b, t]]
        last_adv, next_value = 0.0, 0.0
        for t in reversed(idx):
            delta = rewards[b, t].item() + gamma * next_value - values[b, t].item()
            last_adv = delta + gamma * lam * last_adv
            advantages[b, t], returns[b, t] = last_adv, last_adv + values[b, t].item()
            next_value = values[b, t].item()
    return advantages, returns


def _case(seed, b, t, holes):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(b, t, generator=g, dtype=torch.float64)
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # right padded
    if holes:
        mask &= torch.rand(b, t, generator=g) < 0.7
    return rewards, values, mask


def test_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0]])
    values = torch.tensor([[0.5, 0.5, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])  # the last position is padding
    gamma, lam = 0.9, 0.8
    d2 = 1.0 - 0.5  # terminal: no bootstrap
    d1 = 0.0 + gamma * 0.5 - 0.5
    d0 = 0.0 + gamma * 0.5 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    adv, ret = gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor([[a0, a1, a2, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[a0 + 0.5, a1 + 0.5, a2 + 0.5, 0.0]]))


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 8),
       gamma=st.floats(0, 1), lam=st.floats(0, 1), holes=st.booleans())
def test_matches_reference_loop(seed, b, t, gamma, lam, holes):
    rewards, values, mask = _case(seed, b, t, holes)
    adv, ret = gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 8), holes=st.booleans())
def test_gamma_lambda_one_is_reward_to_go_minus_value(seed, b, t, holes):
    rewards, values, mask = _case(seed, b, t, holes)
    adv, ret = gae(rewards, values, mask, 1.0, 1.0)
    kept = torch.where(mask, rewards, 0.0)
    reward_to_go = kept.flip(1).cumsum(1).flip(1)  # sum_{t' >= t} r_t' over valid tokens
    torch.testing.assert_close(adv, torch.where(mask, reward_to_go - values, 0.0))
    torch.testing.assert_close(ret, torch.where(mask, reward_to_go, 0.0))


@SETTINGS
@given(seed=st.integers(0, 2**31), gamma=st.floats(0, 1))
def test_lambda_zero_is_the_td_error(seed, gamma):
    rewards, values, _ = _case(seed, 3, 6, holes=False)
    mask = torch.ones_like(rewards, dtype=torch.bool)
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    adv, _ = gae(rewards, values, mask, gamma, 0.0)
    torch.testing.assert_close(adv, rewards + gamma * next_values - values)


def test_targets_are_constants_and_padding_is_ignored():
    rewards, values, mask = _case(0, 3, 5, holes=True)
    values = values.clone().requires_grad_()
    adv, ret = gae(rewards, values, mask, 0.99, 0.95)
    assert not adv.requires_grad and not ret.requires_grad
    poisoned = values.detach().clone()
    poisoned[~mask] = float("nan")
    adv2, ret2 = gae(rewards, poisoned, mask, 0.99, 0.95)
    torch.testing.assert_close(adv2, adv)
    torch.testing.assert_close(ret2, ret)


def test_bad_input():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"rewards\(2, 3\), values\(2, 4\)"):
        gae(r, torch.zeros(2, 4), torch.ones(2, 3), 1.0, 1.0)
    with pytest.raises(ValueError, match="0/1"):
        gae(r, r, torch.full((2, 3), 0.5), 1.0, 1.0)
    with pytest.raises(ValueError, match="non-finite"):
        gae(torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2), torch.ones(1, 2), 1.0, 1.0)


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 8), gamma=st.floats(0, 1),
       holes=st.booleans())
def test_lambda_one_is_discounted_return_minus_value_for_any_gamma(seed, b, t, gamma, holes):
    """Schulman et al. 2016, eq. 18: GAE(gamma, 1) = sum_k gamma^k r_{t+k} - V_t, the Monte-Carlo return
    minus the baseline; the other tokens' values telescope away. k counts valid tokens (holes skipped)."""
    rewards, values, mask = _case(seed, b, t, holes)
    adv, ret = gae(rewards, values, mask, gamma, 1.0)
    expected = torch.zeros_like(rewards)
    for row in range(b):
        idx = [i for i in range(t) if mask[row, i]]
        for j, i in enumerate(idx):
            expected[row, i] = sum(gamma**k * rewards[row, idx[j + k]] for k in range(len(idx) - j))
    torch.testing.assert_close(ret, expected)
    torch.testing.assert_close(adv, torch.where(mask, expected - values, 0.0))
    # changing the value of one valid token changes only that token's advantage (telescoping)
    bumped = values.clone()
    bumped[mask] += 1.0
    adv2, _ = gae(rewards, bumped, mask, gamma, 1.0)
    torch.testing.assert_close(adv2, torch.where(mask, adv - 1.0, 0.0))


def test_lambda_zero_bootstraps_from_the_next_valid_token_across_a_hole():
    """A masked hole (tool output) is skipped: token 0 bootstraps from token 2's value, not token 1's.
    gamma = 0.5, lambda = 0: A_0 = r_0 + 0.5 * V_2 - V_0 = 1 + 0.125 - 0.5 = 0.625, A_2 = r_2 - V_2 = 1.75."""
    rewards = torch.tensor([[1.0, 9.0, 2.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 100.0, 0.25]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    adv, ret = gae(rewards, values, mask, 0.5, 0.0)
    torch.testing.assert_close(adv, torch.tensor([[0.625, 0.0, 1.75]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[1.125, 0.0, 2.0]], dtype=torch.float64))
    # with lambda = 1 the same row: A_0 = 1 + 0.5 * 2 - 0.5 = 1.5
    adv1, _ = gae(rewards, values, mask, 0.5, 1.0)
    torch.testing.assert_close(adv1, torch.tensor([[1.5, 0.0, 1.75]], dtype=torch.float64))
