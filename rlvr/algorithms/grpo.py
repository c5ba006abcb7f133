"""The group policy-gradient family (GRPO and its variants) as one configuration of core functions.

GRPO (Shao et al. 2024, DeepSeekMath eq. 3): per token
    L_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t(pi || pi_ref)
aggregated over tokens and sequences by an aggregation mode. Every piece is chosen by name from the
`rlvr.core` registries, so Dr. GRPO, DAPO's loss, RLOO, REINFORCE++, GSPO and Kimi k1.5 are the same
object with other names (see configs/ and docs/training.md), never another trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rlvr.algorithms.dynamic_sampling import overlong_filter, overlong_loss_mask
from rlvr.core import (TOKEN_ADVANTAGES, aggregate_loss, behaviour_is_weights, get_advantage_fn, get_kl_estimator,
                       masked_mean, ratio_weighted_kl)
from rlvr.core.losses import get_policy_loss
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import RolloutBatch
from rlvr.rollout.scored import ScoredBatch


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


class GroupObjective:
    """The group family as an Objective (rlvr.algorithms.objective): advantages from each group's rewards, the
    loss of `GroupPolicyGradient`, and what it needs: pi_old where the update takes more than one optimizer
    step per rollout or corrects for the sampler (`is_cap`: behaviour importance weights), pi_ref for a KL
    term, DAPO's overlong filter. `temperature`, `top_k`, `top_p` (the distribution scored, as sampled),
    `packing` and `micro_batch_size` are how models are run (rollout.*, train.packing, train.micro_batch_size)."""

    def __init__(self, pg: GroupPolicyGradient, temperature: float = 1.0, packing: str = "never",
                 micro_batch_size: int = 1, single_step: bool = False, overlong_filter: bool = False,
                 is_cap: float = 0.0, is_mode: str = "truncate", top_k: int = 0, top_p: float = 1.0,
                 logprob_chunk: int = 0) -> None:
        self.pg, self.temperature, self.packing, self.micro_batch_size = pg, temperature, packing, micro_batch_size
        # the sampler's processing of the logits; positions the output layer scores at a time (0: all)
        self.scoring = dict(top_k=top_k, top_p=top_p, chunk=logprob_chunk)
        self.single_step, self.overlong_filter = single_step, overlong_filter
        self.is_cap, self.is_mode = is_cap, is_mode
        self.needs_reference = pg.needs_reference
        # A row whose advantage is 0 adds exactly nothing to the gradient of a loss that is A x (a function of
        # the ratio) and nothing else: no KL term, not Kimi's tau term (tau is Kimi's alone: rlvr.train.family).
        self.zero_advantage_is_inert = not pg.needs_reference and not pg.tau

    @property
    def needs_old_logprobs(self) -> bool:
        return not self.single_step or self.is_cap > 0  # inner steps; behaviour weights

    def attach(self, policy: nn.Module, init_path: Path, device: torch.device) -> list[dict[str, Any]]:
        return []

    def prepare(self, rows: RolloutBatch, batch: ScoredBatch, passes: Any) -> dict[str, Tensor]:
        """Advantages (N,) or (N, W), pi_old, behaviour weights, pi_ref and the overlong filter on `rows`."""
        self.advantages(rows, batch)
        if self.needs_old_logprobs:
            rows.old_logprobs = passes.old_logprobs(rows, batch, every_row=self.is_cap > 0)
        metrics: dict[str, Tensor] = {}
        if self.is_cap:  # a token the mode rejects leaves the loss mask: the loss and its denominators (verl)
            rows.is_weights, kept, metrics = behaviour_is_weights(rows.old_logprobs,
                                                                  passes.sampled_logprobs(rows, batch), rows.mask,
                                                                  self.is_cap, self.is_mode)
            rows.mask = rows.mask & kept
        if self.needs_reference:
            rows.ref_logprobs = passes.reference_logprobs(rows)
        self.annotate(rows, passes)
        if self.overlong_filter:  # DAPO: a truncated completion is unfinished, not wrong
            truncated = batch.truncated.to(rows.mask.device)
            rows.advantages = overlong_filter(rows.advantages, truncated)
            if self.pg.aggregation != "seq_mean_token_mean":  # an empty row would be 0 / 0 there
                rows.mask = overlong_loss_mask(rows.mask, truncated)
        return metrics

    def advantages(self, rows: RolloutBatch, batch: ScoredBatch) -> None:
        """(N,) group-relative advantages from the rewards alone, before any pass (the Learner leaves rows of
        advantage 0 out of the pi_old pass)."""
        rows.advantages = self.pg.advantages(rows.rewards, batch.group_size)

    def annotate(self, rows: RolloutBatch, passes: Any) -> None:
        """What needs the passes' results (per-token advantages); nothing for group advantages."""

    def denominator(self, mask: Tensor) -> Tensor | int:
        return accumulation_denominator(self.pg.aggregation, mask)

    def forward(self, policy: nn.Module, mb: RolloutBatch, with_entropy: bool
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        return (*policy_logprobs(policy, mb, self.temperature, with_entropy=with_entropy, packing=self.packing,
                                 **self.scoring), None)

    def loss(self, mb: RolloutBatch, logprobs: Tensor, values: Tensor | None, denominator: Tensor | int
             ) -> tuple[Tensor, dict[str, Tensor]]:
        old = logprobs.detach() if self.single_step else mb.old_logprobs
        return self.pg.loss(logprobs, old, mb.advantages, mb.mask, mb.ref_logprobs, denominator, mb.is_weights)

    def zero_advantage_metrics(self, device: torch.device) -> dict[str, Tensor]:
        """Clip fractions of 0: with no advantage no clipped branch is active."""
        return {k: torch.zeros((), device=device) for k in self.pg.metric_names if k.startswith("clip_frac")}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def save(self, path: Path) -> None:
        pass
