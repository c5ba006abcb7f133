"""Tiny end-to-end settings shared by the variant, recipe and compare tests (seconds per run)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

# An untrained model never sorts and never stops within 8 tokens: every reward would be equal, every
# advantage 0, and nothing would train. A 20-step warm start teaches it to stop, and DAPO's soft
# overlong penalty (last 6 of 8 tokens) then makes rewards differ by length.
TINY = [
    "model.tiny_preset=test", "task.options={length: 3}", "task.train_size=64", "task.eval_size=8",
    "task.rewards=[{name: overlong, options: {cache_len: 6}}]", "sft.steps=20", "sft.lr=3e-3",
    "sft.batch_size=16",
    "train.steps=2", "train.batch_size=8", "train.group_size=4", "train.mini_batch_size=0",
    "rollout.max_new_tokens=8",
    "eval.samples=2", "eval.every=0", "optim.lr=1e-3", "log.progress=false", "log.report_to=[]",
    "log.plots=false", "checkpoint.every=0", "threads=1",
]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(folder) / "model.safetensors"))


def start_dir(run_dir: Path) -> Path:
    """The model RL started from in a run folder (after the warm start, when there was one)."""
    return run_dir / "sft_model" if (run_dir / "sft_model").is_dir() else run_dir / "init_model"


def changed(before: Path, after: Path) -> bool:
    a, b = weights(before), weights(after)
    return a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
