"""Learner ranks for data parallelism over torch.distributed (gloo on CPU, NCCL on GPU).

Every rank prepares the whole batch (advantages need whole groups, the accumulation denominator the
whole minibatch) and backpropagates its 1/M of the micro-batches (of the rows trained on: rows of advantage 0
may be left out, `Learner.skips_zero_advantage`; `RankShare`). Each micro-batch loss is already
divided by the global denominator, so the sum of the ranks' gradients is the one-process minibatch
gradient, exactly, whatever the aggregation mode.

`DataParallelLearner`: every rank holds the whole policy; one all-reduce sums the gradients.
`ShardedLearner` (`distributed.shard: true`, FSDP2): each of the M ranks holds 1/M of every parameter, of its gradient and of its AdamW moments; a
forward all-gathers a block's parameters, a backward reduce-scatters its gradients. Gradients are
summed (divide factor 1), not averaged: each micro-batch loss is already divided by the global
denominator, so the sum is the one-process minibatch gradient, as in `DataParallelLearner`.

What leaves a rank is always whole: the weights for the rollout workers, the policy and the optimizer
state for checkpoints (indexed as a one-process optimizer indexes them, so a checkpoint resumes with or
without sharding). Gathering them is a collective: every rank must make the same call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from rlvr.config import Config
from rlvr.models import load_policy, resolve_placement, save_policy
from rlvr.rollout.batch import RolloutBatch
from rlvr.train.learner import Learner

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole tensors, on rank 0, in CPU memory


def add_over_ranks(sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Every rank's partial metrics (`rlvr.train.metrics.partial_metrics`) added up, maxima the largest: the
    metrics of the whole update, the same on every rank and equal to one process's. The ranks may hold different
    keys (a rank that trained on no row has no ratio metrics): each reduces the union, its missing ones as 0 and
    -inf."""
    held: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(held, (sorted(sums), sorted(maxes)))
    sum_keys = sorted({k for keys, _ in held for k in keys})
    max_keys = sorted({k for _, keys in held for k in keys})
    added = torch.tensor([sums.get(k, 0.0) for k in sum_keys], dtype=torch.float64)
    largest = torch.tensor([maxes.get(k, -math.inf) for k in max_keys], dtype=torch.float64)
    dist.all_reduce(added)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return dict(zip(sum_keys, added.tolist())), dict(zip(max_keys, largest.tolist()))


def fsdp_policies(device: torch.device, param_dtype: torch.dtype | None, offload: bool) -> dict[str, Any]:
    """`fully_shard`'s precision and placement (`distributed.mixed_precision`, `cpu_offload`): parameters gathered in
    `param_dtype` with gradients reduced in float32 (None: as stored, float32); shards, gradients and optimizer
    state in host memory, pinned where there is a GPU to copy to (pinning needs one)."""
    policies: dict[str, Any] = {}
    if param_dtype is not None:
        policies["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if offload:
        policies["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    return policies


def shard_policy(policy: torch.nn.Module, world: int, device_type: str, **policies: Any) -> None:
    """FSDP2 over `world` ranks: each transformer block (the model's `_no_split_modules`) its own unit,
    the rest (embeddings, final norm, head) the root's; gradients summed over ranks. `policies`:
    `fsdp_policies`'."""
    mesh = init_device_mesh(device_type, (world,))
    blocks = set(getattr(policy, "_no_split_modules", None) or [])
    for module in policy.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, **policies)
    fully_shard(policy, mesh=mesh, **policies)
    for module in policy.modules():
        if isinstance(module, FSDPModule):  # a plain SUM (gloo has no pre-scaled sum, PREMUL_SUM)
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def by_index(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name -> keyed by position, as `Optimizer.state_dict()`."""
    names = [n for group in state["param_groups"] for n in group["params"]]
    index = {n: i for i, n in enumerate(names)}
    return {"state": {index[n]: s for n, s in state["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]}


def by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of `by_index`, `names` the optimizer's parameters in order."""
    return {"state": {names[i]: s for i, s in state["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]}


class RankShare(Learner):
    """A Learner that is rank `rank` of `world`: it runs every `world`-th micro-batch of each minibatch, counts
    what is counted once per update on rank 0 only (`lead`) and adds its metrics to the other ranks'."""

    rank, world = 0, 1
    # whether ranks may run different numbers of forwards in a minibatch (they all-reduce once per minibatch), as
    # they do where rows of advantage 0 are left out; not FSDP2's, which gather in every forward
    uneven_micro_batches = True

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def _micro_size(self, mini: int) -> int:
        """Micro-batch size such that every rank gets as many micro-batches."""
        micro = self.cfg.micro_batch_size
        return micro if (mini // micro) % self.world == 0 else mini // self.world

    def _parts(self, rows: RolloutBatch | None, micro: int) -> list[Tensor]:
        """The micro-batches of the rows trained on (or of those left out, for their entropy). Where rows were
        left out, so that no rank idles while another runs two, the rows are split in micro-batches of at most
        len(rows) / world rows (rounded up): at least min(world, len(rows)) of them."""
        if rows is not None and self.world > 1 and self.skips_zero_advantage:
            micro = min(micro, -(-len(rows) // self.world))
        return super()._parts(rows, micro)

    def _share(self, parts: list[Tensor]) -> list[Tensor]:
        return parts[self.rank :: self.world]

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

    def _reduce_metrics(self, sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict, dict]:
        return add_over_ranks(sums, maxes)


class DataParallelLearner(RankShare):
    """One rank of M holding the whole policy; gradients summed by one all-reduce per minibatch."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int) -> None:
        super().__init__(cfg, policy_path, init_path)
        self.rank, self.world = rank, world
        for p in self.params:  # identical start even if a head was initialised randomly
            dist.broadcast(p.data, src=0)

    def _reduce_grads(self) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # one all-reduce instead of one per tensor
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(self.params, grads):
            p.grad = flat[offset : offset + g.numel()].view_as(p).clone()
            offset += g.numel()


class ShardedLearner(RankShare):
    """One rank of M with an FSDP2-sharded policy (full parameters: no LoRA, no value model)."""

    uneven_micro_batches = False  # every forward gathers and every backward reduce-scatters: all ranks together

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int) -> None:
        self.rank, self.world, self.init_path = rank, world, init_path
        super().__init__(cfg, policy_path, init_path)

    def _distribute(self) -> None:
        for p in self.policy.parameters():  # identical start even if a head was initialised randomly
            dist.broadcast(p.data, src=0)
        d = self.cfg.distributed
        policies = fsdp_policies(self.device, resolve_placement(self.cfg.model).dtype if d.mixed_precision else None,
                                 d.cpu_offload)
        shard_policy(self.policy, self.world, self.device.type, **policies)
        if self.reference is not None:  # frozen, in the compute dtype: sharded alike, gathered block by block
            shard_policy(self.reference, self.world, self.device.type, **policies)

    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """Whole tensors, gathered from the ranks' shards (every rank must iterate them). Each gathers under its own
        no_grad and the generator yields outside it: a weight sync streams it in buckets and leaves it suspended
        between them, and a generator suspended inside a grad-mode context restores that context's saved mode
        whenever it is closed, which turned gradients off for the next update."""
        for name, tensor in super().named_weights():
            if isinstance(tensor, DTensor):
                with torch.no_grad():
                    tensor = tensor.full_tensor()
            yield name, tensor

    def plain_policy(self) -> torch.nn.Module | None:
        """The policy as one unsharded module on rank 0 (None on the others), for checkpoints."""
        weights = get_model_state_dict(self.policy, options=_FULL)
        if self.rank:
            return None
        policy = load_policy(self.cfg.model, self.init_path)
        policy.load_state_dict(weights)
        return policy

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state (and a refreshed reference) on rank 0 ({} elsewhere), indexed like a
        one-process optimizer's."""
        optimizer = get_optimizer_state_dict(self.policy, self.optimizer, options=_FULL)
        passes = self.passes_state()  # every rank: a refreshed reference is gathered
        if self.rank:
            return {}
        return {"optimizer": by_index(optimizer), "scheduler": self.scheduler.state_dict(), **passes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Every rank is given the whole state and keeps its shard of it."""
        names = {id(p): n for n, p in self.policy.named_parameters()}
        order = [names[id(p)] for group in self.optimizer.param_groups for p in group["params"]]
        set_optimizer_state_dict(self.policy, self.optimizer, by_name(state["optimizer"], order),
                                 options=StateDictOptions(full_state_dict=True))
        self.scheduler.load_state_dict(state["scheduler"])
        self.load_passes_state(state)

    @torch.no_grad()
    def _policy_into_reference(self) -> None:
        """Shard by shard: the reference is sharded as the policy is, so each rank copies its own shards (both
        resharded first: a root module keeps its parameters gathered after a forward)."""
        for module in (*self.policy.modules(), *self.reference.modules()):
            if isinstance(module, FSDPModule):
                module.reshard()
        shards = dict(self.reference.named_parameters())
        for name, p in self.policy.named_parameters():
            shards[name].to_local().copy_(p.to_local())

    def _reference_weights(self) -> dict[str, Tensor]:
        return get_model_state_dict(self.reference, options=_FULL)  # whole on rank 0, gathered by every rank

    def _set_reference(self, weights: dict[str, Tensor]) -> None:
        set_model_state_dict(self.reference, weights, options=StateDictOptions(full_state_dict=True, strict=False))

    def save(self, path: Path, adapter_path: Path) -> None:
        policy = self.plain_policy()
        if policy is not None:
            save_policy(policy, self.tokenizer, path, adapter_path)
