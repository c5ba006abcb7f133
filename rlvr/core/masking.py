"""Masked reductions and loss aggregation over right-padded `(B, T)` token tensors.

A mask is `bool` or 0/1 of any dtype, with exactly the shape of the data (never broadcast). Masked-out
positions are excluded with `torch.where`, not multiplied by 0, so a NaN or -inf sitting in padding
never leaks into a result. An empty mask gives NaN (0 / 0), never a silent 0; the one exception is
`masked_row_mean`, the per-sequence mean of a loss or a log-ratio, where a sequence with no valid token
(all of it filtered or rejected) gives 0 and so adds nothing.

`aggregate_loss` turns a per-token loss into the scalar to differentiate. The choice matters: it sets
how much each token and each sequence weighs (Liu et al. 2025, "Understanding R1-Zero-Like Training",
Dr. GRPO; Yu et al. 2025, DAPO).
"""

from __future__ import annotations

from torch import Tensor

import torch

from rlvr.core._checks import as_bool_mask, check_positive

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_constant")


def _float_like(x: Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """sum_{i: mask_i} x_i, over all elements (`dim=None`) or along `dim`."""
    m = as_bool_mask(mask, x)
    kept = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_count(mask: Tensor, like: Tensor, dim: int | None = None) -> Tensor:
    """Number of valid elements as a float tensor of `like`'s floating dtype."""
    m = as_bool_mask(mask, like)
    counts = m.sum() if dim is None else m.sum(dim)
    return counts.to(_float_like(like))


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """sum over mask / count over mask; NaN where the mask is empty."""
    return masked_sum(x, mask, dim).to(_float_like(x)) / masked_count(mask, x, dim)


def masked_row_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over each row's valid elements: x, mask (B, T) -> (B,); 0 for a row without one (a sequence whose
    every token was filtered or rejected), which then adds nothing rather than a NaN (0 / 0)."""
    return masked_sum(x, mask, dim=-1) / masked_count(mask, x, dim=-1).clamp(min=1)


def masked_normalize(x: Tensor, mask: Tensor, constant: float, dim: int | None = None) -> Tensor:
    """sum over mask / `constant` (a fixed normaliser such as the generation budget, Dr. GRPO)."""
    check_positive("constant", constant)
    return masked_sum(x, mask, dim) / constant


def keep_tokens(mask: Tensor, keep: Tensor) -> Tensor:
    """The loss mask of episodes whose completions interleave the model's tokens with an environment's.

    `mask` (B, T) marks each row's completion positions; `keep` (M,), M = mask.sum(), says for each of them, in
    row-major order (row by row, left to right: the order the tokens were produced in), whether the model wrote
    it. Returns `mask` with the environment's positions cleared: (B, T) bool, True exactly where a completion
    token was the model's. Every masked reduction, `aggregate_loss` and the KL and importance-weight functions
    then leave the environment's tokens out, of the numerators and of the token counts alike (verl's
    `response_mask`, TRL's `tool_mask`).
    """
    m = mask if mask.dtype == torch.bool else as_bool_mask(mask, mask)
    keep = keep if keep.dtype == torch.bool else keep != 0
    if keep.dim() != 1 or keep.numel() != int(m.sum()):
        raise ValueError(f"keep must be a flat (M,) tensor with one entry per True of mask (M = {int(m.sum())}), "
                         f"got shape {tuple(keep.shape)}")
    return torch.zeros_like(m).masked_scatter(m, keep.to(m.device))


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance over all valid elements; Bessel-corrected (n - 1) by default, as `torch.var`."""
    mean = masked_mean(x, mask)
    n = masked_count(mask, x)
    return masked_sum((x - mean) ** 2, mask) / (n - 1 if unbiased else n)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the valid elements; masked-out positions are 0.

    Statistics pool every valid element of the batch (PPO advantage whitening, as in OpenAI's
    lm-human-preferences and TRL); the variance is unbiased, so at least 2 valid elements are needed.
    """
    m = as_bool_mask(mask, x)
    n = int(m.sum())
    if n < 2:
        raise ValueError(f"masked_whiten needs at least 2 valid elements, mask has {n}")
    mean, var = masked_mean(x, m), masked_var(x, m)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    return torch.where(m, whitened, torch.zeros((), dtype=whitened.dtype, device=x.device))


def aggregate_loss(
    per_token: Tensor,
    mask: Tensor,
    mode: str,
    constant: float | None = None,
    *,
    denominator: float | Tensor | None = None,
) -> Tensor:
    """Reduce a per-token loss `(B, T)` to a scalar.

    Modes (L_bt the per-token loss, m_bt the mask, |o_b| = sum_t m_bt the length of sequence b):
      token_mean           sum_bt m L / sum_bt m             every token weighs the same (DAPO)
      seq_mean_token_mean  1/B sum_b (1/|o_b| sum_t m L)     original GRPO (Shao et al. 2024)
      seq_mean_token_sum   1/B sum_b sum_t m L               sequence-level REINFORCE
      seq_sum_constant     1/B sum_b (sum_t m L) / constant  Dr. GRPO, constant = max generation length

    `denominator` replaces the outer normaliser (the valid-token count for `token_mean`, `B` for the
    others) with its full-batch value. Summing the losses of micro-batches computed with the full-batch
    denominator then reproduces the full-batch loss and gradient exactly (gradient accumulation).
    A sequence with no valid token (every token rejected by a behaviour correction, `rlvr.core.importance`)
    adds 0 in every sequence mode and still counts in `B`: under `seq_mean_token_mean` its mean over no token
    is taken as 0, as the other modes' sums are.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose from {list(AGGREGATION_MODES)}")
    if per_token.dim() != 2:
        raise ValueError(f"per_token must be (B, T), got shape {tuple(per_token.shape)}")
    m = as_bool_mask(mask, per_token, like_name="per_token")
    if mode == "seq_sum_constant" and constant is None:
        raise ValueError("mode 'seq_sum_constant' needs `constant` (e.g. the max generation length)")
    if denominator is not None:
        check_positive("denominator", denominator)
    if mode == "token_mean":
        total = masked_sum(per_token, m)
        return total / (masked_count(m, per_token) if denominator is None else denominator)
    if mode == "seq_mean_token_mean":
        per_seq = masked_row_mean(per_token, m)  # (B,)
    elif mode == "seq_mean_token_sum":
        per_seq = masked_sum(per_token, m, dim=-1)  # (B,)
    else:
        per_seq = masked_normalize(per_token, m, constant, dim=-1)  # (B,)
    return per_seq.sum() / (per_token.shape[0] if denominator is None else denominator)
