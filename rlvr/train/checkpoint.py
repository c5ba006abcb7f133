"""Resumable checkpoints, written atomically.

Layout inside the run folder:

    checkpoints/step_000050/model/        Hugging Face folder (safetensors + tokenizer)
    checkpoints/step_000050/state.pt      optimizer, scheduler, RNG states, data position, step
    checkpoints/latest                    name of the newest complete checkpoint

A checkpoint is built in a temporary folder, fsynced, then renamed into place (`os.replace` is
atomic on POSIX); `latest` is rewritten the same way only afterwards. A crash (even kill -9) at any
moment therefore leaves every step folder complete and `latest` naming one of them, or missing (a crash between
the first checkpoint's rename and the pointer's write); a resume then takes the newest intact step folder
(`rlvr.train.preflight.find_checkpoint`).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging as hf_logging

CHECKPOINTS = "checkpoints"
LATEST = "latest"
WARM_START = "sft"  # the SFT warm start's own checkpoints, in this layout: RUN/sft/checkpoints/step_NNNNNN
STEP_NAME = re.compile(r"step_(\d+)")  # what `latest` may hold: a folder name, never a path


def step_number(name: str) -> int | None:
    """The step of a checkpoint folder name (`step_000050` -> 50); None for any other name."""
    match = STEP_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def step_folders(root: Path) -> list[Path]:
    """The step folders in a checkpoints folder `root` (complete or not), newest step first."""
    found = [p for p in Path(root).glob("step_*") if p.is_dir() and step_number(p.name) is not None]
    return sorted(found, key=lambda p: step_number(p.name), reverse=True)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


@contextmanager
def _no_progress_bars():
    """transformers draws a progress bar per shard write; inside the loop's own display it is noise."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic_text(path: Path, text: str) -> None:
    """Write `text` to a temporary sibling, fsync it, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], keep: int) -> Path:
    """Write checkpoint `step` (model + `state`), point `latest` at it, keep the newest `keep`."""
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        with _no_progress_bars():
            model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
        _fsync_tree(tmp)
        if final.exists():  # a re-run of a step after resume: replace the old copy
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_atomic_text(root / LATEST, final.name)
    _prune(root, keep, final.name)
    return final


def _prune(root: Path, keep: int, newest: str) -> None:
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for path in done[:-keep]:
        if path.name != newest:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in root.glob(".step_*.tmp-*"):  # debris of a crash mid-write
        shutil.rmtree(leftover, ignore_errors=True)


class BadPointer(FileNotFoundError):
    """`latest` names no complete checkpoint of its run: `named` is the step folder it names, None when it
    holds anything but a step folder's name (empty, `..`, a path, garbage)."""

    def __init__(self, message: str, named: str | None):
        super().__init__(message)
        self.named = named


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `checkpoints/latest` names, None when there is no pointer. The pointer must hold the
    name of a step folder of this run's checkpoints/ (an empty one, `..` or a path would resolve to the
    folder itself, the run folder or another run's checkpoint); anything else raises BadPointer."""
    pointer = Path(run_dir) / CHECKPOINTS / LATEST
    if not pointer.is_file():
        return None
    raw = pointer.read_bytes().strip()
    text = raw.decode("utf-8", "replace")
    if step_number(text) is None:  # shown escaped: a pointer of binary garbage is not printed raw
        shown = repr(text[:60] if text.isascii() and text.isprintable() else raw[:60])
        raise BadPointer(f"{pointer} is corrupt: it holds {shown}, not the name of a checkpoint (step_NNNNNN)", None)
    path = pointer.parent / text
    if not (path / "state.pt").is_file():
        raise BadPointer(f"{pointer} names {text}, which is missing or incomplete", text)
    return path


def load_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint (RNG states are restored by the caller, at the right time)."""
    return torch.load(Path(checkpoint) / "state.pt", weights_only=False)
