"""Policy losses (pg, clipped, GSPO, Kimi), the clipped value loss and the POLICY_LOSSES registry."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import (
    POLICY_LOSSES,
    aggregate_loss,
    centered_advantages,
    clipped_surrogate_loss,
    clipped_value_loss,
    get_policy_loss,
    kimi_loss,
    pg_loss,
    sequence_clipped_surrogate_loss,
)

SETTINGS = settings(max_examples=50, deadline=None)


def _case(seed, b=3, t=5, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=g, dtype=torch.float64) * 3).requires_grad_()
    old = logp.detach() + spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None] < lengths[:, None]
    return logp, old, adv, mask


def _grad(loss, x):
    return torch.autograd.grad(loss, x, retain_graph=True)[0]


def test_pg_loss_by_hand_and_advantage_shapes():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]])
    expected = torch.tensor([[2.0 * 1.0, 2.0 * 2.0], [-1.0 * 0.5, -1.0 * 0.25]])  # -A * log pi
    per_seq = torch.tensor([2.0, -1.0])
    for adv in (per_seq, per_seq[:, None], per_seq[:, None].expand(2, 2)):
        torch.testing.assert_close(pg_loss(logp, adv)[0], expected)
    with pytest.raises(ValueError, match=r"got \(3,\)"):
        pg_loss(logp, torch.zeros(3))


def test_clipped_surrogate_by_hand():
    # ratios 1.5, 0.5, 0.5, 1.25 with advantages +1, +1, -1, +1; eps_low 0.2, eps_high 0.28 (DAPO)
    ratios = torch.tensor([[1.5, 0.5, 0.5, 1.25]], dtype=torch.float64)
    logp = ratios.log().requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0]], dtype=torch.float64)
    loss, metrics = clipped_surrogate_loss(logp, torch.zeros_like(logp), adv, 0.2, 0.28)
    expected = [-min(1.5, 1.28), -min(0.5, 0.8), -min(-0.5, -0.8), -min(1.25, 1.25)]
    torch.testing.assert_close(loss, torch.tensor([expected], dtype=torch.float64))
    # d(-A rho)/d log pi = -A rho on the unclipped branch, 0 on the clipped one
    expected_grad = torch.tensor([[0.0, -0.5, 0.0, -1.25]], dtype=torch.float64)
    torch.testing.assert_close(_grad(loss.sum(), logp), expected_grad)
    assert metrics["clip_frac_high"] == 1 / 4 and metrics["clip_frac_low"] == 1 / 4
    assert metrics["ratio_max"] == 1.5 and metrics["ratio_mean"] == (1.5 + 0.5 + 0.5 + 1.25) / 4
    torch.testing.assert_close(metrics["approx_kl"], ((ratios - 1) - ratios.log()).mean())
    symmetric, _ = clipped_surrogate_loss(logp, torch.zeros_like(logp), adv, 0.2)
    assert symmetric[0, 3] == -1.2  # clip_high defaults to clip_low


@SETTINGS
@given(seed=st.integers(0, 2**31), clip_low=st.floats(0, 0.5), clip_high=st.floats(0, 0.5))
def test_clipped_with_detached_old_is_pg_in_value_ratio_and_gradient(seed, clip_low, clip_high):
    logp, _, adv, mask = _case(seed)
    loss, metrics = clipped_surrogate_loss(logp, logp.detach(), adv, clip_low, clip_high, mask)
    pg, _ = pg_loss(logp, adv)
    assert metrics["ratio_mean"] == 1 and metrics["ratio_max"] == 1 and metrics["approx_kl"] == 0
    torch.testing.assert_close(loss, -adv[:, None].expand_as(logp))  # -A * rho with rho = 1
    torch.testing.assert_close(_grad(loss.sum(), logp), _grad(pg.sum(), logp))
    assert _grad(loss.sum(), logp).abs().sum() > 0


@SETTINGS
@given(seed=st.integers(0, 2**31), clip=st.floats(0.01, 0.5))
def test_clipped_is_a_pessimistic_bound_and_clip_metrics_match_zero_gradients(seed, clip):
    logp, old, adv, _ = _case(seed, spread=0.5)
    loss, metrics = clipped_surrogate_loss(logp, old, adv, clip)
    ratio = (logp - old).exp()
    a = adv[:, None].expand_as(ratio)
    assert (loss >= -a * ratio - 1e-12).all()
    grad = _grad(loss.sum(), logp)
    zero_grad = (grad == 0).double().mean()
    torch.testing.assert_close(metrics["clip_frac_low"] + metrics["clip_frac_high"], zero_grad)
    assert all(not v.requires_grad and v.dim() == 0 for v in metrics.values())


def _gspo_reference(logp, old, adv, mask, clip_low, clip_high):
    """GSPO as written in Zheng et al. 2025: per-sequence objective, mean over sequences."""
    n = mask.sum(1)
    s = (torch.where(mask, logp - old, 0.0).sum(1) / n).exp()  # (B,)
    return torch.maximum(-adv * s, -adv * s.clamp(1 - clip_low, 1 + clip_high)).mean()


@SETTINGS
@given(seed=st.integers(0, 2**31), clip_low=st.floats(1e-4, 0.3), clip_high=st.floats(1e-4, 0.3))
def test_gspo_token_form_equals_sequence_objective(seed, clip_low, clip_high):
    logp, old, adv, mask = _case(seed, spread=0.2)
    loss, metrics = sequence_clipped_surrogate_loss(logp, old, adv, mask, clip_low, clip_high)
    ours = aggregate_loss(loss, mask, "seq_mean_token_mean")
    ref = _gspo_reference(logp, old, adv, mask, clip_low, clip_high)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(_grad(ours, logp), _grad(ref, logp))
    s = (torch.where(mask, logp - old, 0.0).sum(1) / mask.sum(1)).exp()
    torch.testing.assert_close(metrics["seq_ratio_mean"], s.mean().detach())


def test_gspo_by_hand():
    logp = torch.tensor([[0.1, 0.3, 5.0]], requires_grad=True)  # old = 0; the last token is padding
    mask = torch.tensor([[1, 1, 0]])
    loss, _ = sequence_clipped_surrogate_loss(logp, torch.zeros(1, 3), torch.tensor([2.0]), mask, 0.5, 0.5)
    s = math.exp((0.1 + 0.3) / 2)  # length-normalised sequence ratio, inside [0.5, 1.5]
    torch.testing.assert_close(loss[0, :2], torch.tensor([-2.0 * s, -2.0 * s]))


def _kimi_reference(logp, old, rewards, mask, tau, g):
    """Per-sample Kimi k1.5 loss: -(r - r_bar) log pi(y) + tau/2 (log pi(y) / pi_old(y))^2, summed."""
    r_bar = rewards.reshape(-1, g).mean(1).repeat_interleave(g)
    seq_logp = torch.where(mask, logp, 0.0).sum(1)
    seq_log_ratio = torch.where(mask, logp - old, 0.0).sum(1)
    return (-(rewards - r_bar) * seq_logp + tau / 2 * seq_log_ratio**2).sum()


@SETTINGS
@given(seed=st.integers(0, 2**31), tau=st.floats(0, 2), g=st.sampled_from([1, 2, 4]))
def test_kimi_per_token_sums_to_the_paper_loss(seed, tau, g):
    logp, old, rewards, mask = _case(seed, b=4)
    loss, _ = kimi_loss(logp, old, rewards, mask, tau, group_size=g)
    ours = torch.where(mask, loss, 0.0).sum()
    ref = _kimi_reference(logp, old, rewards, mask, tau, g)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(_grad(ours, logp), _grad(ref, logp))
    centered = rewards - rewards.reshape(-1, g).mean(1).repeat_interleave(g)
    torch.testing.assert_close(kimi_loss(logp, old, centered, mask, tau)[0], loss)  # centering idempotent


def test_kimi_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    old = torch.tensor([[-1.5, -2.0], [-1.0, -1.0]])
    rewards, mask, tau = torch.tensor([1.0, 0.0]), torch.ones(2, 2), 0.4  # r_bar = 0.5
    loss, metrics = kimi_loss(logp, old, rewards, mask, tau)
    s0 = 0.5  # sequence log-ratio of row 0
    expected = torch.tensor([[-0.5 * -1.0 + tau / 2 * s0 * 0.5, -0.5 * -2.0], [0.5 * -1.0, 0.5 * -1.0]])
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(metrics["seq_log_ratio_sq"], torch.tensor((s0**2 + 0) / 2))


def test_clipped_value_loss_by_hand_and_gradient():
    values = torch.tensor([[1.5, 0.9, 0.0]], requires_grad=True)
    old, returns = torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[2.0, 0.0, 1.0]])
    loss, metrics = clipped_value_loss(values, old, returns, clip=0.2)
    # token 0: clipped V = 1.2, max((1.5-2)^2, (1.2-2)^2) = 0.64 -> clipped branch, gradient 0
    # token 1: clipped V = 0.9, both 0.81; token 2: 1.0 either way
    torch.testing.assert_close(loss, 0.5 * torch.tensor([[0.64, 0.81, 1.0]]))
    torch.testing.assert_close(_grad(loss.sum(), values), torch.tensor([[0.0, 0.9, -1.0]]))
    torch.testing.assert_close(metrics["value_clip_frac"], torch.tensor(1 / 3))


def test_value_clip_frac_ignores_rounding_inside_the_clip_range():
    # |V - V_old| < clip everywhere: old + (V - old) rounds away from V in float32 for many tokens, which must not
    # count as clipping (it made value_clip_frac depend on the micro-batch split)
    g = torch.Generator().manual_seed(0)
    values = torch.rand(64, 64, generator=g) * 0.05  # V near 0, V_old 0.1-0.19 away: their ulps differ
    old = values + 0.1 + torch.rand(64, 64, generator=g) * 0.09
    returns = torch.randn(64, 64, generator=g)
    rounded = old + (values - old).clamp(-0.2, 0.2)
    assert (rounded != values).any()  # the trap is present in this case
    _, metrics = clipped_value_loss(values, old, returns, clip=0.2)
    assert metrics["value_clip_frac"] == 0


def test_value_clip_frac_by_hand_counts_active_clipped_branches():
    values = torch.tensor([[1.5, 0.5, 1.1, 1.5]])
    old, returns = torch.tensor([[1.0, 1.0, 1.0, 1.0]]), torch.tensor([[2.0, 0.0, 2.0, 0.0]])
    # token 0: clamp active, clipped V = 1.2 is farther from 2 -> counted; token 1: clipped V = 0.8 farther from 0
    # -> counted; token 2: inside the range -> not; token 3: clamp active but V = 1.5 is farther from 0 than 1.2
    _, metrics = clipped_value_loss(values, old, returns, clip=0.2)
    torch.testing.assert_close(metrics["value_clip_frac"], torch.tensor(2 / 4))
    _, masked = clipped_value_loss(values, old, returns, clip=0.2, mask=torch.tensor([[1, 0, 1, 1]]))
    torch.testing.assert_close(masked["value_clip_frac"], torch.tensor(1 / 3))


@SETTINGS
@given(seed=st.integers(0, 2**31))
def test_clipped_value_loss_is_half_mse_with_a_wide_clip(seed):
    g = torch.Generator().manual_seed(seed)
    v, old, ret = (torch.randn(2, 4, generator=g, dtype=torch.float64) for _ in range(3))
    loss, _ = clipped_value_loss(v, old, ret, clip=1e6)
    torch.testing.assert_close(loss, 0.5 * (v - ret) ** 2)
    # clipping only ever raises the loss (old + (v - old) may differ from v in the last ulp)
    assert (clipped_value_loss(v, old, ret, clip=0.1)[0] >= loss * (1 - 1e-12)).all()


def test_registry_common_signature():
    logp, old, adv, mask = _case(0)
    for name, fn in POLICY_LOSSES.items():
        assert get_policy_loss(name) is fn
        loss, metrics = fn(logp, old, adv, mask, clip_low=None, clip_high=None, tau=0.1)
        assert loss.shape == logp.shape and all(not v.requires_grad for v in metrics.values())
    direct, _ = clipped_surrogate_loss(logp, old, adv, 0.2, 0.28, mask)
    torch.testing.assert_close(POLICY_LOSSES["clipped"](logp, old, adv, mask, clip_high=0.28)[0], direct)
    gspo_default, _ = sequence_clipped_surrogate_loss(logp, old, adv, mask)
    torch.testing.assert_close(POLICY_LOSSES["gspo"](logp, old, adv, mask)[0], gspo_default)
    with pytest.raises(ValueError, match="choose from"):
        get_policy_loss("ppo2")
    with pytest.raises(ValueError, match="tau"):
        POLICY_LOSSES["kimi"](logp, old, adv, mask)


def test_bad_input():
    logp, old, adv, mask = _case(0)
    with pytest.raises(ValueError, match=r"logprobs\(3, 5\), old_logprobs\(3, 4\)"):
        clipped_surrogate_loss(logp, old[:, :4], adv)
    with pytest.raises(ValueError, match="0/1"):
        sequence_clipped_surrogate_loss(logp, old, adv, mask.float() * 2)
    with pytest.raises(ValueError, match="clip_low"):
        clipped_surrogate_loss(logp, old, adv, clip_low=-0.1)
    with pytest.raises(ValueError, match="does not divide"):
        kimi_loss(logp, old, adv, mask, 0.1, group_size=2)
    with pytest.raises(ValueError, match=r"rewards must be \(3,\)"):
        kimi_loss(logp, old, old, mask, 0.1)


def test_kimi_registry_entry_takes_centred_advantages_as_given_so_micro_batches_agree():
    """The loop centres per prompt before shuffling into micro-batches; the registry's kimi must not
    centre again (a micro-batch mean is not the prompt's mean): split gradients == full gradient."""
    g = torch.Generator().manual_seed(0)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    adv = centered_advantages(rewards, 4)  # (8,) per-prompt r - r_bar
    logp = torch.randn(8, 5, generator=g, requires_grad=True)
    old, mask = logp.detach() - 0.05, torch.ones(8, 5, dtype=torch.bool)
    full, _ = POLICY_LOSSES["kimi"](logp, old, adv, mask, tau=0.1)
    (grad_full,) = torch.autograd.grad(full.sum(), logp)
    expected, _ = kimi_loss(logp, old, rewards, mask, 0.1, group_size=4)  # from raw rewards, per prompt
    torch.testing.assert_close(full, expected)
    split = torch.zeros_like(logp)
    for rows in (torch.tensor([0, 4, 5, 6]), torch.tensor([1, 2, 3, 7])):  # a shuffled split
        part, _ = POLICY_LOSSES["kimi"](logp[rows], old[rows], adv[rows], mask[rows], tau=0.1)
        split += torch.autograd.grad(part.sum(), logp)[0]
    torch.testing.assert_close(split, grad_full)
    with pytest.raises(ValueError, match=r"kimi advantages must be \(8,\)"):
        POLICY_LOSSES["kimi"](logp, old, adv[:4], mask, tau=0.1)


@pytest.mark.parametrize("clip_low", [1.0, 1.5])
def test_clip_low_of_one_or_more_switches_the_lower_clip_off(clip_low):
    """1 - clip_low <= 0 < ratio: the lower clip never binds, so the loss is PPO's with only the upper clip."""
    logp, old, adv, mask = _case(0)
    logp = (logp - 3.0).detach().requires_grad_()  # ratios far below 1 - 0.2: the lower clip would bind
    loss, metrics = clipped_surrogate_loss(logp, old, adv, clip_low, 0.2, mask)
    ratio = (logp - old).exp()
    expected = torch.maximum(-adv[:, None] * ratio, -adv[:, None] * ratio.clamp(max=1.2))
    torch.testing.assert_close(loss, expected)
    assert float(metrics["clip_frac_low"]) == 0.0
    clipped, _ = clipped_surrogate_loss(logp, old, adv, 0.2, 0.2, mask)
    assert not torch.allclose(clipped, loss)  # with 0.2 the lower clip does bind on these ratios


@SETTINGS
@given(seed=st.integers(0, 2**31), per_token=st.booleans())
def test_pg_loss_gradient_is_minus_the_advantage(seed, per_token):
    """REINFORCE (Williams 1992): d(-A log pi)/d log pi = -A per token; the advantage is a constant (no
    gradient reaches it even when it requires one)."""
    logp, _, adv, _ = _case(seed)
    adv = (torch.randn_like(logp) if per_token else adv).requires_grad_()
    loss, metrics = pg_loss(logp, adv)
    assert metrics == {}
    expected = -(adv if per_token else adv[:, None].expand_as(logp)).detach()
    torch.testing.assert_close(_grad(loss.sum(), logp), expected)
    torch.testing.assert_close(loss, expected * logp.detach())
    assert torch.autograd.grad(loss.sum(), adv, retain_graph=True, allow_unused=True)[0] is None


def test_pg_registry_entry_is_pg_loss_in_value_and_gradient():
    """The `pg` entry ignores old log-probs and clips (REINFORCE): same loss and gradient as `pg_loss`."""
    logp, old, adv, mask = _case(1, spread=0.5)
    entry, _ = POLICY_LOSSES["pg"](logp, old, adv, mask, clip_low=0.1, clip_high=0.1, tau=0.3)
    direct, _ = pg_loss(logp, adv)
    torch.testing.assert_close(entry, direct)
    torch.testing.assert_close(_grad(entry.sum(), logp), _grad(direct.sum(), logp))


def test_gspo_by_hand_clipped_and_unclipped():
    """One sequence, log-ratios (0.3, 0.5) and a padding token: s = exp(0.4) = 1.4918, far above 1 + 0.1.
    A = +1: the clipped branch binds, loss -1.1 per token, gradient 0. A = -1: max(s, 1.1) = s, unclipped,
    and under seq_mean_token_mean the gradient per valid token is -A * s / |y| = s / 2 (GSPO)."""
    logp = torch.tensor([[0.3, 0.5, 7.0]], dtype=torch.float64, requires_grad=True)
    old, mask = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[True, True, False]])
    s = math.exp(0.4)
    loss, metrics = sequence_clipped_surrogate_loss(logp, old, torch.tensor([1.0], dtype=torch.float64), mask,
                                                    0.1, 0.1)
    torch.testing.assert_close(loss[0, :2], torch.tensor([-1.1, -1.1], dtype=torch.float64))
    total = aggregate_loss(loss, mask, "seq_mean_token_mean")
    torch.testing.assert_close(_grad(total, logp), torch.zeros(1, 3, dtype=torch.float64))
    assert metrics["clip_frac_high"] == 1.0 and metrics["clip_frac_low"] == 0.0
    torch.testing.assert_close(metrics["seq_ratio_mean"], torch.tensor(s, dtype=torch.float64))
    loss, metrics = sequence_clipped_surrogate_loss(logp, old, torch.tensor([-1.0], dtype=torch.float64), mask,
                                                    0.1, 0.1)
    torch.testing.assert_close(loss[0, :2], torch.tensor([s, s], dtype=torch.float64))
    total = aggregate_loss(loss, mask, "seq_mean_token_mean")
    torch.testing.assert_close(_grad(total, logp), torch.tensor([[s / 2, s / 2, 0.0]], dtype=torch.float64))
    assert metrics["clip_frac_high"] == 0.0 and metrics["clip_frac_low"] == 0.0


@pytest.mark.parametrize("aggregation, rows", [("token_mean", 1), ("seq_mean_token_sum", 2)])
def test_gspo_row_with_no_valid_token_has_zero_gradient_not_nan(aggregation, rows):
    """The overlong filter clears a truncated row's mask (every aggregation but seq_mean_token_mean): its
    sequence ratio was 0/0, whose NaN reached the gradient (0 x NaN
    through exp) and so every weight. The row now counts as s = 1 with no tokens: no gradient, and the loss
    is the other rows' (over the `rows` the aggregation divides by: token_mean counts tokens, seq_mean_* every
    row)."""
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.3]], dtype=torch.float64, requires_grad=True)
    old = logp.detach() - 0.01
    adv, mask = torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([[True, True], [False, False]])
    loss, metrics = sequence_clipped_surrogate_loss(logp, old, adv, mask)
    total = aggregate_loss(loss, mask, aggregation)
    grad = _grad(total, logp)
    assert torch.isfinite(grad).all() and torch.equal(grad[1], torch.zeros(2, dtype=torch.float64))
    alone, alone_metrics = sequence_clipped_surrogate_loss(logp[:1], old[:1], adv[:1], mask[:1])
    alone_total = aggregate_loss(alone, mask[:1], aggregation) / rows
    torch.testing.assert_close(total, alone_total)
    torch.testing.assert_close(grad[:1], _grad(alone_total, logp)[:1])
    torch.testing.assert_close(metrics["seq_ratio_mean"], alone_metrics["seq_ratio_mean"])
    torch.testing.assert_close(metrics["seq_ratio_max"], alone_metrics["seq_ratio_max"])
