"""The delta of the policy gradient grad log pi(a|s) * delta, from rewards.

Group estimators take `rewards (N,)` laid out as N / G groups of `group_size` G contiguous samples of one
prompt and return `(N,)`. They share one signature, `fn(rewards, group_size) -> advantages`, and are
registered in `ADVANTAGES`; options (GRPO's `scale_by_std`, `eps`) have defaults, so a registry caller
never passes anything else. `get_advantage_fn(name, eps)` binds `eps` for the estimators that divide by a
std (`STD_SCALED`), so a configured epsilon reaches every one of them. Subtracting a baseline that does not depend on the sample's own action
leaves the expected gradient unchanged and lowers its variance (Williams 1992; Sutton & Barto 13.4).

`gae` is different: it works per token on `(B, T)` rewards and a learned value, for PPO, so it is not
in `ADVANTAGES`.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor

from rlvr.core._checks import (
    as_bool_mask,
    check_finite,
    check_group_size,
    check_ndim,
    check_same_shape,
)

AdvantageFn = Callable[[Tensor, int], Tensor]
# Added to the std before dividing. CS336 lecture 17 (`compute_deltas`, "normalized") uses 1e-4; a
# smaller one lets a group whose rewards differ by a rounding error explode to +-1/sqrt(eps)-sized deltas.
DEFAULT_EPS = 1e-4


def _groups(rewards: Tensor, group_size: int, minimum: int = 1) -> Tensor:
    """Validate `rewards (N,)` and return a float view `(N / G, G)`."""
    check_ndim("rewards", rewards, 1)
    check_group_size(rewards.shape[0], group_size, minimum)
    check_finite("rewards", rewards)
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    return r.reshape(-1, group_size)


def _center(x: Tensor) -> Tensor:
    """x - mean(x) along the last dim, shifted by the first element first: exact 0 for identical
    values (a plain mean of k equal floats can be off by an ulp, which / (std + eps) inflates)."""
    shifted = x - x[..., :1]
    return shifted - shifted.mean(dim=-1, keepdim=True)


def informative_groups(values: Tensor, group_size: int) -> Tensor:
    """values (N,), groups of `group_size` contiguous -> (N / G,) bool, True where not all equal.

    Exact equality: it is the condition under which the core's group-centred advantages are exactly 0.
    On 0/1 correctness it is DAPO's rule (eq. 11), accuracy strictly between 0 and 1.
    """
    if values.dim() != 1 or group_size < 1 or values.shape[0] % group_size:
        raise ValueError(f"need values (N,) with N divisible by group_size, got {tuple(values.shape)}, {group_size}")
    groups = values.reshape(-1, group_size)  # (N/G, G)
    return (groups != groups[:, :1]).any(dim=1)


def flat_group_share(rewards: Tensor, group_size: int) -> Tensor:
    """rewards (N,) -> () share of the N / G groups whose rewards are all equal: no learning signal,
    since every group-relative advantage of such a group is exactly 0."""
    return 1.0 - informative_groups(rewards, group_size).float().mean()


def raw_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """A_i = r_i: plain REINFORCE, no baseline (Williams 1992)."""
    return _groups(rewards, group_size).reshape(-1).clone()


def centered_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """A_i = r_i - mean(group): the group mean as baseline, no std scaling (Dr. GRPO, Liu et al. 2025)."""
    return _center(_groups(rewards, group_size)).reshape(-1)


def grpo_advantages(
    rewards: Tensor, group_size: int, scale_by_std: bool = True, eps: float = DEFAULT_EPS
) -> Tensor:
    """A_i = (r_i - mean(group)) / (std(group) + eps), std unbiased as `torch.std` (GRPO, Shao et al.
    2024, DeepSeekMath). `scale_by_std=False` is Dr. GRPO's unbiased variant."""
    r = _groups(rewards, group_size, minimum=2 if scale_by_std else 1)  # (N/G, G)
    centered = _center(r)
    if scale_by_std:
        centered = centered / (r.std(dim=1, keepdim=True) + eps)
    return centered.reshape(-1)


def max_only_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """A_i = r_i where r_i is its group's maximum, 0 elsewhere: learn only from the best of G
    (best-of-n / rejection-sampling fine-tuning, RAFT, Dong et al. 2023). Ties all keep their reward, as
    CS336 lecture 17's `max_rewards`: [3, 3, 1, 3] -> [3, 3, 0, 3], [2, 2, 2, 2] -> [2, 2, 2, 2]."""
    r = _groups(rewards, group_size)  # (N/G, G)
    best = r == r.max(dim=1, keepdim=True).values  # (N/G, G) every sample tied at the maximum
    return torch.where(best, r, torch.zeros((), dtype=r.dtype, device=r.device)).reshape(-1)


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean(group)): leave-one-out baseline
    (REINFORCE Leave-One-Out, Kool et al. 2019; Ahmadian et al. 2024)."""
    r = _groups(rewards, group_size, minimum=2)  # (N/G, G)
    # r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) * (r_i - mean), the same up to rounding
    return (group_size / (group_size - 1) * _center(r)).reshape(-1)


def whitened_advantages(rewards: Tensor, group_size: int, eps: float = DEFAULT_EPS) -> Tensor:
    """A_i = (r_i - mean(batch)) / (std(batch) + eps): global batch whitening, no per-prompt baseline
    (REINFORCE++, Hu et al. 2025). `group_size` is only validated: the statistics ignore groups."""
    r = _groups(rewards, group_size).reshape(-1)
    if r.numel() < 2:
        raise ValueError(f"whitened_advantages needs at least 2 rewards, got {r.numel()}")
    return _center(r) / (r.std() + eps)


def reinforce_pp_baseline_advantages(rewards: Tensor, group_size: int, eps: float = DEFAULT_EPS) -> Tensor:
    """Group mean as baseline, then batch whitening (REINFORCE++-baseline, Hu et al. 2025)."""
    centered = centered_advantages(rewards, group_size)
    if centered.numel() < 2:
        raise ValueError(f"reinforce_pp_baseline needs at least 2 rewards, got {centered.numel()}")
    return _center(centered) / (centered.std() + eps)


ADVANTAGES: dict[str, AdvantageFn] = {
    "raw": raw_advantages,
    "centered": centered_advantages,
    "grpo": grpo_advantages,
    "max_only": max_only_advantages,
    "rloo": rloo_advantages,
    "whitened": whitened_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}


STD_SCALED = ("grpo", "whitened", "reinforce_pp_baseline")  # the estimators that divide by a std (+ eps)
# the per-token estimators (`gae` below; rlvr.algorithms.ppo): not in ADVANTAGES, they need more than the rewards
TOKEN_ADVANTAGES = ("gae", "reinforce_pp")


def get_advantage_fn(name: str, eps: float = DEFAULT_EPS) -> AdvantageFn:
    """`ADVANTAGES[name]` with `eps` bound where it divides by a std, or a ValueError listing the names."""
    if name not in ADVANTAGES:
        raise ValueError(f"unknown advantage {name!r}; choose from {sorted(ADVANTAGES)}")
    if not eps >= 0:
        raise ValueError(f"advantage eps must be >= 0, got {eps}")
    return partial(ADVANTAGES[name], eps=eps) if name in STD_SCALED else ADVANTAGES[name]


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016, eq. 16), per token.

    rewards, values, mask: `(B, T)`. Returns `(advantages, returns)`, both `(B, T)`, 0 where masked.
        delta_t = r_t + gamma * V_{t'} - V_t,   A_t = delta_t + gamma * lam * A_{t'}
    where t' is the next valid token; after the last valid token the episode ends (V = 0, A = 0).
    Masked tokens are skipped, not treated as ends, so right padding, left padding and masked holes
    (e.g. tool output inside a response) all work. returns = A + V, the lambda-return target for V.
    The loop runs backwards over T with whole-batch vector steps (T kernel launches, no B loop).
    """
    check_same_shape(rewards=rewards, values=values)
    check_ndim("rewards", rewards, 2)
    check_finite("rewards", rewards)
    m = as_bool_mask(mask, rewards, like_name="rewards")  # (B, T)
    with torch.no_grad():  # targets for both heads: constants for the gradient
        zero = torch.zeros((), dtype=values.dtype, device=values.device)
        next_value = torch.zeros_like(values[:, 0])  # (B,) V_{t'}
        next_adv = torch.zeros_like(values[:, 0])  # (B,) A_{t'}
        advantages = torch.zeros_like(values)  # (B, T)
        for t in reversed(range(rewards.shape[1])):
            valid = m[:, t]  # (B,)
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            adv_t = delta + gamma * lam * next_adv
            advantages[:, t] = torch.where(valid, adv_t, zero)
            # A masked token is transparent: carry the later token's value and advantage through it.
            next_value = torch.where(valid, values[:, t], next_value)
            next_adv = torch.where(valid, adv_t, next_adv)
        returns = torch.where(m, advantages + values, zero)
    return advantages, returns
