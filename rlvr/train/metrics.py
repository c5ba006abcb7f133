"""The update's metrics as sums over micro-batches, so that neither the micro-batch split (rows, a token budget)
nor the number of data-parallel ranks changes them (`partial_metrics`, `finish_metrics`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

TOKENS, ROWS, PARTS = "_tokens", "_rows", "_parts"  # what a micro-batch's metrics were measured over


def partial_metrics(stats: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """The update's metrics as sums, so that neither the micro-batch split (row count, token budget) nor the
    number of data-parallel ranks changes them: a token metric (entropy, kl, clip fractions, ratios) is a mean
    over every valid token of the update, a `seq_` one over sequences, `loss` the mean minibatch loss (a
    micro-batch's `loss` is its share times its minibatch's number of parts), a `_max` one the largest.
    Returns ({KEY: weighted sum, KEY/w: weight}, {KEY: max}); the one place the update's tensors become
    floats (one transfer)."""
    sums: dict[str, Tensor] = {}
    maxes: dict[str, Tensor] = {}
    for s in stats:
        for key, value in s.items():
            if key in (TOKENS, ROWS, PARTS):
                continue
            value = value.detach().double()
            if key.endswith("_max"):
                maxes[key] = torch.maximum(maxes[key], value) if key in maxes else value
                continue
            if key == "loss":
                weight = torch.full_like(value, 1 / s[PARTS])
            else:
                weight = (s[ROWS] if key.startswith("seq_") else s[TOKENS]).double()
            sums[key] = sums.get(key, 0) + torch.where(weight > 0, value * weight, 0)  # no token: nothing to count
            sums[f"{key}/w"] = sums.get(f"{key}/w", 0) + weight
    keys = [*sums, *maxes]
    values = torch.stack([*sums.values(), *maxes.values()]).tolist() if keys else []
    floats = dict(zip(keys, values))
    return {k: floats[k] for k in sums}, {k: floats[k] for k in maxes}


def finish_metrics(sums: dict[str, float], maxes: dict[str, float]) -> dict[str, float]:
    means = {k: sums[k] / sums[f"{k}/w"] for k in sums if not k.endswith("/w")}
    return dict(sorted({**means, **maxes}.items()))




def counted(metrics: dict[str, Any], mask: Tensor, parts: float = 1) -> dict[str, Any]:
    """`metrics` with what they were measured over: the valid tokens and rows of `mask` (b, W), and the number of
    parts of its minibatch (what its `loss` was scaled by)."""
    return {**metrics, TOKENS: mask.sum(), ROWS: mask.any(-1).sum(), PARTS: parts}
