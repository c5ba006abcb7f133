"""Scoring labels at a causal LM's output layer: from its logits, or chunked without them (`train.logprob_chunk`).

The chunked way (`rlvr.core.head_logprobs`) needs the output layer's input, not its output. It runs *inside* the
model's forward: for the one call, the output layer's `forward` is replaced by the scoring of the labels on its
input, so the weight it multiplies is the one the forward uses, also where FSDP2 gathers it from shards only for
the forward; the model then returns an empty tensor as its logits. A model whose output layer is more than a
bias-free linear map (soft-capped logits, a scale, a bias) is scored from its logits, the chunk setting aside.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

from rlvr.core import entropy_from_logits, head_logprobs, process_logits, token_logprobs

# config attributes that put something between the output layer's product and the logits (Gemma 2's soft cap,
# Cohere's scale, Granite's divisor, MiniCPM's hidden scaling before it): scored from the logits instead
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "scale_width")


def chunks_head(model: nn.Module) -> bool:
    """Whether `model`'s logits are its output layer's product and nothing else (a bias-free nn.Linear)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    config = getattr(model, "config", None)
    return (isinstance(head, nn.Linear) and head.bias is None
            and not any(getattr(config, key, None) for key in _LOGIT_TRANSFORMS))


def scored_logprobs(logits: Tensor, labels: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
                    with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """The learner's one rule (docs/core.md): log q(label) (...) under the processed distribution q the
    completions were sampled from (`rlvr.core.process_logits`: logits / T, then top-k, then top-p, the label
    always kept), and optionally q's entropy (...) without gradient. logits (..., V), labels (...)."""
    logits = process_logits(logits, temperature, top_k, top_p, keep=labels)
    logprobs = token_logprobs(logits, labels)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return logprobs, entropy


def chunked_scores(head: nn.Linear, hidden: Tensor, labels: Tensor, temperature: float, top_k: int, top_p: float,
                   with_entropy: bool, chunk: int) -> tuple[Tensor, Tensor | None]:
    """`scored_logprobs` of the output layer `head` on its input `hidden` (..., d), `chunk` positions at a time,
    its product in the dtype the layer would compute in (autocast's, else its weight's)."""
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else head.weight.dtype
    return head_logprobs(hidden, head.weight, labels, temperature, top_k, top_p, chunk, with_entropy, dtype)


def scores_of_hidden(model: nn.Module, hidden: Tensor, labels: Tensor, temperature: float, top_k: int = 0,
                     top_p: float = 1.0, with_entropy: bool = False, chunk: int = 0) -> tuple[Tensor, Tensor | None]:
    """`scored_logprobs` of `model`'s output layer on its input `hidden` (..., d) (a trunk shared with a value
    head): chunked where `chunk` asks and `chunks_head` allows, else from the layer's logits."""
    head = model.get_output_embeddings()
    if chunk > 0 and chunks_head(model):
        return chunked_scores(head, hidden, labels, temperature, top_k, top_p, with_entropy, chunk)
    return scored_logprobs(head(hidden), labels, temperature, top_k, top_p, with_entropy)


class Scorer:
    """log q(labels) and q's entropy of one model call. `select` takes the positions that predict `labels` out of
    the output layer's (..., T, X) result (X = V logits, or d hidden units when chunked), e.g. `z[:, :-1]`.

        with scorer.inside(model):
            out = model(...)
        logprobs, entropy = scorer.result(out.logits)
    """

    def __init__(self, labels: Tensor, select: Callable[[Tensor], Tensor], temperature: float, top_k: int = 0,
                 top_p: float = 1.0, with_entropy: bool = False, chunk: int = 0) -> None:
        self.labels, self.select, self.temperature, self.top_k, self.top_p = labels, select, temperature, top_k, top_p
        self.with_entropy, self.chunk = with_entropy, chunk
        self._scored: tuple[Tensor, Tensor | None] | None = None

    def inside(self, model: nn.Module):
        """A context around the call whose output layer predicts the labels: chunked scoring in it, where asked
        for and possible (`chunks_head`)."""
        return self._chunked(model) if self.chunk > 0 and chunks_head(model) else nullcontext()

    @contextmanager
    def _chunked(self, model: nn.Module) -> Iterator[None]:
        head = model.get_output_embeddings()

        def score(hidden: Tensor) -> Tensor:  # (..., T, d) -> an empty (..., T, 0) "logits"
            self._scored = chunked_scores(head, self.select(hidden), self.labels, self.temperature, self.top_k,
                                          self.top_p, self.with_entropy, self.chunk)
            return hidden[..., :0]

        head.forward = score
        try:
            yield
        finally:
            del head.forward  # the class's forward again

    def result(self, logits: Tensor) -> tuple[Tensor, Tensor | None]:
        """(log q (labels' shape), entropy or None), from what the call returned as `logits`."""
        if self._scored is not None:
            scored, self._scored = self._scored, None
            return scored
        return scored_logprobs(self.select(logits), self.labels, self.temperature, self.top_k, self.top_p,
                               self.with_entropy)
