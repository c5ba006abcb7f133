"""The Learner role: the policy (+ a frozen reference), the optimizer, the scheduler and one objective.
`logprobs(batch)`, `update(batch) -> metrics`, `named_weights()`, `state_dict()`; built from the Config and the
model folders it starts from, so one per data-parallel rank can be built in a worker. What the loss is and what
it needs (advantages, pi_old, pi_ref, a value model) is the objective's (rlvr.algorithms.objective)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor

from rlvr.algorithms.objective import build_objective, optimizer_steps, single_step
from rlvr.algorithms.optim import build_optimizer, build_scheduler, clip_gradients, load_optimizer_state
from rlvr.config import Config
from rlvr.core import masked_mean
from rlvr.models import engine_weights, load_policy, load_reference, load_tokenizer, resolve_placement, save_policy
from rlvr.models.tokenizer import pad_token_id
from rlvr.rollout.batch import RolloutBatch, micro_batches
from rlvr.rollout.engines import sampler_is_policy, serves_adapters
from rlvr.rollout.scored import ScoredBatch
from rlvr.seeds import SHUFFLE, derive_seed
from rlvr.train.guard import NONFINITE_WEIGHTS, SKIPPED, finite_step, nonfinite_weights
from rlvr.train.metrics import PARTS, ROWS, TOKENS, counted, finish_metrics, partial_metrics
from rlvr.train.passes import NoGradPasses


class Learner(NoGradPasses):
    """Trains the policy on scored batches: mu epochs x minibatches x micro-batches per `update`. The hooks at the
    end (`_parts`, `_share`, `_even_out`, the reductions) are one process's; data-parallel ranks override them."""

    lead = True  # whether this process reports what is counted once per update (rank 0 of data-parallel ranks)

    def __init__(self, cfg: Config, policy_path: str | Path, init_path: str | Path) -> None:
        self.cfg = cfg
        self.device = resolve_placement(cfg.model).device  # policy, reference, objective's modules and batches
        # a LoRA checkpoint holds the adapters only: the base comes from `init_path`
        adapter = policy_path if cfg.model.lora.r > 0 and Path(policy_path) != Path(init_path) else None
        self.policy = load_policy(cfg.model, init_path if adapter else policy_path, adapter=adapter)
        self.tokenizer = load_tokenizer(policy_path)
        self.pad_id = pad_token_id(self.tokenizer)
        self.objective = build_objective(cfg)
        self.reference = load_reference(cfg.model, self.policy, init_path) if self.objective.needs_reference else None
        self._distribute()
        o = cfg.optim
        self.optimizer = build_optimizer(self.policy, o.lr, tuple(o.betas), o.eps, o.weight_decay)
        groups = self.objective.attach(self.policy, Path(init_path), self.device)  # the scheduler covers them too
        for group in groups:
            self.optimizer.add_param_group(group)
        self.scheduler = build_scheduler(self.optimizer, o.schedule, o.warmup_steps, optimizer_steps(cfg),
                                         o.min_lr_ratio)
        extra = (p for group in groups for p in group["params"])
        self.params = [p for p in [*self.policy.parameters(), *extra] if p.requires_grad]  # what clipping covers
        self.single_step = single_step(cfg)  # one optimizer step per rollout: rows in order
        self.sampler_is_old = sampler_is_policy(cfg)  # its log-probs stand in for pi_old, its entropies measure
        # rows of advantage 0 left out of the pi_old pass, the forward and the backward where they add nothing
        self.skips_zero_advantage = cfg.train.zero_advantage_rows == "auto" and self.objective.zero_advantage_is_inert
        self.adapters_only = serves_adapters(cfg)  # what named_weights hands the engine
        self.version = 0  # optimizer updates so far; a batch sampled at another version needs pi_old recomputed

    def _forward(self, mb: RolloutBatch, with_entropy: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """log pi (b, W), entropy (b, W) or None, and the objective's values (b, W) or None."""
        return self.objective.forward(self.policy, mb, with_entropy)

    def _micro_step(self, mb: RolloutBatch, denominator: Tensor | int, scale: float,
                    with_entropy: bool) -> dict[str, Any]:
        """Forward + backward of one micro-batch; its loss is already divided for accumulation. The entropy (a
        metric, no gradient) is measured here, `with_entropy`, in the first epoch only where the sampler's cannot
        stand in: every row once, at the weights it was sampled from or a minibatch later."""
        logprobs, entropy, values = self._forward(mb, with_entropy)  # (b, W)
        loss, metrics = self.objective.loss(mb, logprobs, values, denominator)
        loss.backward()
        if entropy is not None:
            metrics = {**metrics, "entropy": masked_mean(entropy, mb.mask)}
        return counted({"loss": loss.detach() * scale, **metrics}, mb.mask, scale)

    def update(self, batch: ScoredBatch) -> dict[str, float]:
        """mu epochs x minibatches, each one optimizer step over accumulated micro-batches."""
        cfg, mini = self.cfg, self.cfg.mini_batch_size
        rows = self.tensors(batch)
        entropies = self.sampled_entropies(rows, batch)  # (N, W) where they stand in for the forward's
        batch_metrics = self.objective.prepare(rows, batch, self)
        micro = self._micro_size(mini)
        self.policy.train()
        stats, grad_norms, skipped = [], [], 0
        shuffle = torch.Generator().manual_seed(derive_seed(cfg.seed, batch.step, SHUFFLE))
        for epoch in range(cfg.algorithm.mu):
            measure = epoch == 0 and entropies is None  # the sampler's entropy stands in, or the first epoch's
            # rows shuffled one by one: a minibatch of whole groups (verl's in-order split) took 300 steps to
            # the demo's 0.9 in five of five runs, single rows 200-275 (docs/performance.md)
            order = torch.arange(len(rows)) if self.single_step else torch.randperm(len(rows), generator=shuffle)
            for lo in range(0, len(rows), mini):
                minibatch = rows.select(order[lo : lo + mini])
                denominator = self.objective.denominator(minibatch.mask)
                self.optimizer.zero_grad(set_to_none=True)
                # rows of advantage exactly 0 left out where their gradient is exactly 0; the denominator is the
                # whole minibatch's, so the loss and its gradient are the same up to float rounding
                minibatch, flat = minibatch.partition(minibatch.advantages == 0) if self.skips_zero_advantage \
                    else (minibatch, None)
                if flat is not None:
                    stats += self._left_out_metrics(flat, measure)
                parts = self._parts(minibatch, micro)
                mine = [self._micro_step(minibatch.select(part), denominator, len(parts), measure)
                        for part in self._share(parts)]
                self._even_out(minibatch, parts, backward=True)
                if not parts:  # every row had advantage 0: a zero gradient, and AdamW still steps on it
                    mine = self._zero_gradient()
                stats += mine
                self._reduce_grads()  # data-parallel ranks: the mean gradient, before it is measured
                norm = clip_gradients(self.params, cfg.optim.max_grad_norm)
                if not finite_step([s["loss"] for s in mine], norm):
                    skipped += 1  # a NaN/inf step would poison the weights and the optimizer's moments
                    continue
                if cfg.optim.max_grad_norm > 0:
                    grad_norms.append(norm)
                self.optimizer.step()
                self.scheduler.step()
        self.policy.eval()
        self.advance()  # one more update: the version, and the reference where it follows the policy
        if entropies is not None:  # every valid token once, no softmax over the vocabulary in the update
            stats.append(counted({"entropy": masked_mean(entropies, rows.mask)}, rows.mask))
        stats.append({NONFINITE_WEIGHTS: nonfinite_weights(self.params)})  # the guard stops a run on any
        metrics = {**finish_metrics(*self._reduce_metrics(*partial_metrics(stats))),
                   "lr": self.scheduler.get_last_lr()[0], SKIPPED: float(skipped),
                   **{k: v.item() for k, v in batch_metrics.items()}}
        if grad_norms:
            metrics["grad_norm"] = torch.stack(grad_norms).mean().item()
        return metrics

    @torch.no_grad()
    def _left_out_metrics(self, rows: RolloutBatch, with_entropy: bool) -> list[dict[str, Any]]:
        """What the update's metrics count of rows left out of the backward: the objective's (clip fractions of
        0), once over the data-parallel ranks, and `with_entropy` the entropy, from forwards without gradient."""
        stats = [counted(self.objective.zero_advantage_metrics(self.device), rows.mask)] if self.lead else []
        parts = self._parts(rows, self.cfg.micro_batch_size) if with_entropy else []
        for part in self._share(parts):
            mb = rows.select(part)
            _, entropy, _ = self._forward(mb, with_entropy=True)
            stats.append(counted({"entropy": masked_mean(entropy, mb.mask)}, mb.mask))
        self._even_out(rows, parts, backward=False)
        return stats

    def _zero_gradient(self) -> list[dict[str, Any]]:
        """A minibatch with no row to train on: zero gradients (AdamW's moments and weight decay still act, as
        they would on the computed zero) and its loss, 0, counted once over the data-parallel ranks."""
        for p in self.params:
            p.grad = torch.zeros_like(p)
        zero = torch.zeros((), device=self.device)
        return [{"loss": zero, TOKENS: zero, ROWS: zero, PARTS: 1}] if self.lead else []

    # --- one process's; data-parallel ranks split the micro-batches (`_parts`, `_share`, `_micro_size`), pair
    # their collectives (`_even_out`), shard the policy (`_distribute`) and add up (rlvr.distributed.data_parallel)
    def _parts(self, rows: RolloutBatch | None, micro: int) -> list[Tensor]:
        """The micro-batches (row indices) of `rows`."""
        return [] if rows is None else micro_batches(rows.attention_mask, micro, self.cfg.train.micro_batch_tokens)

    def _share(self, parts: list[Tensor]) -> list[Tensor]:
        return parts

    def _even_out(self, rows: RolloutBatch | None, parts: list[Tensor], backward: bool) -> None:
        pass

    def _micro_size(self, mini: int) -> int:
        return self.cfg.micro_batch_size

    def _distribute(self) -> None:
        pass

    def _reduce_grads(self) -> None:
        pass

    def _reduce_metrics(self, sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict, dict]:
        return sums, maxes

    # --- weights and state ---
    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The policy's (name, tensor) pairs under the plain model's names, as a rollout engine loads them;
        a LoRA policy's adapters are merged in (computed only when iterated), or, for an engine that
        serves LoRA itself, are all it gets (PEFT's saved names)."""
        return engine_weights(self.policy, adapters=self.adapters_only)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler, the objective's modules (PPO's value model), a refreshed reference: all a resume
        needs besides the policy folder."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                **self.passes_state(), **self.objective.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.load_passes_state(state)
        self.objective.load_state_dict(state)

    def save(self, path: Path, adapter_path: Path) -> None:
        """The policy as a Hugging Face folder (a LoRA policy merged, its adapters also at `adapter_path`), the
        objective's modules (PPO's critic) beside it."""
        save_policy(self.policy, self.tokenizer, path, adapter_path)
        self.objective.save(path)
