"""Tiny end-to-end settings shared by the variant, recipe and compare tests (seconds per run)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

TINY = [
    "model.tiny_preset=test", "task.options={length: 3}", "task.train_size=64", "task.eval_size=8",
    "train.steps=2", "train.batch_size=8", "train.group_size=4", "rollout.max_new_tokens=8",
    "eval.samples=2", "eval.every=0", "optim.lr=1e-3", "log.progress=false", "log.tensorboard=false",
    "log.plots=false", "checkpoint.every=0", "threads=1",
]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(folder) / "model.safetensors"))


def changed(before: Path, after: Path) -> bool:
    a, b = weights(before), weights(after)
    return a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
