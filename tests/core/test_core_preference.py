"""DPO, IPO, SimPO, LN-DPO and the PREFERENCE_LOSSES registry."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import PREFERENCE_LOSSES, dpo_loss, get_preference_loss, ipo_loss, ln_dpo_loss, simpo_loss

SETTINGS = settings(max_examples=50, deadline=None)


def _pairs(seed, p=4):
    g = torch.Generator().manual_seed(seed)
    logps = [(-20 * torch.rand(p, generator=g, dtype=torch.float64)) for _ in range(4)]
    lengths = [torch.randint(1, 30, (p,), generator=g) for _ in range(2)]
    return [x.requires_grad_() for x in logps[:2]] + logps[2:], lengths


def test_dpo_by_hand():
    pw, pl, rw, rl = (torch.tensor([x]) for x in (-10.0, -12.0, -11.0, -11.0))
    beta = 0.5
    r_w, r_l = beta * (-10 + 11), beta * (-12 + 11)  # implicit rewards 0.5, -0.5
    loss, metrics = dpo_loss(pw, pl, rw, rl, beta)
    torch.testing.assert_close(loss, torch.tensor([math.log1p(math.exp(-(r_w - r_l)))]))
    assert metrics["chosen_reward"] == r_w and metrics["rejected_reward"] == r_l
    assert metrics["accuracy"] == 1.0 and metrics["margin"] == r_w - r_l
    smoothed, _ = dpo_loss(pw, pl, rw, rl, beta, label_smoothing=0.1)
    x = r_w - r_l
    expected = 0.9 * math.log1p(math.exp(-x)) + 0.1 * math.log1p(math.exp(x))
    torch.testing.assert_close(smoothed, torch.tensor([expected]))


@SETTINGS
@given(seed=st.integers(0, 2**31), beta=st.floats(0.01, 5))
def test_dpo_gradient_weight(seed, beta):
    """grad = -beta * sigmoid(r_l - r_w) * (grad log pi(y_w) - grad log pi(y_l)) (Rafailov et al. 2023)."""
    (pw, pl, rw, rl), _ = _pairs(seed)
    loss, _ = dpo_loss(pw, pl, rw, rl, beta)
    gw, gl = torch.autograd.grad(loss.sum(), (pw, pl))
    weight = beta * torch.sigmoid(beta * (pl - rl) - beta * (pw - rw)).detach()
    torch.testing.assert_close(gw, -weight)
    torch.testing.assert_close(gl, weight)


def test_ipo_by_hand_and_minimum():
    beta = 0.25
    pw, pl, rw, rl = (torch.tensor([x], requires_grad=True) for x in (-1.0, -3.0, -1.0, -1.0))
    h = (-1 + 1) - (-3 + 1)
    loss, _ = ipo_loss(pw, pl, rw, rl, beta)
    torch.testing.assert_close(loss, torch.tensor([(h - 1 / (2 * beta)) ** 2]))
    at_target = torch.tensor([-1.0 + 1 / (2 * beta)], requires_grad=True)  # h = 1 / (2 beta)
    loss, _ = ipo_loss(at_target, torch.tensor([-1.0]), torch.tensor([-1.0]), torch.tensor([-1.0]), beta)
    assert loss.item() == 0 and torch.autograd.grad(loss.sum(), at_target)[0].item() == 0


def test_simpo_by_hand():
    pw, pl = torch.tensor([-6.0]), torch.tensor([-12.0])
    nw, nl = torch.tensor([3]), torch.tensor([4])
    beta, gamma = 2.0, 0.5
    x = beta * -6 / 3 - beta * -12 / 4 - gamma
    loss, metrics = simpo_loss(pw, pl, nw, nl, beta, gamma)
    torch.testing.assert_close(loss, torch.tensor([math.log1p(math.exp(-x))]))
    assert metrics["chosen_reward"] == beta * -6 / 3


@SETTINGS
@given(seed=st.integers(0, 2**31), beta=st.floats(0.01, 5), k=st.integers(1, 5))
def test_length_normalisation_properties(seed, beta, k):
    (pw, pl, rw, rl), (nw, nl) = _pairs(seed)
    ones = torch.ones_like(nw)
    dpo, _ = dpo_loss(pw, pl, rw, rl, beta)
    torch.testing.assert_close(ln_dpo_loss(pw, pl, rw, rl, ones, ones, beta)[0], dpo)
    # scaling every log-prob and length by k leaves length-normalised losses unchanged
    torch.testing.assert_close(ln_dpo_loss(k * pw, k * pl, k * rw, k * rl, k * nw, k * nl, beta)[0],
                               ln_dpo_loss(pw, pl, rw, rl, nw, nl, beta)[0])
    simpo, _ = simpo_loss(pw, pl, nw, nl, beta)
    torch.testing.assert_close(simpo_loss(k * pw, k * pl, k * nw, k * nl, beta)[0], simpo)
    for loss in (dpo_loss(pw, pl, rw, rl, beta)[0], simpo_loss(pw, pl, nw, nl, beta)[0]):
        assert (loss > 0).all()


def test_registry_common_signature():
    (pw, pl, rw, rl), (nw, nl) = _pairs(0)
    for name, fn in PREFERENCE_LOSSES.items():
        assert get_preference_loss(name) is fn
        loss, metrics = fn(pw, pl, rw, rl, nw, nl, 0.5, gamma=None, label_smoothing=None)
        assert loss.shape == pw.shape
        assert set(metrics) == {"chosen_reward", "rejected_reward", "accuracy", "margin"}
        assert all(not v.requires_grad and v.dim() == 0 for v in metrics.values())
    torch.testing.assert_close(PREFERENCE_LOSSES["simpo"](pw, pl, None, None, nw, nl, 2.0)[0],
                               simpo_loss(pw, pl, nw, nl, 2.0, 1.0)[0])
    with pytest.raises(ValueError, match="choose from"):
        get_preference_loss("kto")


def test_a_registry_call_with_beta_none_takes_the_paper_default():
    """docs/core.md promises that None takes the paper default, but `beta=None` raised a TypeError."""
    (pw, pl, rw, rl), (nw, nl) = _pairs(0)
    for name, beta in (("dpo", 0.1), ("ipo", 0.1), ("simpo", 2.0)):
        fn = PREFERENCE_LOSSES[name]
        torch.testing.assert_close(fn(pw, pl, rw, rl, nw, nl, None)[0], fn(pw, pl, rw, rl, nw, nl, beta)[0])
    with pytest.raises(ValueError, match="^loss 'ln_dpo' has no default beta; set beta"):
        PREFERENCE_LOSSES["ln_dpo"](pw, pl, rw, rl, nw, nl, None)


def test_bad_input():
    (pw, pl, rw, rl), (nw, nl) = _pairs(0)
    with pytest.raises(ValueError, match=r"policy_chosen_logps\(4,\), policy_rejected_logps\(3,\)"):
        dpo_loss(pw, pl[:3], rw, rl)
    with pytest.raises(ValueError, match="beta"):
        ipo_loss(pw, pl, rw, rl, beta=0.0)
    with pytest.raises(ValueError, match="chosen_lengths must all be > 0"):
        simpo_loss(pw, pl, nw * 0, nl)
    with pytest.raises(ValueError, match="dimension"):
        dpo_loss(pw[None], pl[None], rw[None], rl[None])


@SETTINGS
@given(seed=st.integers(0, 2**31), beta=st.floats(0.01, 5), eps=st.floats(0, 0.49))
def test_dpo_at_equal_log_ratios_is_log_2(seed, beta, eps):
    """Rafailov et al. 2023, eq. 7: at the start of training (policy = reference, or any pair whose two
    log-ratios are equal) the logit is 0, so the loss is -log sigmoid(0) = log 2 for every beta and label
    smoothing, and the gradient per chosen log-prob is -beta * sigmoid(0) * (1 - 2 eps) = -beta (1 - 2 eps) / 2."""
    (pw, pl, _, _), _ = _pairs(seed)
    loss, metrics = dpo_loss(pw, pl, pw.detach(), pl.detach(), beta, label_smoothing=eps)
    torch.testing.assert_close(loss, torch.full_like(loss, math.log(2)))
    assert metrics["accuracy"] == 0 and metrics["margin"] == 0
    gw, gl = torch.autograd.grad(loss.sum(), (pw, pl))
    torch.testing.assert_close(gw, torch.full_like(gw, -beta * (1 - 2 * eps) / 2))
    torch.testing.assert_close(gl, -gw)
    # shifting both log-ratios by the same amount changes nothing: only their difference counts
    shifted, _ = dpo_loss(pw + 3.0, pl + 5.0, pw.detach() + 3.0, pl.detach() + 5.0, beta, label_smoothing=eps)
    torch.testing.assert_close(shifted, loss)


@SETTINGS
@given(seed=st.integers(0, 2**31), beta=st.floats(0.01, 5), shift=st.floats(-10, 10))
def test_ipo_is_a_squared_distance_to_its_optimum(seed, beta, shift):
    """Azar et al. 2023 (IPO): (h - 1 / (2 beta))^2 >= 0, zero exactly at h = 1 / (2 beta); gradient
    2 (h - 1 / (2 beta)) per chosen log-prob and its negative per rejected one (regression, not a
    sigmoid: it keeps pulling h back even once the pair is ranked right). h sees only log-ratios."""
    (pw, pl, rw, rl), _ = _pairs(seed)
    loss, _ = ipo_loss(pw, pl, rw, rl, beta)
    h = ((pw - rw) - (pl - rl)).detach()
    target = 1 / (2 * beta)
    torch.testing.assert_close(loss, (h - target) ** 2)
    assert (loss >= 0).all()
    gw, gl = torch.autograd.grad(loss.sum(), (pw, pl))
    torch.testing.assert_close(gw, 2 * (h - target))
    torch.testing.assert_close(gl, -2 * (h - target))
    torch.testing.assert_close(ipo_loss(pw + shift, pl, rw + shift, rl, beta)[0], loss)
    at_optimum = (pl + rw - rl).detach() + target  # h = target exactly
    torch.testing.assert_close(ipo_loss(at_optimum, pl, rw, rl, beta)[0], torch.zeros_like(loss), atol=1e-12,
                               rtol=0)


def test_ln_dpo_by_hand():
    """LN-DPO: r = beta / |y| * (log pi - log pi_ref). Chosen log-ratio +1 over 2 tokens, rejected -1 over 4
    tokens, beta = 1: r_w = 0.5, r_l = -0.25, loss = log(1 + exp(-0.75)); plain DPO would use 1 - (-1) = 2."""
    pw, pl, rw, rl = (torch.tensor([x]) for x in (-10.0, -12.0, -11.0, -11.0))
    nw, nl = torch.tensor([2]), torch.tensor([4])
    loss, metrics = ln_dpo_loss(pw, pl, rw, rl, nw, nl, 1.0)
    torch.testing.assert_close(loss, torch.tensor([math.log1p(math.exp(-0.75))]))
    assert metrics["chosen_reward"] == 0.5 and metrics["rejected_reward"] == -0.25
    assert metrics["margin"] == 0.75 and metrics["accuracy"] == 1.0
    dpo, _ = dpo_loss(pw, pl, rw, rl, 1.0)
    torch.testing.assert_close(dpo, torch.tensor([math.log1p(math.exp(-2.0))]))


@SETTINGS
@given(seed=st.integers(0, 2**31), beta=st.floats(0.01, 5), gamma=st.floats(0, 5))
def test_simpo_at_equal_average_log_probs_is_softplus_gamma(seed, beta, gamma):
    """SimPO (Meng et al. 2024): with equal length-averaged log-probs the logit is -gamma, so the loss is
    log(1 + e^gamma) (log 2 at gamma = 0): the margin gamma keeps pushing even a tie apart."""
    (pw, _, _, _), (nw, nl) = _pairs(seed)
    pl = pw.detach() / nw * nl  # same average log-prob per token as the chosen response
    loss, metrics = simpo_loss(pw, pl, nw, nl, beta, gamma)
    torch.testing.assert_close(loss, torch.full_like(loss, math.log1p(math.exp(gamma))))
    torch.testing.assert_close(metrics["margin"], torch.tensor(0.0, dtype=loss.dtype), atol=1e-12, rtol=0)


def test_registry_entries_equal_the_direct_calls():
    """Every PREFERENCE_LOSSES entry computes the same loss as its function, options passed through."""
    (pw, pl, rw, rl), (nw, nl) = _pairs(3)
    cases = [
        ("dpo", dict(label_smoothing=0.2), dpo_loss(pw, pl, rw, rl, 0.5, 0.2)[0]),
        ("dpo", dict(), dpo_loss(pw, pl, rw, rl, 0.5, 0.0)[0]),
        ("ipo", dict(), ipo_loss(pw, pl, rw, rl, 0.5)[0]),
        ("ln_dpo", dict(), ln_dpo_loss(pw, pl, rw, rl, nw, nl, 0.5)[0]),
        ("simpo", dict(gamma=0.3), simpo_loss(pw, pl, nw, nl, 0.5, 0.3)[0]),
    ]
    for name, options, expected in cases:
        torch.testing.assert_close(PREFERENCE_LOSSES[name](pw, pl, rw, rl, nw, nl, 0.5, **options)[0], expected)
