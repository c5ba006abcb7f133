"""Weights from learner rank 0 to the rollout workers, in buckets streamed one after another, through Ray's
object store or by a torch.distributed broadcast (`distributed.weight_sync: collective`: gloo when the policy is
on CPU, NCCL on CUDA).

Buckets: the tensors, in the policy's order (embedding, then layer after layer, then the output layer), cast to
the dtype the engines compute in (`model.dtype`: bfloat16 halves the bytes; float32 stays exact) and grouped into
consecutive buckets of at most `distributed.sync_bucket_mb` (`plan_buckets`). The learner makes one bucket at a
time (a sharded learner gathers only that bucket's tensors) and a worker loads each into its engine as it comes,
so neither holds more than a bucket beside its model: the whole float32 copy a sync made before (28 GB for a 7B
policy) is gone from both ends (verl and OpenRLHF bucket their syncs alike).

Rank 0 and the N rollout workers form a group of N + 1 of their own, apart from the learners'
data-parallel group: a process group built directly on its own TCPStore (as vLLM's RL examples build a
stateless group), so it neither needs nor touches torch.distributed's default group, which a learner
rank may already hold. The names, shapes, dtypes and buckets (the layout) are agreed once, at the start; each
sync then broadcasts one flat buffer per bucket (per dtype in it), instead of one collective per tensor.

Plain torch (no Ray): `rlvr.distributed.ray_learner` and `ray_rollout` decide who joins and when.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Iterable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

Layout = list[tuple[str, tuple[int, ...], torch.dtype]]  # (engine name, shape, dtype sent) in broadcast order

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


def layout_of(named: Iterable[tuple[str, Tensor]], dtype: torch.dtype | None = None) -> Layout:
    """(name, shape, dtype sent) of each tensor: floating ones cast to `dtype` (None: as they are)."""
    return [(name, tuple(t.shape), sent_dtype(t.dtype, dtype)) for name, t in named]


def sent_dtype(dtype: torch.dtype, cast: torch.dtype | None) -> torch.dtype:
    return cast if cast is not None and dtype.is_floating_point else dtype


def plan_buckets(nbytes: Sequence[int], bucket_bytes: int) -> list[range]:
    """Consecutive tensors of `nbytes` each, grouped into buckets of at most `bucket_bytes` (a tensor larger than
    that in a bucket of its own); `bucket_bytes` 0: one bucket. Every tensor in exactly one bucket, in order."""
    if bucket_bytes < 0:
        raise ValueError(f"bucket_bytes must be >= 0, got {bucket_bytes}")
    buckets, start, held = [], 0, 0
    for i, size in enumerate(nbytes):
        if i > start and bucket_bytes and held + size > bucket_bytes:
            buckets.append(range(start, i))
            start, held = i, 0
        held += size
    return buckets + ([range(start, len(nbytes))] if len(nbytes) > start else [])


_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")  # a transformer block's tensors: model.layers.<i>.*


def layer_of(name: str) -> str:
    """The unit a tensor travels with: its block (`...layers.<i>`), else itself (embedding, final norm, head)."""
    match = _LAYER.match(name)
    return match.group(1) if match else name


def bucket_layout(layout: Layout, bucket_bytes: int) -> list[Layout]:
    """The layout cut into buckets of whole layers (`plan_buckets` over runs of tensors of one `layer_of`): an
    engine reloads a block from all of its tensors at once (vLLM's layerwise reload restores a block's tensors it
    was not given, and fuses q, k, v into one)."""
    units: list[list[int]] = []
    for i, (name, _, _) in enumerate(layout):
        if units and layer_of(layout[units[-1][0]][0]) == layer_of(name):
            units[-1].append(i)
        else:
            units.append([i])
    sizes = [sum(torch.Size(layout[i][1]).numel() * layout[i][2].itemsize for i in unit) for unit in units]
    return [[layout[i] for unit in units[b.start : b.stop] for i in unit] for b in plan_buckets(sizes, bucket_bytes)]


def stream_buckets(named: Iterable[tuple[str, Tensor]], buckets: list[Layout]) -> Iterator[list[tuple[str, Tensor]]]:
    """The tensors of `named`, cast as the layout says, one bucket at a time: a bucket's tensors are read (a
    sharded learner gathers them) only when the bucket before it has been handed on."""
    tensors = iter(named)
    for bucket in buckets:
        out = []
        for name, shape, dtype in bucket:
            got, tensor = next(tensors)
            if got != name or tuple(tensor.shape) != shape:
                raise ValueError(f"weight sync: expected {name} {shape}, got {got} {tuple(tensor.shape)}")
            out.append((name, tensor.detach().to(dtype)))
        yield out


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
