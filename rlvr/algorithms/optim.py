"""AdamW, the learning-rate schedule (linear warmup, then constant, linear or cosine decay) and the
gradient clipping rule, shared by the RL learner and the offline trainers."""

from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from rlvr.config.sections import SCHEDULES


def check_schedule(name: str) -> None:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose from {list(SCHEDULES)}")


def lr_factor(schedule: str, warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """step -> multiplier of the peak lr: (step+1)/warmup during warmup, then the decay to min_ratio.

    Warmup counts from step + 1 so the very first update already moves the weights (a factor of 0
    would waste a rollout).
    """
    check_schedule(schedule)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        shape = 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * shape

    return factor


def build_optimizer(model: nn.Module, lr: float, betas: tuple[float, float], eps: float,
                    weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the trainable parameters; biases and norm weights (1-d) get no weight decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # fused: one kernel over all tensors instead of torch's per-tensor loop on CPU (benchmarks/bench_update.py);
    # FSDP2's DTensor parameters keep the default path
    fused = all(p.device.type in ("cpu", "cuda") and not isinstance(p, DTensor) for p in params) or None
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=tuple(betas), eps=eps, fused=fused)


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """`optimizer.load_state_dict(state)` keeping this process's AdamW kernel (fused or not), not the checkpoint's:
    a checkpoint of one learner resumed by FSDP2 ranks must not turn the fused kernel on for their DTensors."""
    kernels = [{k: group.get(k) for k in ("fused", "foreach")} for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)


def build_scheduler(optimizer: torch.optim.Optimizer, schedule: str, warmup: int, total: int,
                    min_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(schedule, warmup, total, min_ratio))


def clip_gradients(params: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """The one clipping rule of every trainer: scale the gradients so that their global L2 norm is at
    most `max_norm` (0 = clipping off); returns the norm before clipping (a detached scalar), NaN/inf
    when a gradient is."""
    params = [p for p in params if p.grad is not None]
    if max_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # sharded (FSDP2) gradients: a DTensor
