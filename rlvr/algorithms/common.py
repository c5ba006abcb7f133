"""Shared pieces of the offline objectives (preference, reward model, SFT): sequence log-probabilities,
the held-out split and the length check of a training sequence. The training path
itself is `rlvr.algorithms.offline`."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from rlvr.core import masked_sum, token_logprobs
from rlvr.rollout.batch import pad_right


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


def max_positions(model: Any) -> int | None:
    """The context of a model (or of its Hugging Face config): its max_position_embeddings, None if unknown."""
    return getattr(getattr(model, "config", model), "max_position_embeddings", None)


@contextmanager
def length_checked() -> Iterator[None]:
    """Encoding inside is followed by `check_fits` on every sequence: transformers' own warning about a sequence
    longer than the tokenizer's model_max_length (naming no row) is held back, so a refused row is one line."""
    tokenization = logging.getLogger("transformers.tokenization_utils_base")
    level = tokenization.level
    tokenization.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tokenization.setLevel(level)


def check_fits(where: str, parts: dict[str, int], positions: int | None, max_length: int | None = None) -> None:
    """The sequence at `where` (a `file:LINE`), of `parts` tokens (e.g. {"prompt": 12, "chosen": 795}), fits
    `max_length` and the model's context `positions`. A longer one is an error naming the row: truncating it would
    change what is learned, and past its positions a model trains on positions it never saw (transformers only
    warns). An empty prompt is an error too: nothing would predict the response's first token."""
    if parts.get("prompt") == 0:  # the logits at t - 1 score token t: with no prompt, no response token 0
        raise ValueError(f"{where}: the prompt encodes to no tokens, so the first response token could not be "
                         f"scored; give every row a prompt")
    total = sum(parts.values())
    text = f"{where}: {' + '.join(parts)} is {total} tokens ({' + '.join(map(str, parts.values()))})"
    if max_length is not None and total > max_length:
        raise ValueError(f"{text}, more than max_length={max_length}; shorten or drop the row, or raise max_length")
    if positions is not None and total > positions:
        raise ValueError(f"{text}, which exceeds the model's max_position_embeddings ({positions}); shorten or "
                         f"drop the row")
