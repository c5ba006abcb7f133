"""Behaviour-policy correction: the sampler is not pi_old.

Asynchronous RL samples a batch with weights k updates older than the learner's (pi_behaviour), and
an inference engine (vLLM, bf16 kernels) computes slightly different probabilities than the training
kernels even at equal weights. The clipped surrogate's ratio pi / pi_old assumes the data came from
pi_old; the per-token importance weight pi_old / pi_behaviour corrects the expectation. Its variance
is unbounded, so it is truncated (TIS: Espeholt et al. 2018, IMPALA's truncated importance weights;
Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"):
w_t = min(pi_old_t / pi_behaviour_t, C). The alternative ("mask") drops the tokens whose ratio leaves
the band [1/C, C] instead of reweighting them (Zheng et al. 2025, "Stabilizing RL with LLMs", MIS).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.core._checks import as_bool_mask
from rlvr.core.masking import masked_mean

IS_MODES = ("truncate", "mask")


@torch.no_grad()
def behaviour_is_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cap: float,
                         mode: str = "truncate") -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token weights (B, W) that multiply the policy-gradient loss, and their detached metrics.

    old_logprobs, behaviour_logprobs: (B, W) log pi_old and log pi_behaviour of each sampled token.
    `truncate`: w = min(exp(old - behaviour), cap). `mask`: w = 1 inside [1/cap, cap], else 0.
    Padding gets weight 0. A constant for the gradient: computed without autograd.
    """
    if cap <= 1:
        raise ValueError(f"the importance-weight cap must be > 1, got {cap}")
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance correction {mode!r}; choose from {list(IS_MODES)}")
    m = as_bool_mask(mask, old_logprobs)
    ratio = torch.where(m, (old_logprobs - behaviour_logprobs).exp(), torch.zeros_like(old_logprobs))  # (B, W)
    if mode == "truncate":
        out = (ratio > cap) & m
        weights = ratio.clamp(max=cap)
    else:
        out = ((ratio > cap) | (ratio < 1 / cap)) & m
        weights = (m & ~out).to(old_logprobs.dtype)
    metrics = {"is/weight_mean": masked_mean(weights, m), "is/ratio_max": ratio.max(),
               "is/truncated_share": masked_mean(out.to(old_logprobs.dtype), m)}
    return weights, metrics
