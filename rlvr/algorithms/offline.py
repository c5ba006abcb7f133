"""The one offline training path: SFT (the RL warm start, packed SFT inside RFT and expert
iteration), DPO and its family, and the Bradley-Terry reward model all train through `train_offline`.

Each objective is a small function `micro_loss(indices) -> (loss summed over the items, metrics)`;
everything else is shared: the batch order (`rlvr.data.stream.PromptStream` over item indices),
gradient accumulation over micro-batches, AdamW and its schedule from the config's `optim` section (the RL run's
`rlvr.config.OptimConfig`), one clipping rule and one schedule builder (`rlvr.algorithms.optim`). The configs
themselves are `rlvr.config.offline`.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import Tensor, nn

from rlvr.algorithms.optim import build_optimizer, build_scheduler, clip_gradients
from rlvr.config.offline import OfflineConfig
from rlvr.data.stream import PromptStream

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
    total, o = cfg.total_steps(n_items), cfg.optim
    optimizer = build_optimizer(model, o.lr, tuple(o.betas), o.eps, o.weight_decay)
    scheduler = build_scheduler(optimizer, o.schedule, o.warmup_steps, total, o.min_lr_ratio)
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
        norm = clip_gradients(model.parameters(), o.max_grad_norm)
        if o.max_grad_norm > 0:
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
