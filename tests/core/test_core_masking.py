"""masked_* reductions and aggregate_loss, including gradient-accumulation equivalence."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import (
    AGGREGATION_MODES,
    aggregate_loss,
    masked_count,
    masked_mean,
    masked_normalize,
    masked_row_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

SETTINGS = settings(max_examples=50, deadline=None)


def _random_batch(seed: int, b: int, t: int):
    """x (B, T) and a right-padded mask with at least one valid token per row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    return x, mask


X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[True, True, False], [True, False, False]])


def test_masked_reductions_by_hand():
    assert masked_sum(X, M) == 1 + 2 + 4
    assert masked_mean(X, M) == (1 + 2 + 4) / 3
    torch.testing.assert_close(masked_sum(X, M, dim=1), torch.tensor([1 + 2.0, 4.0]))
    torch.testing.assert_close(masked_mean(X, M, dim=1), torch.tensor([(1 + 2) / 2, 4.0]))
    torch.testing.assert_close(masked_normalize(X, M, 4.0, dim=1), torch.tensor([3 / 4, 4 / 4]))
    mean = 7 / 3
    var = ((1 - mean) ** 2 + (2 - mean) ** 2 + (4 - mean) ** 2) / 2
    torch.testing.assert_close(masked_var(X, M), torch.tensor(var))
    torch.testing.assert_close(masked_var(X, M, unbiased=False), torch.tensor(var * 2 / 3))


def test_masks_of_any_zero_one_dtype_agree():
    for mask in (M.float(), M.long(), M.to(torch.uint8)):
        assert masked_mean(X, mask) == masked_mean(X, M)


def test_empty_mask_gives_nan_not_zero():
    assert math.isnan(masked_mean(X, torch.zeros_like(M)).item())
    rows = masked_mean(X, torch.tensor([[True, False, False], [False, False, False]]), dim=1)
    assert rows[0] == 1.0 and math.isnan(rows[1].item())


def test_no_silent_broadcasting_and_no_fractional_masks():
    with pytest.raises(ValueError, match=r"x\(2, 3\), mask\(3,\)"):
        masked_sum(X, M[0])
    with pytest.raises(ValueError, match=r"0/1, found values \[0.5\]"):
        masked_mean(X, torch.tensor([[1, 0.5, 0], [1, 0, 0]]))


def test_nan_and_inf_in_padding_do_not_leak():
    x = X.clone()
    x[0, 2], x[1, 1] = float("nan"), float("-inf")
    assert masked_mean(x, M) == masked_mean(X, M)
    assert torch.isfinite(masked_whiten(x, M)).all()


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 5), t=st.integers(1, 7))
def test_masked_mean_equals_mean_of_selection(seed, b, t):
    x, mask = _random_batch(seed, b, t)
    torch.testing.assert_close(masked_mean(x, mask), x[mask].mean())
    if mask.sum() > 1:
        torch.testing.assert_close(masked_var(x, mask), x[mask].var())
    per_row = torch.stack([x[i][mask[i]].mean() for i in range(b)])
    torch.testing.assert_close(masked_mean(x, mask, dim=1), per_row)


@SETTINGS
@given(seed=st.integers(0, 2**31), scale=st.floats(0.1, 100), shift=st.floats(-100, 100))
def test_whiten_standardises_and_is_affine_invariant(seed, scale, shift):
    x, mask = _random_batch(seed, 4, 6)
    mask[0, :2] = True  # at least 2 valid elements
    w = masked_whiten(x, mask, eps=0.0)
    torch.testing.assert_close(w[mask].mean(), torch.tensor(0.0, dtype=x.dtype), atol=1e-9, rtol=0)
    torch.testing.assert_close(w[mask].std(), torch.tensor(1.0, dtype=x.dtype))
    assert (w[~mask] == 0).all()
    torch.testing.assert_close(masked_whiten(scale * x + shift, mask, eps=0.0), w)


def test_whiten_needs_two_valid_elements():
    with pytest.raises(ValueError, match="at least 2"):
        masked_whiten(X, torch.tensor([[True, False, False], [False, False, False]]))


def test_aggregate_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate_loss(loss, mask, "token_mean") == (1 + 2 + 3 + 4) / 4
    assert aggregate_loss(loss, mask, "seq_mean_token_mean") == ((1 + 2 + 3) / 3 + 4 / 1) / 2
    assert aggregate_loss(loss, mask, "seq_mean_token_sum") == ((1 + 2 + 3) + 4) / 2
    dr_grpo = aggregate_loss(loss, mask, "seq_sum_constant", constant=3)
    torch.testing.assert_close(dr_grpo, torch.tensor(((1 + 2 + 3) / 3 + 4 / 3) / 2))


def test_a_sequence_with_no_valid_token_adds_zero_and_counts_in_every_sequence_mode():
    """A behaviour correction may reject every token of a sequence (rlvr.core.importance): the sequence adds 0
    and the sequence modes still divide by B, seq_mean_token_mean included (its mean over no token is 0, not
    0 / 0); token_mean counts the valid tokens only."""
    loss = torch.tensor([[1.0, 3.0, 9.0], [5.0, 7.0, 11.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    expected = {"token_mean": 4 / 2, "seq_mean_token_mean": (4 / 2) / 2, "seq_mean_token_sum": 4 / 2,
                "seq_sum_constant": (4 / 10) / 2}
    for mode, value in expected.items():
        assert aggregate_loss(loss, mask, mode, 10.0).item() == pytest.approx(value), mode


def test_aggregate_loss_rejects_bad_mode_and_missing_constant():
    with pytest.raises(ValueError, match="token_mean"):
        aggregate_loss(X, M, "mean")
    with pytest.raises(ValueError, match="constant"):
        aggregate_loss(X, M, "seq_sum_constant")
    with pytest.raises(ValueError, match="shape"):
        aggregate_loss(X, M[:, :2], "token_mean")


def _grad(params: torch.Tensor, per_token_fn, mask, mode, **kw) -> torch.Tensor:
    params.grad = None
    aggregate_loss(per_token_fn(params), mask, mode, constant=7, **kw).backward()
    return params.grad.clone()


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), split=st.integers(1, 5))
def test_gradient_accumulation_reproduces_full_batch(mode, seed, split):
    b, t = 6, 7
    x, mask = _random_batch(seed, b, t)
    params = torch.randn(t, dtype=torch.float64, requires_grad=True)

    def per_token(p, rows=slice(None)):
        return (x[rows] * p).sin() ** 2  # any smooth per-token loss of the parameters

    full = _grad(params, per_token, mask, mode)
    denominator = mask.sum() if mode == "token_mean" else b  # the full-batch normaliser
    accumulated = torch.zeros_like(params)
    for rows in (slice(0, split), slice(split, b)):
        accumulated += _grad(params, lambda p: per_token(p, rows), mask[rows], mode,
                             denominator=denominator)
    torch.testing.assert_close(accumulated, full)


def test_token_mean_needs_the_global_denominator():
    """Micro-batches with unequal token counts: averaging local token means is not the full mean."""
    loss = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    local = sum(aggregate_loss(loss[i : i + 1], mask[i : i + 1], "token_mean") for i in range(2)) / 2
    assert local != aggregate_loss(loss, mask, "token_mean")


def test_masked_whiten_by_hand():
    """Valid elements 1, 2, 4: mean 7/3, unbiased variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3."""
    w = masked_whiten(X, M, eps=0.0)
    sd = math.sqrt(7 / 3)
    expected = torch.tensor([[(1 - 7 / 3) / sd, (2 - 7 / 3) / sd, 0.0], [(4 - 7 / 3) / sd, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    eps = 0.5  # eps goes inside the square root: (x - mean) / sqrt(var + eps)
    torch.testing.assert_close(masked_whiten(X, M, eps=eps)[0, 0], torch.tensor((1 - 7 / 3) / math.sqrt(7 / 3 + eps)))


def test_masked_count_by_hand():
    assert masked_count(M, X) == 3 and masked_count(M, X).dtype == X.dtype
    torch.testing.assert_close(masked_count(M, X, dim=1), torch.tensor([2.0, 1.0]))
    assert masked_count(M.long(), X.long()).dtype == torch.get_default_dtype()  # integer data: float count


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 5), t=st.integers(1, 7), constant=st.floats(0.5, 64))
def test_masked_count_and_normalize_match_the_selection(seed, b, t, constant):
    x, mask = _random_batch(seed, b, t)
    assert masked_count(mask, x) == mask.sum()
    torch.testing.assert_close(masked_count(mask, x, dim=1), mask.sum(1).double())
    torch.testing.assert_close(masked_normalize(x, mask, constant), x[mask].sum() / constant)
    per_row = torch.stack([x[i][mask[i]].sum() for i in range(b)]) / constant
    torch.testing.assert_close(masked_normalize(x, mask, constant, dim=1), per_row)


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 5), t=st.integers(1, 7), constant=st.floats(1, 16))
def test_per_token_weight_of_each_aggregation_is_the_closed_form(seed, b, t, constant):
    """d loss / d L_bt, the weight one token gets (Liu et al. 2025, Dr. GRPO; Yu et al. 2025, DAPO):
    token_mean 1 / sum m; seq_mean_token_mean 1 / (B |o_b|), so tokens of short sequences weigh more (the
    length bias); seq_mean_token_sum 1 / B; seq_sum_constant 1 / (B C), the same for every length. 0 on padding."""
    x, mask = _random_batch(seed, b, t)
    x.requires_grad_()
    lengths = mask.sum(1, keepdim=True).double()  # (B, 1) |o_b|
    expected = {
        "token_mean": torch.full_like(x, 1.0) / mask.sum(),
        "seq_mean_token_mean": (1.0 / (b * lengths)).expand_as(x),
        "seq_mean_token_sum": torch.full_like(x, 1.0 / b),
        "seq_sum_constant": torch.full_like(x, 1.0 / (b * constant)),
    }
    for mode, weight in expected.items():
        grad, = torch.autograd.grad(aggregate_loss(x, mask, mode, constant), x)
        torch.testing.assert_close(grad, torch.where(mask, weight.detach(), 0.0))


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 5), t=st.integers(1, 7))
def test_aggregations_agree_when_every_sequence_has_the_full_length(seed, b, t):
    """No padding and C = T: all four modes weigh every token alike; token_mean = seq_mean_token_mean =
    seq_sum_constant, and seq_mean_token_sum = T * token_mean."""
    x = torch.randn(b, t, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    mask = torch.ones(b, t, dtype=torch.bool)
    token_mean = aggregate_loss(x, mask, "token_mean")
    torch.testing.assert_close(token_mean, x.mean())
    torch.testing.assert_close(aggregate_loss(x, mask, "seq_mean_token_mean"), token_mean)
    torch.testing.assert_close(aggregate_loss(x, mask, "seq_sum_constant", constant=t), token_mean)
    torch.testing.assert_close(aggregate_loss(x, mask, "seq_mean_token_sum"), t * token_mean)


def test_masked_row_mean_by_hand():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, float("nan"), 5.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert torch.equal(masked_row_mean(x, mask), torch.tensor([1.5, 4.0, 0.0]))  # an empty row: 0, not NaN


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 7))
def test_masked_row_mean_is_the_mean_of_each_row_where_it_has_a_token(seed, b, t):
    x, mask = _random_batch(seed, b, t)
    mask[0] = False  # one row without a valid token
    out = masked_row_mean(x, mask)
    assert out[0] == 0
    for row in range(1, b):
        assert torch.allclose(out[row], x[row][mask[row]].mean())
    assert torch.allclose(out[1:], masked_mean(x[1:], mask[1:], dim=-1))
