"""The no-grad passes of the Learner that an objective asks for (rlvr.algorithms.objective.Passes): pi_old, pi_ref,
the sampler's log-probs, each run as the Learner runs models and with its shortcuts: the sampler's log-probs stand
in for pi_old where they are the same quantity, and rows the update leaves out are not run.

The reference those passes run may follow the policy: `algorithm.ref_refresh_every: N` copies the policy's weights
into it after every N-th update (CS336 lecture 17's `compute_ref_model_period`: step N + 1 trains against the policy
of step N). It is then neither the start model nor a checkpoint's policy, so a checkpoint holds it and a resumed run
trains against the same one."""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import Tensor, nn

from rlvr.config import Config
from rlvr.models.forward import cached_logprobs
from rlvr.rollout.batch import RolloutBatch, build_batch, completion_values
from rlvr.rollout.scored import ScoredBatch


class NoGradPasses:
    """The passes, over the Learner's `policy`, `reference`, `device` and `version` (optimizer updates so far)."""

    cfg: Config
    policy: nn.Module
    reference: nn.Module | None
    device: torch.device
    pad_id: int
    version: int
    sampler_is_old: bool  # the engine's log-probs and entropies are the training forward's (at these weights)
    named_weights: Any  # () -> the policy's (name, tensor) pairs, whole (rlvr.train.learner.Learner.named_weights)
    skips_zero_advantage: bool  # rows of advantage 0 are left out of the update

    def tensors(self, batch: ScoredBatch) -> RolloutBatch:
        """prompt + completion rows, right-padded, with the batch's rewards, on the policy's device; an episode's
        environment tokens (`batch.loss_masks`) are out of the mask, so that nothing of the update counts them."""
        return build_batch(batch.prompt_ids, batch.completion_ids, None, batch.rewards, self.pad_id,
                           batch.loss_masks).to(self.device)

    def logprobs(self, batch: ScoredBatch | RolloutBatch) -> Tensor:
        """log pi (N, W) of every completion token under the current policy, without gradient."""
        rows = self.tensors(batch) if isinstance(batch, ScoredBatch) else batch
        return self._no_grad_pass(self.policy, rows)

    def _no_grad_pass(self, model: nn.Module, rows: RolloutBatch) -> Tensor:
        r = self.cfg.rollout  # the distribution the sampler drew from: logits / T, top-k, top-p
        return cached_logprobs(model, rows, r.temperature, self.cfg.micro_batch_size, self.cfg.train.packing,
                               r.top_k, r.top_p, self.cfg.train.logprob_chunk)

    def stands_in(self, batch: ScoredBatch) -> bool:
        """Whether the sampler's log-probs and entropies are the training forward's: the same quantity
        (`sampler_is_old`: rlvr's in-process engine in float32, its processed log-probs, up to kernel rounding)
        and sampled at these weights."""
        return self.sampler_is_old and batch.version == self.version

    def sampled_entropies(self, rows: RolloutBatch, batch: ScoredBatch) -> Tensor | None:
        """The sampler's entropies (N, W) where they stand in for the training forward's (None elsewhere)."""
        if not self.stands_in(batch) or batch.sampler_entropies is None:
            return None
        return completion_values(rows.mask, batch.sampler_entropies)

    def sampled_logprobs(self, rows: RolloutBatch, batch: ScoredBatch) -> Tensor:
        return completion_values(rows.mask, batch.sampler_logprobs)

    def reference_logprobs(self, rows: RolloutBatch) -> Tensor:
        return self._no_grad_pass(self.reference, rows)

    def old_logprobs(self, rows: RolloutBatch, batch: ScoredBatch, every_row: bool = False) -> Tensor:
        """pi_old (N, W): the sampler's where they stand in, else a no-grad pass; rows that the update leaves out
        (advantage 0, `skips_zero_advantage`) are not run and hold 0, unless `every_row`."""
        if self.stands_in(batch):
            return self.sampled_logprobs(rows, batch)
        if not self.skips_zero_advantage or every_row:
            return self.logprobs(rows)
        keep = torch.nonzero(rows.advantages != 0).squeeze(-1)
        old = torch.zeros(rows.mask.shape, dtype=torch.float32, device=self.device)
        if len(keep):
            values = self.logprobs(rows.select(keep))  # (k, W'), W' <= W: select trims the padding
            old[keep, : values.shape[1]] = values
        return old

    def advance(self) -> None:
        """One more optimizer update: the version a batch must have been sampled at for the sampler to stand in,
        and, after every `algorithm.ref_refresh_every`-th, the policy's weights copied into the reference (every
        data-parallel rank at once: a sharded policy gathers its weights in `named_weights`)."""
        self.version += 1
        every = self.cfg.algorithm.ref_refresh_every
        if every and self.version % every == 0:
            self._policy_into_reference()

    def passes_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of these: the version and a refreshed reference's weights, whole (not the start
        model, which the run folder holds)."""
        if not self.cfg.algorithm.ref_refresh_every or self.reference is None:
            return {VERSION: self.version}
        return {VERSION: self.version, REFERENCE: self._reference_weights()}

    def load_passes_state(self, state: dict[str, Any]) -> None:
        self.version = state.get(VERSION, 0)
        if REFERENCE in state and self.reference is not None:
            self._set_reference(state[REFERENCE])

    # --- one process's; FSDP2 ranks, whose reference is sharded as the policy is, override them
    def _policy_into_reference(self) -> None:
        copy_into(self.reference, self.named_weights())

    def _reference_weights(self) -> dict[str, Tensor]:
        return {name: p.detach().clone() for name, p in self.reference.named_parameters()}

    def _set_reference(self, weights: dict[str, Tensor]) -> None:
        copy_into(self.reference, weights.items())


VERSION, REFERENCE = "version", "reference"  # their keys in a checkpoint's state


@torch.no_grad()
def copy_into(model: nn.Module, named: Iterable[tuple[str, Tensor]]) -> None:
    """(name, tensor) pairs copied into `model`'s parameters and buffers in place (cast to their dtype); a name it
    lacks raises KeyError."""
    own = {**dict(model.named_buffers()), **dict(model.named_parameters())}
    for name, tensor in named:
        own[name].copy_(tensor)
