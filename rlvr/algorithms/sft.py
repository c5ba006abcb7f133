"""Supervised fine-tuning (warm start): masked NLL on completion tokens only.

The prompt tokens are inputs, never targets: training on them would teach the model to write
prompts, and it wastes capacity on text the task always supplies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.core import masked_mean
from rlvr.jsonl import read_jsonl
from rlvr.tasks.base import Task
from rlvr.rollout.batch import RolloutBatch, encode_prompt_completion, pack, policy_logprobs
from rlvr.data.stream import PromptStream
from rlvr.algorithms.optim import build_optimizer, build_scheduler
from rlvr.models.tokenizer import pad_token_id


def sft_loss(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Mean negative log-likelihood over completion tokens: logprobs, mask (B, W) -> scalar."""
    return -masked_mean(logprobs, mask)


def pairs_from_task(task: Task, n: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, reference answer) demonstrations from a task's training split."""
    return [(ex.prompt, ex.answer) for ex in task.train_examples(n, seed)]


def pairs_from_jsonl(path: str | Path) -> list[tuple[str, str]]:
    """(prompt, completion) pairs from a jsonl file with string fields `prompt` and `completion`."""
    return [(row["prompt"], row["completion"]) for row in read_jsonl(path, ["prompt", "completion"], "SFT data", empty_ok=False)]


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """Prompt and completion (+ EOS) ids, encoded apart exactly as the rollout engine sees them."""
    return [encode_prompt_completion(tokenizer, p, c) for p, c in pairs]


def sft_batch(encoded: Sequence[tuple[list[int], list[int]]], pad_id: int) -> RolloutBatch:
    ids, attn, mask, start = pack([p for p, _ in encoded], [c for _, c in encoded], pad_id)
    zeros = torch.zeros(len(encoded))
    return RolloutBatch(ids, attn, mask, start, advantages=zeros, rewards=zeros)


def train_sft(model, tokenizer, pairs: Sequence[tuple[str, str]], steps: int, batch_size: int, lr: float,
              seed: int, on_step: Callable[[int, float], None] | None = None) -> float:
    """`steps` AdamW steps of masked NLL on `pairs` (linear warmup over 10%, cosine to 10% of lr).

    Returns the mean loss of the last 10 steps. `on_step(step, loss)` sees every step's loss.
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    pad_id = pad_token_id(tokenizer)
    stream = PromptStream(encode_pairs(tokenizer, pairs), seed)
    optimizer = build_optimizer(model, lr, (0.9, 0.99), 1e-8, 0.0)
    scheduler = build_scheduler(optimizer, "cosine", max(1, steps // 10), steps, 0.1)
    model.train()
    recent: list[float] = []
    for step in range(1, steps + 1):
        batch = sft_batch(stream.next(batch_size), pad_id)
        logprobs, _ = policy_logprobs(model, batch, temperature=1.0)
        loss = sft_loss(logprobs, batch.mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        value = loss.item()
        recent = (recent + [value])[-10:]
        if on_step is not None:
            on_step(step, value)
    model.eval()
    return sum(recent) / len(recent)
