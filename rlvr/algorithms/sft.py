"""Supervised fine-tuning (warm start): masked NLL on completion tokens only.

The prompt tokens are inputs, never targets: training on them would teach the model to write
prompts, and it wastes capacity on text the task always supplies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.core import masked_sum
from rlvr.jsonl import read_jsonl_located
from rlvr.tasks.base import Task
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import RolloutBatch, build_batch, encode_prompt_completion
from rlvr.algorithms.common import check_fits, length_checked, max_positions
from rlvr.algorithms.offline import TrainerState, train_offline
from rlvr.config import SFTConfig
from rlvr.config.offline import warm_start_config
from rlvr.models.tokenizer import pad_token_id


def sft_nll(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Summed negative log-likelihood of the completion tokens: logprobs, mask (B, W) -> scalar.

    A sum, not a mean: the offline path divides by the step's completion-token count, so the loss is
    the token mean over the whole step however it is split into micro-batches.
    """
    return -masked_sum(logprobs, mask)


def pairs_from_task(task: Task, n: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, reference answer) demonstrations from a task's training split."""
    return [(ex.prompt, ex.answer) for ex in task.train_examples(n, seed)]


def located_pairs_from_jsonl(path: str | Path) -> tuple[list[str], list[tuple[str, str]]]:
    """(the `path:LINE` of each row, (prompt, completion) pairs) from a jsonl file with string fields `prompt`
    and `completion`."""
    rows = read_jsonl_located(path, ["prompt", "completion"], "SFT data", empty_ok=False)
    return [where for where, _ in rows], [(row["prompt"], row["completion"]) for _, row in rows]


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]], positions: int | None = None,
                 places: Sequence[str] | None = None) -> list[tuple[list[int], list[int]]]:
    """Prompt and completion (+ EOS) ids, encoded apart exactly as the rollout engine sees them; each pair must
    fit the model's context `positions` (`check_fits`; errors name `places[i]`, default `SFT pair i`)."""
    with length_checked():
        encoded = [encode_prompt_completion(tokenizer, p, c) for p, c in pairs]
    for i, (prompt, completion) in enumerate(encoded):
        where = places[i] if places is not None else f"SFT pair {i}"
        check_fits(where, {"prompt": len(prompt), "completion": len(completion)}, positions)
    return encoded


def sft_batch(encoded: Sequence[tuple[list[int], list[int]]], pad_id: int,
              loss_masks: Sequence[Sequence[int]] | None = None) -> RolloutBatch:
    """Right-padded rows of (prompt, completion) ids; `loss_masks` (episodes' demonstrations) keeps the model's
    tokens of each completion in the loss mask, not the environment's."""
    zeros = torch.zeros(len(encoded))
    return build_batch([p for p, _ in encoded], [c for _, c in encoded], zeros, zeros, pad_id, loss_masks)


def sft_micro_loss(model, encoded: Sequence[tuple[list[int], list[int]]], pad_id: int,
                   loss_masks: Sequence[Sequence[int]] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """The SFT objective of `train_offline`: summed completion NLL of one right-padded micro-batch, on
    the model's device."""
    batch = sft_batch(encoded, pad_id, loss_masks).to(model.device)
    logprobs, _ = policy_logprobs(model, batch, temperature=1.0)
    return sft_nll(logprobs, batch.mask), {}


def train_sft(model, tokenizer, pairs: Sequence[tuple[str, str]], steps: int, batch_size: int, lr: float,
              seed: int, on_step: Callable[[int, float], None] | None = None,
              places: Sequence[str] | None = None, start: TrainerState | None = None,
              after_step: Callable[[int, Callable[[], TrainerState]], None] | None = None) -> float:
    """`steps` optimizer steps of masked NLL on `pairs` through `train_offline` (`warm_start_config`).

    Returns the mean loss of the last 10 steps. `on_step(step, loss)` sees every step's loss. `places` names
    each pair in the error for one too long for the model (`encode_pairs`), e.g. `sft.data: train.jsonl:7`.
    `start`, `after_step`: a checkpoint's trainer state to go on from, and what to do after each step (as in
    `train_offline`).
    """
    encoded = encode_pairs(tokenizer, pairs, max_positions(model), places)
    return train_sft_encoded(model, tokenizer, encoded, None, steps, batch_size, lr, seed, on_step, start, after_step)


def train_sft_encoded(model, tokenizer, encoded: Sequence[tuple[list[int], list[int]]],
                      loss_masks: Sequence[Sequence[int]] | None, steps: int, batch_size: int, lr: float, seed: int,
                      on_step: Callable[[int, float], None] | None = None, start: TrainerState | None = None,
                      after_step: Callable[[int, Callable[[], TrainerState]], None] | None = None) -> float:
    """`train_sft` on (prompt ids, completion ids) rows, e.g. an environment's demonstration episodes
    (`rlvr.rollout.episode.demonstration_episodes`) with their `loss_masks`: NLL of the model's tokens only."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    pad_id = pad_token_id(tokenizer)
    report = None if on_step is None else (lambda row: on_step(row["step"], row["loss"]))
    masks = loss_masks or [[1] * len(c) for _, c in encoded]
    model.train()
    cfg = warm_start_config(SFTConfig(steps=steps, batch_size=batch_size, lr=lr), seed)
    history = train_offline(model, len(encoded), cfg,
                            lambda idx: sft_micro_loss(model, [encoded[i] for i in idx], pad_id,
                                                       [masks[i] for i in idx] if loss_masks else None),
                            weight=lambda idx: sum(sum(masks[i]) for i in idx), on_step=report, start=start,
                            after_step=after_step)
    model.eval()
    recent = [row["loss"] for row in history[-10:]]
    return sum(recent) / len(recent)
