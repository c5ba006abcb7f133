"""KL estimators k1/k2/k3, the ratio-weighted (unbiased) KL penalty and PPO KL-shaped rewards."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import KL_ESTIMATORS, get_kl_estimator, kl_k1, kl_k2, kl_k3, kl_shaped_rewards, ratio_weighted_kl

SETTINGS = settings(max_examples=50, deadline=None)


def test_by_hand():
    logp, logq = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])  # r = q/p = 1/2
    torch.testing.assert_close(kl_k1(logp, logq), torch.tensor([[math.log(2)]]))
    torch.testing.assert_close(kl_k2(logp, logq), torch.tensor([[math.log(2) ** 2 / 2]]))
    torch.testing.assert_close(kl_k3(logp, logq), torch.tensor([[0.5 - math.log(0.5) - 1]]))


@SETTINGS
@given(logp=st.floats(-50, 0), logq=st.floats(-50, 0))
def test_k2_k3_non_negative_and_zero_iff_equal(logp, logq):
    p, q = torch.tensor([[logp]]), torch.tensor([[logq]])
    for fn in (kl_k2, kl_k3):
        assert fn(p, q).item() >= 0
        assert fn(p, p).item() == 0
    torch.testing.assert_close(kl_k1(p, q), -kl_k1(q, p))


def test_k3_is_accurate_near_equality():
    """In float32, exp(d) - 1 - d at d ~ 1e-4 keeps ~2 digits; k3 must stay accurate to ~1e-6."""
    d = torch.tensor([[1e-6, 1e-4, -3e-4, 1e-3, 0.049, -0.051, 0.3, -2.0]])
    exact = torch.expm1(d.double()) - d.double()  # float64 reference, from the float32 inputs
    logp = torch.zeros_like(d)
    torch.testing.assert_close(kl_k3(logp, d).double(), exact, rtol=2e-6, atol=0)
    grad_exact = 1 - d.double().exp()  # d k3 / d log p = 1 - q/p
    logp.requires_grad_()
    grad, = torch.autograd.grad(kl_k3(logp, d).sum(), logp)
    torch.testing.assert_close(grad.double(), grad_exact, rtol=1e-5, atol=1e-7)


def _categoricals(seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), -1)
    return g, p, q


def test_monte_carlo_k3_matches_exact_kl_with_lower_variance_than_k1():
    g, p, q = _categoricals(0)
    exact = (p * (p / q).log()).sum()
    x = torch.multinomial(p, 200_000, replacement=True, generator=g)
    logp, logq = p.log()[x][None], q.log()[x][None]
    k1, k3 = kl_k1(logp, logq), kl_k3(logp, logq)
    for k in (k1, k3):
        stderr = k.std() / math.sqrt(k.numel())
        assert abs(k.mean() - exact) < 4 * stderr
    assert (k3 >= 0).all() and k3.var() < k1.var()


def test_gradient_expectations_match_the_documented_divergences():
    """E_{x~p}[grad k2] = grad KL(p||q) and E_{x~p}[grad k3] = grad KL(q||p), exactly by enumeration."""
    _, _, q = _categoricals(1)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)
    logp_all, logq_all = torch.log_softmax(theta, -1), q.log()
    weights = logp_all.exp().detach()  # sampling distribution, not differentiated
    for fn, divergence in (
        (kl_k2, (logp_all.exp() * (logp_all - logq_all)).sum()),
        (kl_k3, (q * (logq_all - logp_all)).sum()),
    ):
        estimated = (weights * fn(logp_all[None], logq_all[None])[0]).sum()
        g_est, = torch.autograd.grad(estimated, theta, retain_graph=True)
        g_true, = torch.autograd.grad(divergence, theta, retain_graph=True)
        torch.testing.assert_close(g_est, g_true)


def test_ratio_weighted_kl_by_hand():
    """p = 1/2, pi_old = 1/4, q = 1/4: ratio 2, k3 = 1/2 - log(1/2) - 1; on policy (pi_old = p) the gradient
    per log p of ratio * k3 is k3 + (1 - q/p) = -log(q/p): the score-function gradient of KL(p || q)."""
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    old, logq = torch.tensor([[math.log(0.25)]]), torch.tensor([[math.log(0.25)]])
    k3 = 0.5 - math.log(0.5) - 1
    torch.testing.assert_close(ratio_weighted_kl(kl_k3(logp, logq), logp, old), torch.tensor([[2 * k3]]))
    weighted = ratio_weighted_kl(kl_k3(logp, logq), logp, logp.detach())
    torch.testing.assert_close(weighted, torch.tensor([[k3]]))
    grad, = torch.autograd.grad(weighted.sum(), logp)
    torch.testing.assert_close(grad, torch.tensor([[math.log(2)]]))  # = k1, not k3's own 1 - q/p = 1/2


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 6))
def test_ratio_weighted_kl_on_policy_keeps_the_value_and_adds_kl_times_grad_log_p(seed, b, t):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=g, dtype=torch.float64) * 5).requires_grad_()
    logq = -torch.rand(b, t, generator=g, dtype=torch.float64) * 5
    for fn in (kl_k1, kl_k2, kl_k3):
        kl = fn(logp, logq)
        weighted = ratio_weighted_kl(kl, logp, logp.detach())
        torch.testing.assert_close(weighted, kl)
        g_weighted, = torch.autograd.grad(weighted.sum(), logp)
        g_plain, = torch.autograd.grad(fn(logp, logq).sum(), logp)
        torch.testing.assert_close(g_weighted, g_plain + kl.detach())


def test_ratio_weighted_kl_gradient_is_unbiased_for_the_reverse_kl_off_policy():
    """E_{x~pi_old}[grad ratio * k] = grad KL(p || q) for k1 and k3, exactly by enumeration, with pi_old != p
    (plain k3 estimates grad KL(q || p) instead, see the test above)."""
    _, old, q = _categoricals(2)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)
    logp_all, logq_all, logold_all = torch.log_softmax(theta, -1), q.log(), old.log()
    reverse_kl = (logp_all.exp() * (logp_all - logq_all)).sum()
    g_true, = torch.autograd.grad(reverse_kl, theta, retain_graph=True)
    for fn in (kl_k1, kl_k3):
        weighted = ratio_weighted_kl(fn(logp_all[None], logq_all[None]), logp_all[None], logold_all[None])[0]
        g_est, = torch.autograd.grad((old * weighted).sum(), theta, retain_graph=True)
        torch.testing.assert_close(g_est, g_true)


def test_kl_shaped_rewards_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -2.0, -2.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    scores, beta = torch.tensor([1.0, -1.0]), 0.1
    expected = torch.tensor([
        [-beta * 0.5, -beta * 0.0, -beta * -1.0 + 1.0],
        [-beta * 1.0, -beta * 1.0 - 1.0, 0.0],
    ])
    torch.testing.assert_close(kl_shaped_rewards(scores, logp, ref, mask, beta), expected)
    k3 = kl_shaped_rewards(scores, logp, ref, mask, beta, estimator="k3")
    torch.testing.assert_close(k3[0, 0], -beta * kl_k3(logp, ref)[0, 0])


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 6), coef=st.floats(0, 1))
def test_kl_shaped_rewards_sum_and_detached(seed, b, t, coef):
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(b, t, generator=g, dtype=torch.float64).requires_grad_()
    ref = torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None] < lengths[:, None]
    scores = torch.randn(b, generator=g, dtype=torch.float64)
    rewards = kl_shaped_rewards(scores, logp, ref, mask, coef)
    assert not rewards.requires_grad and (rewards[~mask] == 0).all()
    expected_sum = scores - coef * torch.where(mask, logp - ref, 0.0).sum(1)
    torch.testing.assert_close(rewards.sum(1), expected_sum.detach())


def test_registry_and_bad_input():
    a = torch.zeros(2, 3)
    assert all(get_kl_estimator(n) is f and f(a, a).shape == a.shape for n, f in KL_ESTIMATORS.items())
    with pytest.raises(ValueError, match="choose from"):
        get_kl_estimator("k4")
    with pytest.raises(ValueError, match=r"logprobs\(2, 3\), ref_logprobs\(3, 2\)"):
        kl_k3(a, a.T)
    with pytest.raises(ValueError, match=r"old_logprobs\(3, 2\)"):
        ratio_weighted_kl(a, a, a.T)
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        kl_shaped_rewards(torch.zeros(2), a, a, torch.tensor([[1, 0, 0], [0, 0, 0]]), 0.1)
    with pytest.raises(ValueError, match="one entry per row"):
        kl_shaped_rewards(torch.zeros(3), a, a, torch.ones(2, 3), 0.1)


@SETTINGS
@given(seed=st.integers(0, 2**31), v=st.integers(2, 8), spread=st.floats(0.1, 3.0))
def test_k1_and_k3_are_unbiased_exactly_by_enumeration(seed, v, spread):
    """Schulman 2020: E_{x~p}[k1] = E_{x~p}[k3] = KL(p || q) exactly (E_p[q/p - 1] = 0), summed over
    the whole support instead of sampled. For k2, with u = log(q/p): E_p[k2] = E[u^2] / 2 >= (E[u])^2 / 2
    = KL^2 / 2 (Jensen); its bias is shown by hand in the next test."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(spread * torch.randn(v, generator=g, dtype=torch.float64), -1)
    logq = torch.log_softmax(spread * torch.randn(v, generator=g, dtype=torch.float64), -1)
    p = logp.exp()
    exact = (p * (logp - logq)).sum()
    for fn in (kl_k1, kl_k3):
        torch.testing.assert_close((p * fn(logp[None], logq[None])[0]).sum(), exact)
    e_k2 = (p * kl_k2(logp[None], logq[None])[0]).sum()
    assert e_k2 >= 0.5 * exact**2 - 1e-12
    # swapping the roles gives KL(q || p) for samples from q, not KL(p || q): the estimator is directional
    q = logq.exp()
    torch.testing.assert_close((q * kl_k3(logq[None], logp[None])[0]).sum(), (q * (logq - logp)).sum())


def test_k2_is_biased_by_hand():
    """Two outcomes p = (1/2, 1/2), q = (1/4, 3/4): KL(p || q) = 1/2 log(2) + 1/2 log(2/3), while
    E_p[k2] = 1/4 (log 2)^2 + 1/4 (log(2/3))^2: different numbers, so k2 is biased; k3 is not."""
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]], dtype=torch.float64)
    logq = torch.tensor([[math.log(0.25), math.log(0.75)]], dtype=torch.float64)
    kl = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    e_k2 = 0.25 * math.log(2) ** 2 + 0.25 * math.log(2 / 3) ** 2
    assert abs(e_k2 - kl) > 1e-2
    torch.testing.assert_close((0.5 * kl_k2(logp, logq)).sum(), torch.tensor(e_k2, dtype=torch.float64))
    k3 = [(0.5 - math.log(0.5) - 1), (1.5 - math.log(1.5) - 1)]  # r = q/p = 1/2, 3/2
    torch.testing.assert_close(kl_k3(logp, logq), torch.tensor([k3], dtype=torch.float64))
    torch.testing.assert_close((0.5 * kl_k3(logp, logq)).sum(), torch.tensor(kl, dtype=torch.float64))
