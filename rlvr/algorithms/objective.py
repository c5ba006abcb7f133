"""The Objective: what the Learner trains, as one small protocol, so that the Learner never asks which
algorithm it runs.

The Learner (rlvr.train.learner) owns the policy, the optimizer and the loop over epochs, minibatches and
micro-batches; it runs models, never a formula. An objective turns a scored batch into loss inputs and a
micro-batch into a loss:

    objective.prepare(rows, batch, passes)      advantages, pi_old, pi_ref, value targets... on `rows`, asking the
                                                 Learner (`passes`) for the no-grad passes it needs
    objective.forward(policy, mb, entropy)      the training forward: log pi (b, W), entropy, values (PPO)
    objective.loss(mb, logprobs, values, d)     one micro-batch's loss, divided by the minibatch's `denominator`

and declares what it needs: a frozen reference (`needs_reference`), modules it trains beside the policy
(`attach`: PPO's value model, with their optimizer groups and state), whether rows of advantage 0 add
exactly nothing (`zero_advantage_is_inert`, so the Learner may leave them out). The group policy-gradient
family (`rlvr.algorithms.grpo.GroupObjective`) and the per-token one with PPO's value model
(`rlvr.algorithms.ppo.TokenObjective`) implement it; `build_objective` picks one from the config. A new
objective is a class with these members plus a line in `build_objective` (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from rlvr.algorithms.grpo import GroupPolicyGradient, GroupObjective
from rlvr.algorithms.ppo import TokenObjective, token_advantages
from rlvr.config import Config
from rlvr.rollout.batch import RolloutBatch
from rlvr.rollout.engines import behaviour_cap
from rlvr.rollout.scored import ScoredBatch


class Passes(Protocol):
    """What an objective may ask of the Learner while it prepares a batch: the no-grad passes, run as the
    Learner runs models (micro-batches, packing, prefix sharing, the sampler's log-probs where they stand in)."""

    policy: nn.Module

    def old_logprobs(self, rows: RolloutBatch, batch: ScoredBatch, every_row: bool = False) -> Tensor:
        """pi_old (N, W); rows the update leaves out may hold 0 unless `every_row`."""

    def sampled_logprobs(self, rows: RolloutBatch, batch: ScoredBatch) -> Tensor:
        """The sampler's log-probs (N, W) of the completion tokens."""

    def reference_logprobs(self, rows: RolloutBatch) -> Tensor:
        """pi_ref (N, W) under the frozen reference."""


class Objective(Protocol):
    needs_reference: bool  # the Learner loads a frozen reference model (`Passes.reference_logprobs`)
    zero_advantage_is_inert: bool  # a row whose advantage is exactly 0 adds exactly 0 to the gradient

    def attach(self, policy: nn.Module, init_path: Path, device: torch.device) -> list[dict[str, Any]]:
        """Build what is trained beside the policy; its optimizer parameter groups ([] for none)."""

    def prepare(self, rows: RolloutBatch, batch: ScoredBatch, passes: Passes) -> dict[str, Tensor]:
        """Fill the loss inputs of `rows` (the batch's tensors) in place; batch-level metrics."""

    def denominator(self, mask: Tensor) -> Tensor | int:
        """The normaliser of a minibatch (mask (B, W)) that its micro-batch losses share."""

    def forward(self, policy: nn.Module, mb: RolloutBatch, with_entropy: bool
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(log pi (b, W), entropy (b, W) or None, values (b, W) or None) of a micro-batch."""

    def loss(self, mb: RolloutBatch, logprobs: Tensor, values: Tensor | None, denominator: Tensor | int
             ) -> tuple[Tensor, dict[str, Tensor]]:
        """A micro-batch's scalar loss and its detached metrics."""

    def zero_advantage_metrics(self, device: torch.device) -> dict[str, Tensor]:
        """The metrics that rows of advantage 0, left out of the backward, are counted with."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def save(self, path: Path) -> None:
        """What a final model folder holds besides the policy."""


def single_step(cfg: Config) -> bool:
    """One optimizer step per rollout (mu = 1, one minibatch): it is taken at the sampling weights, so pi_old is
    the current policy detached (ratio 1, gradient = the policy gradient)."""
    return cfg.algorithm.mu == 1 and cfg.mini_batch_size == cfg.train.batch_size


def optimizer_steps(cfg: Config) -> int:
    """Optimizer steps of a whole run: mu epochs x minibatches per rollout, per step."""
    return cfg.train.steps * cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)


def build_objective(cfg: Config) -> Objective:
    """The run's objective: per-token advantages (`gae` = PPO, `reinforce_pp`) or group ones; the behaviour
    correction's C is `algorithm.is_cap` with empty resolved by the engine (rlvr.rollout.engines.behaviour_cap)."""
    a = cfg.algorithm
    r = cfg.rollout
    settings = dict(temperature=r.temperature, top_k=r.top_k, top_p=r.top_p, packing=cfg.train.packing,
                    micro_batch_size=cfg.micro_batch_size, single_step=single_step(cfg),
                    overlong_filter=a.overlong_filter, is_cap=behaviour_cap(cfg), is_mode=a.is_mode,
                    logprob_chunk=cfg.train.logprob_chunk)
    pg = GroupPolicyGradient.from_config(a, cfg.rollout.max_new_tokens)
    token = token_advantages(cfg)
    if token is None:
        return GroupObjective(pg, **settings)
    return TokenObjective(pg, token, cfg.value.model, cfg.value.path, cfg.value.lr or cfg.optim.lr, **settings)
