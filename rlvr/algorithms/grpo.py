"""The group policy-gradient family (GRPO and its variants) as one configuration of core functions.

GRPO (Shao et al. 2024, DeepSeekMath eq. 3): per token
    L_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t(pi || pi_ref)
aggregated over tokens and sequences by an aggregation mode. Every piece is chosen by name from the
`rlvr.core` registries, so Dr. GRPO, DAPO's loss, RLOO, REINFORCE++, GSPO and Kimi k1.5 are the same
object with other names (see configs/ and docs/training.md), never another trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.core import aggregate_loss, get_advantage_fn, get_kl_estimator, masked_mean, ratio_weighted_kl
from rlvr.algorithms.ppo import TOKEN_ADVANTAGES
from rlvr.core.losses import get_policy_loss


def accumulation_denominator(mode: str, mask: Tensor) -> Tensor | int:
    """The outer normaliser of `aggregate_loss` over a whole minibatch (B, W): its valid-token count
    for `token_mean`, its number of sequences otherwise. Micro-batch losses computed with it sum to
    the minibatch loss exactly, so gradient accumulation changes nothing (verl, TRL do the same)."""
    # clamp: a minibatch whose rows all left the loss mask (DAPO's overlong filter) has loss 0, not 0 / 0
    return mask.sum().clamp(min=1) if mode == "token_mean" else mask.shape[0]


@dataclass
class GroupPolicyGradient:
    """Advantages from group rewards, then a registered policy loss plus an optional KL penalty."""

    advantage: str = "grpo"
    policy_loss: str = "clipped"
    aggregation: str = "seq_mean_token_mean"
    loss_constant: float | None = None
    clip_low: float | None = 0.2
    clip_high: float | None = 0.2
    tau: float | None = None
    kl_estimator: str = "k3"
    beta: float = 0.0
    advantage_eps: float = 1e-4  # added to the std by the estimators that divide by one (core.STD_SCALED)
    kl_unbiased: bool = False  # KL penalty weighted by pi/pi_old (DeepSeek-V3.2; core.ratio_weighted_kl)

    def __post_init__(self) -> None:
        # per-token estimators (PPO's gae, reinforce_pp) live in rlvr.algorithms.ppo; the loss is this one
        self._advantage_fn = None if self.advantage in TOKEN_ADVANTAGES else get_advantage_fn(self.advantage, self.advantage_eps)
        self._loss_fn = get_policy_loss(self.policy_loss)
        self._kl_fn = get_kl_estimator(self.kl_estimator)
        if self.aggregation == "seq_sum_constant" and self.loss_constant is None:
            raise ValueError("aggregation 'seq_sum_constant' needs loss_constant (e.g. max_new_tokens)")
        # A dry run on a 1x1 batch: bad clip ranges, a missing tau or an unknown aggregation mode fail
        # here, at configuration time, not after the first rollout.
        zero, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
        _, metrics = self.loss(zero, zero, torch.zeros(1), mask, zero if self.beta > 0 else None, 1)
        self.metric_names = tuple(metrics)  # what every micro-batch's metrics hold

    @classmethod
    def from_config(cls, algo: Any, max_new_tokens: int) -> "GroupPolicyGradient":
        """From an `AlgorithmConfig`; the constant normaliser defaults to the generation budget."""
        constant = algo.loss_constant if algo.loss_constant is not None else float(max_new_tokens)
        return cls(algo.advantage, algo.policy_loss, algo.aggregation, constant, algo.clip_low,
                   algo.clip_high, algo.tau, algo.kl_estimator, algo.beta, algo.advantage_eps, algo.kl_unbiased)

    @property
    def needs_reference(self) -> bool:
        return self.beta > 0

    def advantages(self, rewards: Tensor, group_size: int) -> Tensor:
        """rewards (N,), groups of `group_size` contiguous -> advantages (N,)."""
        if self._advantage_fn is None:
            raise ValueError(f"advantage {self.advantage!r} is per token: use rlvr.algorithms.ppo.TokenAdvantages")
        return self._advantage_fn(rewards, group_size)

    def loss(self, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
             ref_logprobs: Tensor | None, denominator: Tensor | int, is_weights: Tensor | None = None
             ) -> tuple[Tensor, dict[str, Tensor]]:
        """Scalar loss of one micro-batch (B, W) and its detached metrics.

        `denominator` is the minibatch's (`accumulation_denominator`), so micro-batch losses add up.
        `is_weights` (B, W), when given, reweights the policy-gradient term per token (behaviour
        correction, `rlvr.core.behaviour_is_weights`); the KL penalty is about pi, not the data, so not it.
        """
        per_token, metrics = self._loss_fn(logprobs, old_logprobs, advantages, mask,
                                           clip_low=self.clip_low, clip_high=self.clip_high, tau=self.tau)
        if is_weights is not None:
            per_token = per_token * is_weights
        if self.beta > 0:
            if ref_logprobs is None:
                raise ValueError("beta > 0 needs reference log-probs")
            kl = self._kl_fn(logprobs, ref_logprobs)  # (B, W)
            if self.kl_unbiased:
                kl = ratio_weighted_kl(kl, logprobs, old_logprobs)
            per_token = per_token + self.beta * kl
            metrics["kl"] = masked_mean(kl.detach(), mask)
        loss = aggregate_loss(per_token, mask, self.aggregation, self.loss_constant, denominator=denominator)
        return loss, {k: v.detach() for k, v in metrics.items()}
