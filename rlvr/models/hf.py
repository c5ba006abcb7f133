"""Load and save Hugging Face causal LMs and tokenizers from local folders.

Only local folders: nothing is ever fetched from the Hub (`local_files_only=True`). Checkpoints are
ordinary HF folders (config.json, model.safetensors, tokenizer files) that any HF tool can read.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase,
                          PreTrainedTokenizerFast)
from transformers.utils import logging as hf_logging


@contextmanager
def quiet():
    """No per-shard progress bars: loads and saves happen inside the training loop's own display."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _model_dir(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"{str(path)!r} is a file, expected a Hugging Face model folder")
    return path


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               attn_implementation: str = "sdpa") -> PreTrainedModel:
    """Load the causal LM in the folder `path` (in eval mode)."""
    path = _model_dir(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a Hugging Face model folder: it has no config.json")
    try:
        with quiet():
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, attn_implementation=attn_implementation, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"could not load a causal LM from {str(path)!r}: {err}") from err
    return model.to(device).eval()


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer in the folder `path`, with its chat template; a missing pad token falls back to EOS.

    A folder with a `tokenizer.json` is loaded from that file as saved, never rebuilt: `AutoTokenizer`
    rebuilds some model types (qwen2 among them) from vocab and merges with its own pre-tokenizer, and a
    folder written by another transformers version then encodes some prompts differently.
    """
    path = _model_dir(path)
    loader = PreTrainedTokenizerFast if (path / "tokenizer.json").is_file() else AutoTokenizer
    try:
        tokenizer = loader.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"could not load a tokenizer from {str(path)!r}: {err}") from err
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer in {str(path)!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(path: str | Path, dtype: torch.dtype = torch.float32,
                             device: str | torch.device = "cpu"):
    """`(load_model(path, dtype, device), load_tokenizer(path))`."""
    return load_model(path, dtype, device), load_tokenizer(path)


def _fsync_tree(root: Path) -> None:
    for file in root.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, path: str | Path) -> Path:
    """Save model (safetensors) and tokenizer to the folder `path`, atomically (`write_folder`)."""
    def write(tmp: Path) -> None:
        with quiet():
            model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)

    return write_folder(path, write)


def write_folder(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Make the folder `path` atomically: `write(tmp)` fills a temporary sibling folder, which is fsynced and then
    renamed to `path`. A crash while writing leaves any previous `path` untouched. Replacing an existing folder
    takes two renames (old -> `path.old-*`, new -> `path`); a crash between them leaves the previous checkpoint
    under `path.old-*` rather than a half-written one under `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        write(tmp)
        _fsync_tree(tmp)
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Turn every dropout off, in place (TRL's `disable_dropout_in_model`, plus the float rates that
    attention layers read from their config): RL's importance ratio compares log-probs from separate
    forward passes, which dropout would make differ even at equal weights."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)
    for name, value in (vars(config) if config is not None else {}).items():
        if isinstance(value, float) and ("dropout" in name or "pdrop" in name):
            setattr(config, name, 0.0)
    return model


def attention_heads(config) -> tuple[int, int, int]:
    """(query heads, key/value heads, head size) of a transformers decoder config: `head_dim` where the config
    states one (Qwen3, Gemma), else hidden_size / heads; key/value heads as many as the query heads unless the
    config says fewer (grouped-query attention)."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, getattr(config, "num_key_value_heads", None) or heads, head_dim


def cache_kwarg(model) -> str:
    """The forward's name for the cache argument: transformers 5.x renamed `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper passes it on
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
