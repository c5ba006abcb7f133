"""Variable-length ("varlen") causal attention for packed documents, on any device, with torch sdpa.

Flash-attention's varlen kernels take one long row and the document boundaries (`cu_seqlens`) and
compute attention only inside each document. Without them (CPU, or no flash-attn installed), the
usual fallback is a dense (L x L) block-diagonal mask: correct, but it still computes every masked
score, so packing long rows costs L^2 per row instead of sum_i len_i^2, and packing stops paying
off. This module registers the same varlen semantics with transformers' `AttentionInterface`: one
causal `scaled_dot_product_attention` call per document, no mask tensor at all.

Used by packed SFT (`rlvr.algorithms.packing.packed_logits(route="varlen")`) and the packed RL forward
(`rlvr.models.forward.packed_call`); the model's configured attention is swapped in only for that
forward pass and restored afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface, PreTrainedModel

VARLEN_ATTENTION = "rlvr_varlen_sdpa"
SEGMENTS_KWARG = "packed_segments"  # forwarded by transformers from model(...) down to attention
REPLACES = ("eager", "sdpa")  # the implementations varlen sdpa stands in for; flash-attention has its own varlen


def varlen_sdpa_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                          attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          sliding_window: int | None = None, **kwargs) -> tuple[Tensor, None]:
    """query (1, H, N, D), key/value (1, Hkv, N, D) -> output (1, N, H, D), causal inside each segment.

    `kwargs[SEGMENTS_KWARG]` holds the segment start offsets followed by N (like `cu_seqlens`).
    """
    bounds: Sequence[int] | None = kwargs.get(SEGMENTS_KWARG)
    if bounds is None:
        raise ValueError(f"{VARLEN_ATTENTION} needs `{SEGMENTS_KWARG}` (segment boundaries); "
                         "call the model through rlvr.algorithms.packing.packed_logits or "
                         "rlvr.models.forward.packed_call")
    if query.shape[0] != 1:
        raise ValueError(f"{VARLEN_ATTENTION} takes one flattened row, got batch size {query.shape[0]}")
    longest = max(e - s for s, e in zip(bounds[:-1], bounds[1:]))
    if sliding_window is not None and longest > sliding_window:
        raise ValueError(f"a packed document has {longest} tokens, more than the model's sliding window "
                         f"({sliding_window}); varlen attention does not implement the window")
    gqa = key.shape[1] != query.shape[1]
    lengths = [e - s for s, e in zip(bounds[:-1], bounds[1:])]
    # split, not slicing: the backward of a split is one cat, while each slice's backward would
    # write a zero-filled gradient of the full (1, H, N, D) tensor
    outs = [F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scaling,
                                           enable_gqa=gqa)
            for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2), value.split(lengths, 2))]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None  # (1, N, H, D)


AttentionInterface.register(VARLEN_ATTENTION, varlen_sdpa_attention)


def segment_bounds(position_ids: Tensor) -> list[int]:
    """Flattened position ids (N,) that restart at 0 in every segment -> [start_0, start_1, ..., N]."""
    starts = (position_ids == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        raise ValueError("position ids must start at 0 and restart at 0 in every packed document")
    return starts + [position_ids.numel()]


def varlen_attention(model: PreTrainedModel):
    """Run `model` with varlen attention inside the block; its own implementation is restored after. A
    gradient-checkpointed model recomputes with it too where checkpointing was enabled with
    `same_attention_on_recompute` (`rlvr.models.placement.load_policy` does)."""
    return _attention(model, VARLEN_ATTENTION)


def same_attention_on_recompute(model: PreTrainedModel) -> Callable[[], tuple]:
    """A `context_fn` for torch's non-reentrant checkpoint: the recomputation in the backward pass runs with
    the attention implementation the original forward ran with. `varlen_attention` swaps varlen sdpa in for
    one forward call only, so without this a checkpointed layer of a packed row would be recomputed with the
    model's own sdpa / eager attention, across the packed sequences (torch then refuses: the saved tensors
    differ)."""
    def context_fn() -> tuple:
        return nullcontext(), _attention(model, model.config._attn_implementation)
    return context_fn


@contextmanager
def _attention(model: PreTrainedModel, implementation: str) -> Iterator[None]:
    previous = model.config._attn_implementation
    model.config._attn_implementation = implementation
    try:
        yield
    finally:
        model.config._attn_implementation = previous


def uses_varlen(model: PreTrainedModel) -> bool:
    """Whether packed rows of `model` need varlen sdpa swapped in (eager / sdpa models). Other
    implementations (flash-attention) take the position ids alone: transformers derives the boundaries
    from them (its own varlen path)."""
    return model.config._attn_implementation in (*REPLACES, VARLEN_ATTENTION)


def forward_packed(model: PreTrainedModel, input_ids: Tensor, position_ids: Tensor, varlen: bool, **kwargs):
    """`model` on one flattened row of packed sequences, input_ids and position_ids (1, N) with positions
    restarting at 0 in each sequence. `varlen`: varlen sdpa with the segment bounds for this call; else the
    position ids alone (flash-attention's varlen path needs batch size 1, as here)."""
    if not varlen:
        return model(input_ids=input_ids, position_ids=position_ids, use_cache=False, **kwargs)
    with varlen_attention(model):
        return model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                     **{SEGMENTS_KWARG: segment_bounds(position_ids.reshape(-1))}, **kwargs)
