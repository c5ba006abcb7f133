"""Shared pieces of the offline trainers (preference, reward model, RFT): encoding, padding,
sequence log-probabilities and jsonl reading with clear errors."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.core import masked_sum, token_logprobs
from rlvr.rollout.batch import encode_prompt_completion, pad_right
from rlvr.algorithms.optim import build_optimizer, build_scheduler, check_schedule


def completion_logprobs(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
                        completions: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed log pi(completion | prompt) per sequence (B,) and completion lengths (B,).

    One right-padded forward over prompt + completion; the log-prob of token t comes from the logits
    at t - 1, and only completion positions are summed.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    ids, attn = pad_right(seqs, pad_id)  # (B, T)
    target = torch.zeros_like(attn)  # (B, T): True on completion tokens
    for i, (p, c) in enumerate(zip(prompts, completions)):
        target[i, len(p): len(p) + len(c)] = True
    ids, attn, target = ids.to(model.device), attn.to(model.device), target.to(model.device)
    logits = model(input_ids=ids, attention_mask=attn.long(), use_cache=False).logits  # (B, T, V)
    logp = token_logprobs(logits[:, :-1], ids[:, 1:])  # (B, T-1)
    mask = target[:, 1:]
    return masked_sum(logp, mask, dim=-1), mask.sum(-1)


def config_field(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass
class OfflineConfig:
    """Optimisation settings shared by the offline trainers (preference, reward model, RFT's SFT)."""

    lr: float = config_field(1e-6, "Peak AdamW learning rate (DPO paper: 1e-6 for 7B-scale models; a tiny "
                            "model from scratch wants ~1e-3).")
    epochs: int = config_field(1, "Passes over the training data.")
    batch_size: int = config_field(8, "Items (pairs, or documents for SFT) per optimizer step.")
    micro_batch_size: int | None = config_field(None, "Items per forward pass; gradients are accumulated up "
                                               "to batch_size. None: the whole batch at once.")
    max_grad_norm: float = config_field(1.0, "Clip the global gradient norm to this (0 disables).")
    weight_decay: float = config_field(0.0, "AdamW weight decay on matrices (never on biases and norms).")
    warmup_steps: int = config_field(0, "Linear learning-rate warmup steps (DPO paper: 150).")
    schedule: str = config_field("constant", "LR after warmup: constant, linear or cosine decay to 0.")
    seed: int = config_field(0, "Seeds the held-out split and the shuffling order.")

    def validate(self) -> None:
        positive = {"lr": self.lr, "epochs": self.epochs, "batch_size": self.batch_size}
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        mb = self.micro_batch_size
        if mb is not None and not 0 < mb <= self.batch_size:
            raise ValueError(f"micro_batch_size must be in 1..batch_size ({self.batch_size}), got {mb}")
        if self.max_grad_norm < 0 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise ValueError("max_grad_norm, weight_decay and warmup_steps must be >= 0")
        check_schedule(self.schedule)


def split_holdout(items: Sequence[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """A seeded random (train, held-out) split; the held-out part has round(fraction * n) items,
    at least 1 when fraction > 0, and the train part is never empty."""
    if not 0 <= fraction < 1:
        raise ValueError(f"eval_fraction must be in [0, 1), got {fraction}")
    n = len(items)
    n_eval = max(1, round(fraction * n)) if fraction > 0 else 0
    if n - n_eval < 1:
        raise ValueError(f"cannot hold out {n_eval} of {n} items and still train; add data or lower eval_fraction")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [items[i] for i in order[n_eval:]], [items[i] for i in order[:n_eval]]


MicroLoss = Callable[[list[int]], tuple[Tensor, dict[str, Tensor]]]


def train_epochs(model: PreTrainedModel, n_items: int, cfg: OfflineConfig, micro_loss: MicroLoss,
                 weight: Callable[[list[int]], float] = len,
                 on_step: Callable[[dict[str, float]], None] | None = None) -> list[dict[str, float]]:
    """Shuffled minibatch AdamW training over item indices 0..n_items-1; returns per-step metrics.

    `micro_loss(indices)` returns (loss summed over the items, detached metrics). Each step's loss
    is the sum over its micro-batches divided by `weight(step indices)` (the item count, or the
    target-token count for SFT), so accumulation gives exactly the full-batch gradient.
    """
    cfg.validate()
    steps_per_epoch = math.ceil(n_items / cfg.batch_size)
    optimizer = build_optimizer(model, cfg.lr, (0.9, 0.999), 1e-8, cfg.weight_decay)
    scheduler = build_scheduler(optimizer, cfg.schedule, cfg.warmup_steps, cfg.epochs * steps_per_epoch, 0.0)
    generator = torch.Generator().manual_seed(cfg.seed)
    micro = cfg.micro_batch_size or cfg.batch_size
    history = []
    for epoch in range(cfg.epochs):
        order = torch.randperm(n_items, generator=generator).tolist()
        for start in range(0, n_items, cfg.batch_size):
            batch = order[start: start + cfg.batch_size]
            denom = float(weight(batch))
            sums: dict[str, float] = {}
            for m in range(0, len(batch), micro):
                part = batch[m: m + micro]
                loss, metrics = micro_loss(part)
                (loss / denom).backward()
                sums["loss"] = sums.get("loss", 0.0) + loss.item() / denom
                for k, v in metrics.items():  # metrics are means over `part`: weight them by its size
                    sums[k] = sums.get(k, 0.0) + v.item() * len(part) / len(batch)
            if cfg.max_grad_norm > 0:
                sums["grad_norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm).item()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            row = {"step": len(history) + 1, "epoch": epoch, "lr": scheduler.get_last_lr()[0], **sums}
            history.append(row)
            if on_step is not None:
                on_step(row)
    return history
