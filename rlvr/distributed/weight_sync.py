"""Weights from learner rank 0 to the rollout workers by a torch.distributed broadcast
(`distributed.weight_sync: collective`): gloo when the policy is on CPU, NCCL on CUDA.

Rank 0 and the N rollout workers form a group of N + 1 of their own, apart from the learners'
data-parallel group: a process group built directly on its own TCPStore (as vLLM's RL examples build a
stateless group), so it neither needs nor touches torch.distributed's default group, which a learner
rank may already hold. The names, shapes and dtypes (the layout) are agreed once, at the start; each
sync then broadcasts one flat buffer per dtype in that order, instead of one collective per tensor.

Plain torch (no Ray): `rlvr.distributed.ray_roles` decides who joins and when.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Iterable

import torch
import torch.distributed as dist
from torch import Tensor

Layout = list[tuple[str, tuple[int, ...], torch.dtype]]  # (engine name, shape, dtype) in broadcast order

# A broadcast starts only once every member is idle (the driver waits for that), so this bounds the
# transfer itself and how long the others wait if a member dies in the middle of one.
TIMEOUT = timedelta(seconds=300)


def backend_for(device: torch.device) -> str:
    """The one place a torch.distributed backend is chosen, for the learners' data-parallel group and for
    the weight-sync group: from where the policy's tensors live."""
    return "nccl" if device.type == "cuda" else "gloo"


def tcp_store(master: tuple[str, int], rank: int, world: int, timeout: timedelta = TIMEOUT) -> dist.TCPStore:
    """The rendezvous of a group: rank 0 serves the store at `master` (an address and a free port of
    its node), the others connect; returns once all `world` members have."""
    return dist.TCPStore(master[0], master[1], world, is_master=rank == 0, timeout=timeout)


def join_group(master: tuple[str, int], rank: int, world: int, backend: str) -> dist.ProcessGroup:
    """A process group of `world` members on a store of its own (every member must call this)."""
    store = tcp_store(master, rank, world)
    if backend == "nccl":  # exists only in CUDA builds of torch; each member on its current CUDA device
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = TIMEOUT
        return dist.ProcessGroupNCCL(store, rank, world, options)
    return dist.ProcessGroupGloo(store, rank, world, TIMEOUT)


def layout_of(named: Iterable[tuple[str, Tensor]]) -> Layout:
    return [(name, tuple(t.shape), t.dtype) for name, t in named]


def flatten(named: Iterable[tuple[str, Tensor]]) -> dict[torch.dtype, Tensor]:
    """One flat buffer per dtype, tensors in the order given (the layout's order)."""
    groups: dict[torch.dtype, list[Tensor]] = {}
    for _, t in named:
        groups.setdefault(t.dtype, []).append(t.detach().reshape(-1))
    return {dtype: torch.cat(parts) for dtype, parts in groups.items()}


def empty_buffers(layout: Layout, device: torch.device) -> dict[torch.dtype, Tensor]:
    """Receive buffers shaped as `flatten` shapes the sender's, in the same dtype order."""
    sizes: dict[torch.dtype, int] = {}
    for _, shape, dtype in layout:
        sizes[dtype] = sizes.get(dtype, 0) + torch.Size(shape).numel()
    return {dtype: torch.empty(n, dtype=dtype, device=device) for dtype, n in sizes.items()}


def unflatten(buffers: dict[torch.dtype, Tensor], layout: Layout) -> list[tuple[str, Tensor]]:
    """Views into the flat buffers, named and shaped as the layout says (no copy)."""
    offsets = dict.fromkeys(buffers, 0)
    named = []
    for name, shape, dtype in layout:
        n = torch.Size(shape).numel()
        named.append((name, buffers[dtype][offsets[dtype] : offsets[dtype] + n].view(shape)))
        offsets[dtype] += n
    return named


def broadcast(group: dist.ProcessGroup, buffers: dict[torch.dtype, Tensor]) -> None:
    """Rank 0's buffers into every member's (same dtypes, same sizes, same order on every member)."""
    for buffer in buffers.values():
        group.broadcast(buffer, 0).wait()
