"""The seam between the trainer and any generation engine (transformers, vLLM, remote workers).

The trainer only ever calls `engine.generate(...)` and `engine.load_weights(...)`; it never reaches
into an engine. Completions come back flat, the n samples of one prompt contiguous, which is the
layout `rlvr.core` group functions expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol, runtime_checkable

import torch

from rlvr.config import check_finite_number


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `temperature == 0` means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()  # stop strings; the completion text is cut before the stop string
    seed: int | None = None
    ignore_eos: bool = False  # decode max_new_tokens every time (benchmarks at a fixed length)

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):  # NaN passes every `<` check and breaks sampling later
            check_finite_number(name, getattr(self, name))
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]  # generated tokens, EOS included when the model emitted it
    logprobs: list[float]  # sampler log-prob of each generated token, len == len(token_ids)
    text: str  # decoded completion, special tokens and any stop string removed
    finish_reason: str  # "stop" (EOS or a stop string) or "length" (max_new_tokens reached)
    extra: dict = field(default_factory=dict)
    # entropy at each generated position of the distribution `logprobs` are of, len == len(token_ids); None: the
    # engine was not asked for them (HFEngine(entropies=True) computes them)
    entropies: list[float] | None = None


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        """Return len(prompts) * n completions; those of prompt i are [i*n, (i+1)*n)."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Make the engine sample from new policy weights (weight sync after an optimizer step)."""
        ...


def encode_prompts(tokenizer, prompts, n, sampling: SamplingParams, add_special_tokens: bool,
                   max_positions: int | None) -> list[list[int]]:
    """Check the arguments every engine's `generate` takes and tokenize the prompts.

    max_positions: the model's context length (prompt + max_new_tokens must fit), None = unchecked.
    """
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of strings")
    bad = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
    if bad:
        raise TypeError(f"prompts must be strings; prompt {bad[0]} is {type(prompts[bad[0]]).__name__}")
    ids = tokenizer(list(prompts), add_special_tokens=add_special_tokens)["input_ids"]
    empty = [i for i, x in enumerate(ids) if not x]
    if empty:
        raise ValueError(f"prompt {empty[0]} encodes to no tokens; a prompt needs at least one")
    longest = max(map(len, ids)) + sampling.max_new_tokens
    if max_positions is not None and longest > max_positions:
        raise ValueError(f"longest prompt ({longest - sampling.max_new_tokens} tokens) + max_new_tokens "
                         f"({sampling.max_new_tokens}) exceeds the model's max_position_embeddings ({max_positions})")
    return ids
