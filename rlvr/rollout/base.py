"""The seam between the trainer and any generation engine (transformers, vLLM, remote workers).

The trainer only ever calls `engine.generate(...)` and `engine.load_weights(...)`; it never reaches
into an engine. Completions come back flat, the n samples of one prompt contiguous, which is the
layout `rlvr.core` group functions expect. A prompt is a text or its token ids: a multi-turn episode
(`rlvr.rollout.episode`) hands its history back as the very ids sampled and observed so far, never
re-tokenized (verl's agent loop is token in, token out for the same reason: a text round trip can merge
tokens across a turn's boundary and score a sequence the model never produced).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence, Union, runtime_checkable

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


Prompt = Union[str, Sequence[int]]  # a prompt's text, or its token ids as they are to be fed to the model


@dataclass
class Completion:
    """One sampled continuation of one prompt; or one episode of an environment (`rlvr.rollout.episode`), whose
    `token_ids` interleave the model's turns with the environment's observations."""

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
    # 1 where the model sampled the token, 0 where the environment wrote it (an observation, a tool's output), len ==
    # len(token_ids); only the model's own tokens train. None: every token is the model's (a single turn)
    loss_mask: list[int] | None = None


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingParams) -> list[Completion]:
        """Return len(prompts) * n completions; those of prompt i are [i*n, (i+1)*n). A prompt given as token
        ids is fed as it is (no special tokens added)."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Make the engine sample from new policy weights (weight sync after an optimizer step)."""
        ...


def _is_ids(prompt: object) -> bool:
    return isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)


def prompt_text(tokenizer, prompt: Prompt) -> str:
    """`Completion.prompt` of a prompt: its text, or its ids decoded with their special tokens."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(list(prompt), skip_special_tokens=False)


def encode_prompts(tokenizer, prompts, n, sampling: SamplingParams, add_special_tokens: bool,
                   max_positions: int | None) -> list[list[int]]:
    """Check the arguments every engine's `generate` takes and tokenize the prompts given as text (those given
    as token ids are taken as they are).

    max_positions: the model's context length (prompt + max_new_tokens must fit), None = unchecked.
    """
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of strings (or of token id lists)")
    bad = [i for i, p in enumerate(prompts) if not isinstance(p, str) and not _is_ids(p)]
    if bad:
        raise TypeError(f"prompts must be strings or token id lists; prompt {bad[0]} is "
                        f"{type(prompts[bad[0]]).__name__}")
    texts = [i for i, p in enumerate(prompts) if isinstance(p, str)]
    ids: list[list[int]] = [list(p) if not isinstance(p, str) else [] for p in prompts]
    if texts:
        encoded = tokenizer([prompts[i] for i in texts], add_special_tokens=add_special_tokens)["input_ids"]
        for i, x in zip(texts, encoded):
            ids[i] = list(x)
    empty = [i for i, x in enumerate(ids) if not x]
    if empty:
        raise ValueError(f"prompt {empty[0]} encodes to no tokens; a prompt needs at least one")
    longest = max(map(len, ids)) + sampling.max_new_tokens
    if max_positions is not None and longest > max_positions:
        raise ValueError(f"longest prompt ({longest - sampling.max_new_tokens} tokens) + max_new_tokens "
                         f"({sampling.max_new_tokens}) exceeds the model's max_position_embeddings ({max_positions})")
    return ids
