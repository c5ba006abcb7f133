"""The one offline training path: SFT (the RL warm start, packed SFT inside RFT and expert
iteration), DPO and its family, and the Bradley-Terry reward model all train through `train_offline`.

Each objective is a small function `micro_loss(indices) -> (loss summed over the items, metrics)`;
everything else is shared: the batch order (`rlvr.data.stream.PromptStream` over item indices),
gradient accumulation over micro-batches, AdamW with the RL learner's betas and epsilon
(`rlvr.config.OptimConfig`), one clipping rule and one schedule builder (`rlvr.algorithms.optim`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable

from torch import Tensor, nn

from rlvr.algorithms.common import config_field
from rlvr.algorithms.optim import build_optimizer, build_scheduler, check_schedule, clip_gradients
from rlvr.config import OptimConfig, check_finite_number
from rlvr.data.stream import PromptStream

# AdamW (beta1, beta2) and epsilon are the RL learner's defaults: one set for every trainer.
ADAM = OptimConfig()


@dataclass
class OfflineConfig:
    """Optimisation settings of `train_offline` (preference, reward model, SFT)."""

    lr: float = config_field(1e-6, "Peak AdamW learning rate (DPO paper: 1e-6 for 7B-scale models; a tiny "
                            "model from scratch wants ~1e-3).")
    epochs: int = config_field(1, "Passes over the training data (ignored when steps is set).")
    steps: int | None = config_field(None, "Optimizer steps; None: epochs * ceil(items / batch_size).")
    batch_size: int = config_field(8, "Items (pairs, or documents for SFT) per optimizer step; the last "
                                      "step of an epoch takes what is left.")
    micro_batch_size: int | None = config_field(None, "Items per forward pass; gradients are accumulated up "
                                               "to batch_size. None: the whole batch at once.")
    max_grad_norm: float = config_field(1.0, "Clip the global gradient norm to this (0 disables).")
    weight_decay: float = config_field(0.0, "AdamW weight decay on matrices (never on biases and norms).")
    warmup_steps: int = config_field(0, "Linear learning-rate warmup steps (DPO paper: 150).")
    schedule: str = config_field("constant", "LR after warmup: constant, linear or cosine decay to min_lr_ratio.")
    min_lr_ratio: float = config_field(0.0, "Final LR of the linear/cosine decay as a fraction of lr.")
    seed: int = config_field(0, "Seeds the held-out split and the batch order.")

    def validate(self) -> None:
        check_finite_fields(self)
        positive = {"lr": self.lr, "epochs": self.epochs, "batch_size": self.batch_size}
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1 (or None), got {self.steps}")
        mb = self.micro_batch_size
        if mb is not None and not 0 < mb <= self.batch_size:
            raise ValueError(f"micro_batch_size must be in 1..batch_size ({self.batch_size}), got {mb}")
        if self.max_grad_norm < 0 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise ValueError("max_grad_norm, weight_decay and warmup_steps must be >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        check_schedule(self.schedule)

    def total_steps(self, n_items: int) -> int:
        return self.steps or self.epochs * math.ceil(n_items / self.batch_size)


def check_finite_fields(config: object) -> None:
    """Every float field of the dataclass `config` is a finite number: `lr > 0` and `weight_decay >= 0` alone let
    inf through (and `x < 0` checks let NaN through), and one NaN hyper-parameter makes every weight NaN."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float):
            check_finite_number(f.name, value)


MicroLoss = Callable[[list[int]], tuple[Tensor, dict[str, Tensor]]]


TrainerState = dict[str, Any]  # optimizer, scheduler, batch stream, step and history: what a resume needs


def train_offline(model: nn.Module, n_items: int, cfg: OfflineConfig, micro_loss: MicroLoss,
                  weight: Callable[[list[int]], float] = len,
                  on_step: Callable[[dict[str, float]], None] | None = None, start: TrainerState | None = None,
                  after_step: Callable[[int, Callable[[], TrainerState]], None] | None = None,
                  ) -> list[dict[str, float]]:
    """Minibatch AdamW training over item indices 0..n_items-1; returns per-step metrics.

    Batches of `batch_size` indices come from a seeded stream that reshuffles every epoch (the last
    batch of an epoch holds what is left). `micro_loss(indices)` returns (loss summed over the items, detached
    metrics). A step's loss is the sum over its micro-batches divided by `weight(step indices)` (the item count, or the
    target-token count for SFT), so accumulation gives exactly the full-batch gradient.
    The caller sets train/eval mode: preference training runs in eval mode (no dropout).
    `after_step(step, state)`: after each step, with a function giving the trainer's state (a checkpoint's, with
    the model's weights); `start`: such a state, to go on from its step exactly as if never stopped.
    """
    cfg.validate()
    if n_items < 1:
        raise ValueError("train_offline: no training items")
    total = cfg.total_steps(n_items)
    optimizer = build_optimizer(model, cfg.lr, tuple(ADAM.betas), ADAM.eps, cfg.weight_decay)
    scheduler = build_scheduler(optimizer, cfg.schedule, cfg.warmup_steps, total, cfg.min_lr_ratio)
    stream = PromptStream(range(n_items), cfg.seed)
    history: list[dict[str, float]] = []
    if start is not None:
        optimizer.load_state_dict(start["optimizer"])
        scheduler.load_state_dict(start["scheduler"])
        stream.load_state_dict(start["stream"])
        history = list(start["history"])

    def state() -> TrainerState:
        return {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "stream": stream.state_dict(), "step": len(history), "history": history}

    for step in range(len(history) + 1, total + 1):
        batch = _next_batch(stream, cfg.batch_size)
        row = {"step": step, "epoch": stream.epoch,
               **_accumulate(batch, micro_loss, weight, cfg.micro_batch_size or cfg.batch_size)}
        norm = clip_gradients(model.parameters(), cfg.max_grad_norm)
        if cfg.max_grad_norm > 0:
            row["grad_norm"] = norm.item()
        row["lr"] = scheduler.get_last_lr()[0]  # the rate this step uses: read before the scheduler moves on
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        history.append(row)
        if on_step is not None:
            on_step(row)
        if after_step is not None:
            after_step(step, state)
    return history


def _next_batch(stream: PromptStream, batch_size: int) -> list[int]:
    """The next `batch_size` indices of the current epoch; the last batch of an epoch is shorter
    rather than spanning two epochs, so each epoch visits every item exactly once."""
    left = len(stream.pool) - stream.position or len(stream.pool)  # 0 left: the next epoch starts
    return stream.next(min(batch_size, left))


def _accumulate(batch: list[int], micro_loss: MicroLoss, weight: Callable[[list[int]], float],
                micro: int) -> dict[str, float]:
    """Backward over the micro-batches of `batch`; returns the step's loss and weighted metrics."""
    denom = float(weight(batch))
    sums: dict[str, float] = {"loss": 0.0}
    for m in range(0, len(batch), micro):
        part = batch[m: m + micro]
        loss, metrics = micro_loss(part)
        (loss / denom).backward()
        sums["loss"] += loss.item() / denom
        for k, v in metrics.items():  # metrics are means over `part`: weight them by its size
            sums[k] = sums.get(k, 0.0) + v.item() * len(part) / len(batch)
    return sums
