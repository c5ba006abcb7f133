"""Behaviour-policy correction: the sampler is not pi_old.

Asynchronous RL samples a batch with weights k updates older than the learner's (pi_behaviour), and an
inference engine (vLLM, bf16 kernels) computes slightly different probabilities than the training kernels
even at equal weights. The clipped surrogate's ratio pi / pi_old assumes the data came from pi_old; the
per-token importance ratio rho_t = pi_old_t / pi_behaviour_t corrects the expectation. Its variance is
unbounded, so it is bounded with a cap C > 1 in one of four ways (docs/core.md has the formulas):

- `truncate` (TIS): w_t = min(rho_t, C). Espeholt et al. 2018 (IMPALA's truncated weights); Yao et al. 2025,
  "Your efficient RL framework secretly brings you off-policy RL training" (the fix for vLLM/FSDP mismatch).
- `mask` (IcePop; token-level MIS): w_t = rho_t inside [1/C, C]; outside, the token is rejected: weight 0 and
  out of the loss's denominators (Ling Team 2025, "Every Step Evolves", arXiv:2510.18855, IcePop; Liu, Li et
  al. 2025, "When Speed Kills Stability", verl's `rollout_rs` rejection mask, TRL's `token_mask`).
- `sequence_truncate` / `sequence_mask`: one length-normalised ratio per sequence, the geometric mean
  rho_geo = exp(mean_t log rho_t), truncated at C or, outside [1/C, C], the whole sequence rejected (verl's
  geometric `seq_mean_k1`; the sequence ratio of GSPO, Zheng et al. 2025). The product of the rho_t (verl's and
  TRL's `sequence` level) grows with the length, so a fixed C would reject long sequences first.

Every function here is a constant for the gradient (computed without autograd): the weights multiply the
policy-gradient loss, they are not trained through.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.core._checks import as_bool_mask, check_same_shape
from rlvr.core.masking import masked_mean, masked_row_mean

IS_MODES = ("truncate", "mask", "sequence_truncate", "sequence_mask")


@torch.no_grad()
def log_importance_ratio(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log rho (B, W) = log pi_old - log pi_behaviour on valid tokens, 0 on padding (rho = 1 there)."""
    check_same_shape(old_logprobs=old_logprobs, behaviour_logprobs=behaviour_logprobs)
    m = as_bool_mask(mask, old_logprobs)
    return torch.where(m, old_logprobs - behaviour_logprobs, torch.zeros((), dtype=old_logprobs.dtype,
                                                                         device=old_logprobs.device))


@torch.no_grad()
def sequence_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """log rho_geo (B,) = mean over a sequence's valid tokens of log rho: the log of the geometric mean of the
    token ratios; 0 (rho_geo = 1) for a sequence without a valid token."""
    return masked_row_mean(log_ratio, mask)


@torch.no_grad()
def truncated_weights(log_ratio: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """TIS: (w = min(rho, cap), kept = all True), any shape. Nothing is rejected; `cap` bounds the variance."""
    return log_ratio.exp().clamp(max=cap), torch.ones_like(log_ratio, dtype=torch.bool)


@torch.no_grad()
def masked_weights(log_ratio: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """IcePop / MIS: (w = rho inside [1/cap, cap] else 0, kept = inside), any shape. The band is tested on
    log rho against +-log(cap), so rho = cap or 1/cap exactly is inside."""
    bound = torch.tensor(cap, dtype=log_ratio.dtype, device=log_ratio.device).log()
    kept = log_ratio.abs() <= bound
    return torch.where(kept, log_ratio.exp(), torch.zeros((), dtype=log_ratio.dtype, device=log_ratio.device)), kept


_BOUNDS = {"truncate": truncated_weights, "mask": masked_weights}


@torch.no_grad()
def behaviour_is_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cap: float,
                         mode: str = "truncate") -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """(weights (B, W), kept (B, W) bool, detached metrics) of the behaviour correction `mode` (IS_MODES).

    old_logprobs, behaviour_logprobs: (B, W) log pi_old and log pi_behaviour of each sampled token. `weights`
    multiply the per-token policy-gradient loss; `kept` is the loss mask's part that stays: a rejected token
    (`mask`, `sequence_mask` modes) leaves the loss's denominators too, as verl's rejection mask does.
    Padding gets weight 0 and is not kept. Metrics: is/weight_mean (over valid tokens), is/ratio_max (of the
    ratio the mode bounds), is/truncated_share (valid tokens whose ratio was truncated or rejected).
    """
    if cap <= 1:
        raise ValueError(f"the importance-weight cap must be > 1, got {cap}")
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance correction {mode!r}; choose from {list(IS_MODES)}")
    m = as_bool_mask(mask, old_logprobs)
    log_ratio = log_importance_ratio(old_logprobs, behaviour_logprobs, m)  # (B, W)
    if mode.startswith("sequence_"):
        log_ratio = sequence_log_ratio(log_ratio, m)[:, None].expand_as(log_ratio)  # (B, W), one per row
    weights, kept = _BOUNDS[mode.removeprefix("sequence_")](log_ratio, cap)
    kept = kept & m
    weights = torch.where(m, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    ratio = torch.where(m, log_ratio.exp(), torch.zeros((), dtype=weights.dtype, device=weights.device))
    bounded = ~kept | (ratio > cap)
    metrics = {"is/weight_mean": masked_mean(weights, m), "is/ratio_max": ratio.max(),
               "is/truncated_share": masked_mean(bounded.to(weights.dtype), m)}
    return weights, kept, metrics
