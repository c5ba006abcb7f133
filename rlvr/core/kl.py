"""Per-token estimators of KL(p || q) between the policy p and a reference q, from samples x ~ p.

Inputs are log-probs of the sampled tokens, `logprobs = log p(x)` and `ref_logprobs = log q(x)`, both
`(B, T)`; outputs are `(B, T)`. With r = q(x) / p(x) (Schulman 2020, "Approximating KL Divergence"):
    k1 = -log r                 unbiased, high variance, negative on some samples
    k2 = (log r)^2 / 2          biased, low variance, non-negative
    k3 = (r - 1) - log r        unbiased, low variance, non-negative (GRPO's KL penalty)
All share the signature `fn(logprobs, ref_logprobs) -> (B, T)` and live in `KL_ESTIMATORS`.

Used as a loss, their gradients differ from their values: in expectation over x ~ p, grad k1 is 0,
grad k2 is grad KL(p || q), and grad k3 is grad KL(q || p) (Tang & Munos 2025, "On a few pitfalls in
KL divergence gradient estimation for RL").

`ratio_weighted_kl` weights a per-token estimate by the importance ratio pi_theta / pi_old, gradient
kept (DeepSeek-V3.2, 2025, "unbiased KL estimate"): tokens are sampled from pi_old, and for k1 and k3,
whose expectation under p is KL(p || q), the weighted gradient is then an unbiased estimate of
grad KL(pi_theta || q), the reverse KL the penalty is meant to be, on or off policy.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlvr.core._checks import as_bool_mask, check_ndim, check_same_shape

KLEstimator = Callable[[Tensor, Tensor], Tensor]


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 = log p - log q."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return logprobs - ref_logprobs


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 = (log p - log q)^2 / 2."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 = q/p - log(q/p) - 1 = e^d - 1 - d with d = log q - log p.

    Near p = q the three terms cancel (in float32, d = 1e-4 would keep ~2 correct digits), so for
    |d| < 0.05 the Taylor series d^2/2 + d^3/6 + d^4/24 + d^5/120 is used (truncation < 1e-8
    relative); elsewhere expm1(d) - d. The clamp guards only against a last-ulp rounding below 0.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    d = ref_logprobs - logprobs  # log r
    series = d * d * (0.5 + d * (1 / 6 + d * (1 / 24 + d / 120)))
    return torch.where(d.abs() < 0.05, series, torch.expm1(d) - d).clamp_min(0.0)


def ratio_weighted_kl(kl: Tensor, logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """(pi_theta / pi_old) * kl per token, the ratio exp(log pi_theta - log pi_old) differentiated through
    log pi_theta (old_logprobs is detached).

    E_{x~pi_old}[grad (ratio * k)] = grad E_{x~pi_theta}[k], which for k1 and k3 is grad KL(pi_theta || q);
    at pi_theta = pi_old the value is `kl` and the gradient grad kl + kl * grad log pi_theta.
    """
    check_same_shape(kl=kl, logprobs=logprobs, old_logprobs=old_logprobs)
    return torch.exp(logprobs - old_logprobs.detach()) * kl


KL_ESTIMATORS: dict[str, KLEstimator] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def get_kl_estimator(name: str) -> KLEstimator:
    """`KL_ESTIMATORS[name]`, or a ValueError listing the valid names."""
    if name not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {name!r}; choose from {sorted(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[name]


def kl_shaped_rewards(
    scores: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kl_coef: float,
    estimator: str = "k1",
) -> Tensor:
    """PPO-RLHF per-token reward (Ziegler et al. 2019; Ouyang et al. 2022, InstructGPT eq. 2):
        R_t = -kl_coef * k(log p_t, log q_t)  on every valid token,  + score_b  on the last valid token.

    scores `(B,)`; logprobs, ref_logprobs, mask `(B, T)` -> rewards `(B, T)`, 0 where masked. Detached:
    rewards are constants for the gradient. Every row needs at least one valid token for its score.
    """
    check_ndim("scores", scores, 1)
    check_ndim("logprobs", logprobs, 2)
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    m = as_bool_mask(mask, logprobs, like_name="logprobs")
    if scores.shape[0] != logprobs.shape[0]:
        raise ValueError(f"scores {tuple(scores.shape)} must have one entry per row of logprobs "
                         f"{tuple(logprobs.shape)}")
    has_token = m.any(dim=1)  # (B,)
    if not bool(has_token.all()):
        raise ValueError(f"rows {(~has_token).nonzero().flatten().tolist()} of mask have no valid token")
    kl_fn = get_kl_estimator(estimator)
    with torch.no_grad():
        positions = torch.arange(m.shape[1], device=m.device).expand_as(m)  # (B, T)
        last = torch.where(m, positions, -1).max(dim=1).values  # (B,) last valid index
        rewards = -kl_coef * kl_fn(logprobs, ref_logprobs)  # (B, T)
        rewards = torch.where(m, rewards, torch.zeros((), dtype=rewards.dtype, device=rewards.device))
        rewards[torch.arange(m.shape[0], device=m.device), last] += scores.to(rewards.dtype)
    return rewards
