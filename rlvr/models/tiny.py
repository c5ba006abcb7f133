"""Tiny Llama / Qwen2 causal LMs built from a config, for tests, the demo and benchmarks.

Nothing is downloaded: the weights are a seeded random init, the tokenizer is `build_char_tokenizer`.
`make_tiny_model_dir` writes an ordinary Hugging Face folder that `AutoModelForCausalLM` and
`AutoTokenizer` (and so any other HF-compatible tool) load.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, PreTrainedModel, PreTrainedTokenizerBase, Qwen2Config
from transformers import AutoModelForCausalLM

from rlvr.models.hf import save_model
from rlvr.models.tokenizer import build_char_tokenizer

ARCHS = {"qwen2": Qwen2Config, "llama": LlamaConfig}

# Named sizes. "test": the fastest model that still exercises every layer type (tests).
# "demo": ~1.1M parameters, learns digit sorting on 2 CPU cores in minutes.
# "bench20m": ~20M parameters, the rollout benchmark model (benchmarks/bench_rollout.py).
PRESETS: dict[str, dict[str, int]] = {
    "test": dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128),
    "demo": dict(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=512),
    "bench20m": dict(hidden_size=512, num_layers=6, num_heads=8, intermediate_size=1536),
}


def tiny_config(
    tokenizer: PreTrainedTokenizerBase,
    arch: str = "qwen2",
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int = 512,
    max_position_embeddings: int = 512,
):
    """A Llama/Qwen2 config sized by the arguments, with the tokenizer's vocab and special ids."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose from {sorted(ARCHS)}")
    for name, value in [("hidden_size", hidden_size), ("num_layers", num_layers), ("num_heads", num_heads),
                        ("intermediate_size", intermediate_size),
                        ("max_position_embeddings", max_position_embeddings)]:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if hidden_size % num_heads or (hidden_size // num_heads) % 2:
        raise ValueError(f"hidden_size ({hidden_size}) / num_heads ({num_heads}) must be an even integer "
                         "(rotary embeddings rotate pairs of dimensions)")
    return ARCHS[arch](
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,  # at this size the embedding is a large share of the parameters
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, arch: str = "qwen2", seed: int = 0,
                     **sizes: int) -> PreTrainedModel:
    """A randomly initialised (seeded, float32, sdpa attention) causal LM for `tokenizer`; `sizes`
    are `tiny_config`'s (hidden_size, num_layers, num_heads, intermediate_size, max_position_embeddings).

    The global RNG state is left untouched: the same seed gives the same weights wherever it is called.
    """
    config = tiny_config(tokenizer, arch, **sizes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    gen = model.generation_config
    gen.pad_token_id, gen.bos_token_id, gen.eos_token_id = (
        tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    return model.eval()


def make_tiny_model_dir(
    path: str | Path,
    arch: str = "qwen2",
    preset: str | None = None,
    alphabet: str | None = None,
    seed: int = 0,
    **sizes: int,
) -> Path:
    """Build the char tokenizer and a tiny model and save both as a Hugging Face folder at `path`.

    `preset` (one of PRESETS) gives the sizes; explicit `sizes` (hidden_size, num_layers, num_heads,
    intermediate_size, max_position_embeddings) override it. Returns the folder path.
    """
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    tokenizer = build_char_tokenizer(alphabet)
    kwargs = {**(PRESETS[preset] if preset else {}), **sizes}
    model = build_tiny_model(tokenizer, arch=arch, seed=seed, **kwargs)
    tokenizer.model_max_length = model.config.max_position_embeddings
    return save_model(model, tokenizer, path)
