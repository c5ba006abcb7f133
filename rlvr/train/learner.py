"""The Learner role: policy (+ value model, reference), optimizer, scheduler and one objective.

`logprobs(batch)`, `update(batch) -> metrics`, `named_weights()`, `state_dict()`. It takes the Config
plus the model folders it starts from, so one Learner per data-parallel rank can be built inside a
worker. What differs across the policy-gradient family (group or per-token advantages, PPO's value
model, the KL reference) is decided here once, from the config; the loop never sees it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import save_file
from torch import Tensor

from rlvr.algorithms.dynamic_sampling import overlong_filter, overlong_loss_mask
from rlvr.algorithms.grpo import GroupPolicyGradient, accumulation_denominator
from rlvr.algorithms.ppo import VALUE_MODEL_FILE, ValueModel, build_value_model, forward_with_values
from rlvr.config import Config
from rlvr.core import behaviour_is_weights, masked_mean
from rlvr.models import (engine_weights, load_policy, load_reference, load_tokenizer, resolve_model,
                         resolve_placement, save_policy)
from rlvr.models.tokenizer import pad_token_id
from rlvr.rollout.batch import (RolloutBatch, build_batch, cached_logprobs, completion_values, micro_batches,
                                policy_logprobs)
from rlvr.rollout.scored import ScoredBatch
from rlvr.train.guard import NONFINITE_WEIGHTS, SKIPPED, finite_step, nonfinite_weights
from rlvr.train.family import token_advantages
from rlvr.train.rollout import sampler_is_policy, serves_adapters
from rlvr.algorithms.optim import build_optimizer, build_scheduler, clip_gradients
from rlvr.seeds import SHUFFLE, derive_seed


def optimizer_steps(cfg: Config) -> int:
    return cfg.train.steps * cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)


class Learner:
    """Trains the policy on scored batches: mu epochs x minibatches x micro-batches per `update`."""

    rank, world = 0, 1  # data-parallel position (rlvr.distributed.data_parallel sets them)
    # whether data-parallel ranks may run different numbers of forwards in a minibatch (they all-reduce once per
    # minibatch), as they do where rows of advantage 0 are left out; not FSDP2's, which gather in every forward
    uneven_micro_batches = True

    def __init__(self, cfg: Config, policy_path: str | Path, init_path: str | Path) -> None:
        self.cfg = cfg
        self.device = resolve_placement(cfg.model).device  # policy, reference, value model and batches
        self.lora = cfg.model.lora.r > 0
        # a LoRA checkpoint holds the adapters only: the base comes from `init_path`
        adapter = policy_path if self.lora and Path(policy_path) != Path(init_path) else None
        self.policy = load_policy(cfg.model, init_path if adapter else policy_path, adapter=adapter)
        self.tokenizer = load_tokenizer(policy_path)
        self.pad_id = pad_token_id(self.tokenizer)
        self.objective = GroupPolicyGradient.from_config(cfg.algorithm, cfg.rollout.max_new_tokens)
        needs_reference = self.objective.needs_reference or cfg.algorithm.kl_reward_coef > 0
        self.reference = load_reference(cfg.model, self.policy, init_path) if needs_reference else None
        self._distribute()
        o = cfg.optim
        self.optimizer = build_optimizer(self.policy, o.lr, tuple(o.betas), o.eps, o.weight_decay)
        self.token_adv = token_advantages(cfg)
        self.value_model = self._value_model(Path(init_path))
        self.scheduler = build_scheduler(self.optimizer, o.schedule, o.warmup_steps, optimizer_steps(cfg),
                                         o.min_lr_ratio)
        extra = list(self.value_model.parameters()) if self.value_model is not None else []
        self.params = [p for p in [*self.policy.parameters(), *extra] if p.requires_grad]  # what clipping covers
        # mu = 1 and one minibatch: a single optimizer step per rollout, taken at the sampling weights,
        # so the old log-probs are the current ones detached (ratio 1, gradient = policy gradient).
        self.single_step = cfg.algorithm.mu == 1 and cfg.mini_batch_size == cfg.train.batch_size
        # The in-process engine's processed log-probs and entropies are those of these very weights: in float32
        # they are the training forward's, up to kernel rounding (cached vs full attention), so the no-grad pi_old
        # pass can be skipped, and the entropy metric read from the sampler.
        self.sampler_is_old = sampler_is_policy(cfg)
        # A row whose advantage is 0 adds exactly nothing to the gradient of a loss that is A x (a function of
        # the ratio) and nothing else: no KL term, no value loss, not Kimi's tau term. Such rows are left out of
        # the training forward and backward, and out of the pi_old pass.
        self.skips_zero_advantage = (cfg.train.zero_advantage_rows == "auto" and self.token_adv is None
                                     and not self.objective.needs_reference
                                     and not (cfg.algorithm.policy_loss == "kimi" and cfg.algorithm.tau))
        self.adapters_only = serves_adapters(cfg)  # what named_weights hands the engine
        self.version = 0  # optimizer updates so far; a batch sampled at another version needs pi_old recomputed

    def _value_model(self, init: Path) -> ValueModel | None:
        """PPO's critic when the estimator needs one; its parameters join the optimizer as their own
        group (lr `value.lr`) before the scheduler is built, so the schedule covers them."""
        if self.token_adv is None or not self.token_adv.needs_value_model:
            return None
        v = self.cfg.value
        trunk = resolve_model(v.path, "value.path") if v.path else init
        model = build_value_model(v.model, self.policy, trunk).to(self.device)
        self.optimizer.add_param_group({"params": list(model.parameters()), "lr": v.lr or self.cfg.optim.lr,
                                        "weight_decay": 0.0})
        return model

    def tensors(self, batch: ScoredBatch) -> RolloutBatch:
        """prompt + completion rows, right-padded, with the batch's rewards, on the policy's device."""
        return build_batch(batch.prompt_ids, batch.completion_ids, None, batch.rewards, self.pad_id).to(self.device)

    def logprobs(self, batch: ScoredBatch | RolloutBatch) -> Tensor:
        """log pi (N, W) of every completion token under the current policy, without gradient."""
        rows = self.tensors(batch) if isinstance(batch, ScoredBatch) else batch
        r = self.cfg.rollout
        return cached_logprobs(self.policy, rows, r.temperature, self.cfg.micro_batch_size, self.cfg.train.packing,
                               r.top_k, r.top_p)

    def _prepare(self, batch: ScoredBatch) -> RolloutBatch:
        """Rows with pi_old, pi_ref and advantages: (N,) group-relative or (N, W) per token."""
        cfg, micro = self.cfg, self.cfg.micro_batch_size
        rows = self.tensors(batch)
        a = cfg.algorithm
        needs_old = not self.single_step or a.kl_reward_coef > 0 or a.is_cap  # inner steps, KL reward, IS
        # the sampler's log-probs and entropies are the training forward's when they are the same quantity
        # (see sampler_is_old) and the batch was sampled at these weights
        stands_in = self.sampler_is_old and batch.version == self.version
        reuse = needs_old and stands_in
        # (N, W) sampler log-probs at the completion tokens, built once for whichever use needs them
        sampled = completion_values(rows.mask, batch.sampler_logprobs) if reuse or a.is_cap else None
        entropies = completion_values(rows.mask, batch.sampler_entropies) \
            if stands_in and batch.sampler_entropies is not None else None
        if self.token_adv is None:  # from the rewards alone
            rows.advantages = self.objective.advantages(rows.rewards, batch.group_size)
        if needs_old:
            rows.old_logprobs = sampled if reuse else self._old_logprobs(rows)
        if a.is_cap:
            rows.is_weights, self._is_metrics = behaviour_is_weights(rows.old_logprobs, sampled, rows.mask,
                                                                     a.is_cap, a.is_mode)
        if self.reference is not None:
            r = cfg.rollout
            rows.ref_logprobs = cached_logprobs(self.reference, rows, r.temperature, micro, cfg.train.packing, r.top_k,
                                                r.top_p)
        if self.token_adv is not None:
            self.token_adv.annotate(rows, self.policy, self.value_model, micro, cfg.train.packing)
        if cfg.algorithm.overlong_filter:  # DAPO: a truncated completion is unfinished, not wrong
            truncated = batch.truncated.to(self.device)
            rows.advantages = overlong_filter(rows.advantages, truncated)
            if cfg.algorithm.aggregation != "seq_mean_token_mean":  # an empty row would be 0 / 0 there
                rows.mask = overlong_loss_mask(rows.mask, truncated)
        self._sampled_entropy = None if entropies is None else \
            {"entropy": masked_mean(entropies, rows.mask), TOKENS: rows.mask.sum(), ROWS: rows.mask.any(-1).sum(),
             PARTS: 1}
        return rows

    def _old_logprobs(self, rows: RolloutBatch) -> Tensor:
        """pi_old (N, W) by a no-grad pass; rows that the update leaves out (advantage 0, `skips_zero_advantage`)
        are not run and hold 0, unless behaviour importance weights are measured over every row."""
        if not self.skips_zero_advantage or self.cfg.algorithm.is_cap:
            return self.logprobs(rows)
        keep = torch.nonzero(rows.advantages != 0).squeeze(-1)
        old = torch.zeros(rows.mask.shape, dtype=torch.float32, device=self.device)
        if len(keep):
            values = self.logprobs(rows.select(keep))  # (k, W'), W' <= W: select trims the padding
            old[keep, : values.shape[1]] = values
        return old

    def _forward(self, mb: RolloutBatch, with_entropy: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """log pi (b, W), entropy (b, W) or None and, with a value model, V (b, W)."""
        r, packing = self.cfg.rollout, self.cfg.train.packing
        scoring = dict(with_entropy=with_entropy, packing=packing, top_k=r.top_k, top_p=r.top_p)  # as sampled
        if self.value_model is None:
            return (*policy_logprobs(self.policy, mb, r.temperature, **scoring), None)
        return forward_with_values(self.policy, self.value_model, mb, r.temperature, **scoring)

    def _micro_step(self, mb: RolloutBatch, denominator: Tensor | int, scale: float,
                    with_entropy: bool) -> dict[str, Any]:
        """Forward + backward of one micro-batch; its loss is already divided for accumulation. The
        entropy (a metric, no gradient) is measured here, `with_entropy`, in the first epoch only where the
        sampler's cannot stand in (`update`): every row once, at the weights it was sampled from or a
        minibatch later (a softmax over the vocabulary per token)."""
        logprobs, entropy, values = self._forward(mb, with_entropy)  # (b, W)
        old = logprobs.detach() if self.single_step else mb.old_logprobs
        obj = self.objective
        loss, metrics = obj.loss(logprobs, old, mb.advantages, mb.mask, mb.ref_logprobs, denominator, mb.is_weights)
        if self.token_adv is not None:  # PPO / REINFORCE++: the KL to the reference is in the rewards
            metrics = {**self.token_adv.kl_metrics(logprobs, mb), **metrics}
        if values is not None:  # PPO: + value.coef x clipped value loss, aggregated alike
            value_loss, value_metrics = self.token_adv.value_loss(values, mb, obj.aggregation, obj.loss_constant,
                                                                  denominator)
            loss, metrics = loss + value_loss, {**metrics, **value_metrics}
        loss.backward()
        if entropy is not None:
            metrics = {**metrics, "entropy": masked_mean(entropy, mb.mask)}
        return {"loss": loss.detach() * scale, **metrics, TOKENS: mb.mask.sum(), ROWS: mb.mask.any(-1).sum(),
                PARTS: scale}

    def update(self, batch: ScoredBatch) -> dict[str, float]:
        """mu epochs x minibatches, each one optimizer step over accumulated micro-batches."""
        cfg, mini, micro = self.cfg, self.cfg.mini_batch_size, self.cfg.micro_batch_size
        self._is_metrics: dict[str, Tensor] = {}
        rows = self._prepare(batch)
        # the entropy metric, read from the sampler where it is the training forward's (`sampler_is_old`, a batch
        # sampled at these weights): every valid token once, no softmax over the vocabulary in the update
        sampled_entropy = self._sampled_entropy
        measure = sampled_entropy is None  # else the first epoch's forwards need not compute it
        micro = self._rank_micro(mini, micro)
        self.policy.train()
        stats, grad_norms, skipped = [], [], 0
        shuffle = torch.Generator().manual_seed(derive_seed(cfg.seed, batch.step, SHUFFLE))
        for epoch in range(cfg.algorithm.mu):
            # rows shuffled one by one: a minibatch of whole groups (verl's in-order split) took 300 steps to
            # the demo's 0.9 in five of five runs, single rows 200-275 (docs/performance.md)
            order = torch.arange(len(rows)) if self.single_step else torch.randperm(len(rows), generator=shuffle)
            for lo in range(0, len(rows), mini):
                minibatch = rows.select(order[lo : lo + mini])
                denominator = accumulation_denominator(self.objective.aggregation, minibatch.mask)
                self.optimizer.zero_grad(set_to_none=True)
                minibatch, flat = self._zero_advantage_split(minibatch)
                if flat is not None:
                    stats += self._left_out_metrics(flat, epoch == 0 and measure)
                parts = self._parts(minibatch, micro)
                mine = [self._micro_step(minibatch.select(part), denominator, len(parts), epoch == 0 and measure)
                        for part in parts[self.rank :: self.world]]  # this data-parallel rank's share
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
        self.version += 1
        if sampled_entropy is not None:
            stats.append(sampled_entropy)
        stats.append({NONFINITE_WEIGHTS: nonfinite_weights(self.params)})  # the guard stops a run on any
        metrics = {**finish_metrics(*self._reduce_metrics(*partial_metrics(stats))),
                   "lr": self.scheduler.get_last_lr()[0], SKIPPED: float(skipped),
                   **{k: v.item() for k, v in self._is_metrics.items()}}
        if grad_norms:
            metrics["grad_norm"] = torch.stack(grad_norms).mean().item()
        return metrics

    def _parts(self, rows: RolloutBatch | None, micro: int) -> list[Tensor]:
        """The micro-batches (row indices) of the rows trained on (or of those left out, for their entropy), of which
        each data-parallel rank takes every `world`-th. Where rows were left out, so that no rank idles while another
        runs two, the rows are split in micro-batches of at most len(rows) / world rows (rounded up): at least
        min(world, len(rows)) of them."""
        if rows is None:
            return []
        if self.world > 1 and self.skips_zero_advantage:
            micro = min(micro, -(-len(rows) // self.world))
        return micro_batches(rows.attention_mask, micro, self.cfg.train.micro_batch_tokens)

    def _zero_advantage_split(self, minibatch: RolloutBatch) -> tuple[RolloutBatch | None, RolloutBatch | None]:
        """(rows to train on, rows left out), the rows with advantage exactly 0 left out where their gradient is
        exactly 0 (`skips_zero_advantage`); None for an empty side. The minibatch's normaliser is taken before,
        so the loss and its gradient are the same, up to float rounding in the smaller products."""
        if not self.skips_zero_advantage:
            return minibatch, None
        flat = minibatch.advantages == 0  # (b,)
        if not flat.any():
            return minibatch, None
        if flat.all():
            return None, minibatch
        return minibatch.select(torch.nonzero(~flat).squeeze(-1)), minibatch.select(torch.nonzero(flat).squeeze(-1))

    @torch.no_grad()
    def _left_out_metrics(self, rows: RolloutBatch, first_epoch: bool) -> list[dict[str, Any]]:
        """What the update's metrics count of rows left out of the backward: clip fractions of 0 (with no
        advantage no clipped branch is active), and with `first_epoch` (the sampler's entropy does not stand in) the
        entropy, from a forward without gradient. Ratio and approx_kl metrics cover the rows trained on."""
        clips = {k: torch.zeros((), device=self.device) for k in self.objective.metric_names if k.startswith("clip_frac")}
        # data-parallel ranks add their metrics up: the clip fractions once (rank 0), the entropy forwards split
        stats = [] if self.rank else [{**clips, TOKENS: rows.mask.sum(), ROWS: rows.mask.any(-1).sum(), PARTS: 1}]
        parts = self._parts(rows, self.cfg.micro_batch_size) if first_epoch else []
        for part in parts[self.rank :: self.world]:
            mb = rows.select(part)
            _, entropy, _ = self._forward(mb, with_entropy=True)
            stats.append({"entropy": masked_mean(entropy, mb.mask), TOKENS: mb.mask.sum(), ROWS: mb.mask.any(-1).sum(),
                          PARTS: 1})
        self._even_out(rows, parts, backward=False)
        return stats

    def _even_out(self, rows: RolloutBatch | None, parts: list[Tensor], backward: bool) -> None:
        """FSDP2 ranks gather parameters in every forward and reduce-scatter gradients in every backward, so all
        must run as many: a rank with fewer of `parts` (dealt out every `world`-th) than another runs the
        difference on one row for nothing, a backward of zeros (`backward`), which adds a gradient of exactly 0
        and no metric."""
        if self.uneven_micro_batches or not parts:
            return
        for _ in range(-(-len(parts) // self.world) - len(parts[self.rank :: self.world])):
            logprobs, _, _ = self._forward(rows.select(parts[0][:1]), with_entropy=False)
            if backward:
                logprobs.backward(torch.zeros_like(logprobs))

    def _zero_gradient(self) -> list[dict[str, Any]]:
        """A minibatch with no row to train on: zero gradients (AdamW's moments and weight decay still act, as
        they would on the computed zero) and its loss, 0, counted once over the data-parallel ranks (rank 0)."""
        for p in self.params:
            p.grad = torch.zeros_like(p)
        zero = torch.zeros((), device=self.device)
        return [] if self.rank else [{"loss": zero, TOKENS: zero, ROWS: zero, PARTS: 1}]

    def _rank_micro(self, mini: int, micro: int) -> int:
        """Micro-batch size such that every data-parallel rank gets as many micro-batches."""
        return micro if (mini // micro) % self.world == 0 else mini // self.world

    def _distribute(self) -> None:
        """Data-parallel ranks that shard the policy do it here, before the optimizer holds its
        parameters; one process has nothing to do."""

    def _reduce_grads(self) -> None:
        """Sum gradients over data-parallel ranks; one process has nothing to sum."""

    def _reduce_metrics(self, sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict, dict]:
        """Add the data-parallel ranks' partial metrics (`partial_metrics`); one process has nothing to add."""
        return sums, maxes

    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The policy's (name, tensor) pairs under the plain model's names, as a rollout engine loads them;
        a LoRA policy's adapters are merged in (computed only when iterated), or, for an engine that
        serves LoRA itself, are all it gets (PEFT's saved names)."""
        return engine_weights(self.policy, adapters=self.adapters_only)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler and value model: with the policy folder, all a resume needs."""
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "version": self.version}
        if self.value_model is not None:
            state["value_model"] = self.value_model.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # the AdamW kernel (fused or not) is this process's choice, not the checkpoint's: a checkpoint of
        # one learner resumed by FSDP2 ranks must not turn the fused kernel on for their DTensors
        kernels = [{k: group.get(k) for k in ("fused", "foreach")} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        for group, kernel in zip(self.optimizer.param_groups, kernels):
            group.update(kernel)
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = state.get("version", 0)
        if self.value_model is not None:
            self.value_model.load_state_dict(state["value_model"])

    def save(self, path: Path, adapter_path: Path) -> None:
        """The policy as a Hugging Face folder (a LoRA policy merged, its adapters also at `adapter_path`),
        PPO's critic (head, and trunk when separate) beside it."""
        save_policy(self.policy, self.tokenizer, path, adapter_path)
        if self.value_model is not None:
            save_file(self.value_model.state_dict(), path / VALUE_MODEL_FILE)


TOKENS, ROWS, PARTS = "_tokens", "_rows", "_parts"  # what a micro-batch's metrics were measured over


def partial_metrics(stats: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """The update's metrics as sums, so that neither the micro-batch split (row count, token budget) nor the
    number of data-parallel ranks changes them: a token metric (entropy, kl, clip fractions, ratios) is a mean
    over every valid token of the update, a `seq_` one over sequences, `loss` the mean minibatch loss (a
    micro-batch's `loss` is its share times its minibatch's number of parts), a `_max` one the largest.
    Returns ({KEY: weighted sum, KEY/w: weight}, {KEY: max}); the one place the update's tensors become
    floats (one transfer)."""
    sums: dict[str, Tensor] = {}
    maxes: dict[str, Tensor] = {}
    for s in stats:
        for key, value in s.items():
            if key in (TOKENS, ROWS, PARTS):
                continue
            value = value.detach().double()
            if key.endswith("_max"):
                maxes[key] = torch.maximum(maxes[key], value) if key in maxes else value
                continue
            if key == "loss":
                weight = torch.full_like(value, 1 / s[PARTS])
            else:
                weight = (s[ROWS] if key.startswith("seq_") else s[TOKENS]).double()
            sums[key] = sums.get(key, 0) + torch.where(weight > 0, value * weight, 0)  # no token: nothing to count
            sums[f"{key}/w"] = sums.get(f"{key}/w", 0) + weight
    keys = [*sums, *maxes]
    values = torch.stack([*sums.values(), *maxes.values()]).tolist() if keys else []
    floats = dict(zip(keys, values))
    return {k: floats[k] for k in sums}, {k: floats[k] for k in maxes}


def finish_metrics(sums: dict[str, float], maxes: dict[str, float]) -> dict[str, float]:
    means = {k: sums[k] / sums[f"{k}/w"] for k in sums if not k.endswith("/w")}
    return dict(sorted({**means, **maxes}.items()))


