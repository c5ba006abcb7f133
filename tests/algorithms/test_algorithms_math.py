"""Pure math that lives in rlvr.algorithms: the Bradley-Terry loss, the SFT loss, the accumulation
denominator, DAPO's overlong filter and mask, and the learning-rate schedule (hand cases, properties,
closed forms). The model-dependent parts of those modules are tested next to them."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.dynamic_sampling import overlong_filter, overlong_loss_mask
from rlvr.algorithms.grpo import accumulation_denominator
from rlvr.algorithms.optim import lr_factor
from rlvr.algorithms.reward_model import bradley_terry_loss
from rlvr.algorithms.sft import sft_nll
from rlvr.core import dpo_loss

SETTINGS = settings(max_examples=50, deadline=None)


# --- Bradley-Terry --------------------------------------------------------------------------------


@SETTINGS
@given(r=st.floats(-20, 20), coef=st.floats(0, 1))
def test_bradley_terry_at_a_tie_is_log_2_and_the_centre_term_pulls_to_zero(r, coef):
    """Bradley & Terry 1952: P(w > l) = sigmoid(r_w - r_l) is 1/2 at a tie, so the loss is log 2 plus the
    centring term coef * (2 r)^2 (Eisenstein et al. 2023), whose gradient 2 coef (r_w + r_l) per reward is
    the only gradient left: the BT part's -1/2 and +1/2 cancel in the sum."""
    w = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    l = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    loss, metrics = bradley_terry_loss(w, l, center_coef=coef)
    torch.testing.assert_close(loss, torch.tensor([math.log(2) + coef * (2 * r) ** 2], dtype=torch.float64))
    gw, gl = torch.autograd.grad(loss.sum(), (w, l))
    torch.testing.assert_close(gw, torch.tensor([-0.5 + 2 * coef * 2 * r], dtype=torch.float64))
    torch.testing.assert_close(gl, torch.tensor([0.5 + 2 * coef * 2 * r], dtype=torch.float64))
    assert metrics["accuracy"] == 0 and metrics["margin"] == 0


def test_bradley_terry_is_the_dpo_loss_with_rewards_as_implicit_rewards():
    """DPO's loss is BT's with r = beta * log-ratio (Rafailov et al. 2023): the same numbers."""
    pw, pl = torch.tensor([-3.0, -1.0]), torch.tensor([-2.0, -4.0])
    rw, rl = torch.tensor([-2.5, -1.5]), torch.tensor([-2.0, -3.0])
    beta = 0.7
    bt, _ = bradley_terry_loss(beta * (pw - rw), beta * (pl - rl))
    torch.testing.assert_close(bt, dpo_loss(pw, pl, rw, rl, beta)[0])


# --- SFT ------------------------------------------------------------------------------------------


def test_sft_nll_by_hand():
    logprobs = torch.tensor([[-0.5, -1.0, -9.0], [-2.0, -7.0, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert sft_nll(logprobs, mask).item() == pytest.approx(0.5 + 1.0 + 2.0)


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 4), t=st.integers(1, 6), cut=st.integers(0, 4))
def test_sft_nll_is_additive_over_micro_batches(seed, b, t, cut):
    """A sum, so micro-batch losses add up to the batch's: the caller divides once by the token count."""
    g = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) < 0.7
    cut = min(cut, b)
    total = sft_nll(logprobs, mask)
    torch.testing.assert_close(total, -logprobs[mask].sum())
    torch.testing.assert_close(sft_nll(logprobs[:cut], mask[:cut]) + sft_nll(logprobs[cut:], mask[cut:]), total)
    assert total >= 0


# --- accumulation denominator -----------------------------------------------------------------------


def test_accumulation_denominator_by_hand():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert accumulation_denominator("token_mean", mask) == 3  # valid tokens
    for mode in ("seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_constant"):
        assert accumulation_denominator(mode, mask) == 2  # sequences
    empty = torch.zeros(2, 3, dtype=torch.bool)  # every row left the mask (overlong filter)
    assert accumulation_denominator("token_mean", empty) == 1  # loss 0 / 1 = 0, not 0 / 0


# --- DAPO overlong filter -------------------------------------------------------------------------


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 6), t=st.integers(1, 5), per_token=st.booleans())
def test_overlong_filter_and_mask_touch_only_truncated_rows(seed, b, t, per_token):
    """DAPO sec. 3.4: a truncated row gets advantage 0 and leaves the mask; every other row is unchanged;
    when all rows are truncated the mask is kept (nothing to average otherwise)."""
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn((b, t) if per_token else (b,), generator=g)
    truncated = torch.rand(b, generator=g) < 0.5
    mask = torch.rand(b, t, generator=g) < 0.8
    out = overlong_filter(adv, truncated)
    assert (out[truncated] == 0).all() and torch.equal(out[~truncated], adv[~truncated])
    new_mask = overlong_loss_mask(mask, truncated)
    if truncated.all():
        assert torch.equal(new_mask, mask)
    else:
        assert not new_mask[truncated].any() and torch.equal(new_mask[~truncated], mask[~truncated])


# --- learning-rate schedule -----------------------------------------------------------------------


@SETTINGS
@given(schedule=st.sampled_from(["constant", "linear", "cosine"]), warmup=st.integers(0, 10),
       extra=st.integers(1, 50), min_ratio=st.floats(0, 1))
def test_lr_factor_warms_up_linearly_then_decays_monotonically_to_min_ratio(schedule, warmup, extra, min_ratio):
    total = warmup + extra
    f = lr_factor(schedule, warmup, total, min_ratio)
    assert [f(s) for s in range(warmup)] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    after = [f(s) for s in range(warmup, total + 5)]
    assert after[0] == pytest.approx(1.0)  # continuous at the end of warmup: the peak
    assert all(a >= b - 1e-12 for a, b in zip(after, after[1:]))  # never rises again
    end = 1.0 if schedule == "constant" else min_ratio
    assert f(total) == pytest.approx(end) and f(total + 100) == pytest.approx(end)
