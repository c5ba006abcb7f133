"""The training forward of a causal LM over rollout rows: per-token log-probs (and entropies) of the completion
tokens under the distribution they were sampled from, with gradient (`policy_logprobs`) or in micro-batches
without (`cached_logprobs`); the prompt shared by a group computed once (`rlvr.models.prefix`) or the rows packed
without padding (`packed_logprobs`, `rlvr.models.varlen`), whichever costs less (`packs`).

The rows are `rlvr.rollout.batch.RolloutBatch`es (the `Rows` protocol here): each is prompt + completion,
right-padded; per-token tensors (B, W) cover label positions `start + 1 .. L - 1`.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from rlvr.models.head import Scorer
from rlvr.models.hf import attention_heads
from rlvr.models.prefix import PrefixPlan, full_attention_only, plan_shared_prefix, shared_prefix_logits, shares_prefix
from rlvr.models.varlen import forward_packed, uses_varlen


class Rows(Protocol):
    """What the forward reads of a batch of rows (`rlvr.rollout.batch.RolloutBatch`)."""

    input_ids: Tensor  # (B, L) prompt + completion, right-padded
    attention_mask: Tensor  # (B, L) bool, True on real tokens
    mask: Tensor  # (B, W) bool, True on completion tokens
    start: int  # logits of positions start .. L-2 predict the W labels

    def __len__(self) -> int: ...

    def select(self, index: Tensor | slice) -> "Rows": ...


def policy_logprobs(model, batch: Rows, temperature: float, with_entropy: bool = False,
                    share_prefix: bool = True, packing: str = "never", top_k: int = 0, top_p: float = 1.0,
                    chunk: int = 0) -> tuple[Tensor, Tensor | None]:
    """log pi(label) per position (B, W) and, optionally, the entropy (B, W) without gradient.

    pi is the distribution the completions were sampled from, processed by the sampling temperature,
    top-k and top-p (`scored_logprobs`), which is what the engines report (`SCORED_LOGPROBS`): the
    importance ratio then compares the trained policy with the sampler like for like. Rows that
    share a prompt (a GRPO group) have it computed once (`rlvr.models.prefix`) where that saves work
    and `share_prefix` allows it. `packing` (`train.packing`: auto, always, never) runs the rows without
    padding instead (`packed_logprobs`), always or where that costs less (`packs`). With either,
    positions outside the completions (`batch.mask` False) hold 0. `chunk` > 0 (`train.logprob_chunk`): the
    output layer scores that many positions at a time, never holding the (positions, V) logits
    (`rlvr.models.head`).
    """
    plan = plan_shared_prefix(batch.input_ids, batch.attention_mask, batch.mask, batch.start) \
        if share_prefix and packing != "always" and shares_prefix(model) else None
    if packs(model.config, batch, packing, plan):
        return packed_logprobs(model, batch, temperature, with_entropy, top_k, top_p, chunk)
    drop_last = lambda z: z[:, :-1]  # noqa: E731  the last position predicts past the end
    if plan is None:
        keep = batch.input_ids.shape[1] - batch.start  # positions start .. L-1
        scorer = Scorer(batch.input_ids[:, batch.start + 1 :], drop_last, temperature, top_k, top_p, with_entropy,
                        chunk)  # labels (B, W)
        with scorer.inside(model):
            out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                        logits_to_keep=keep, use_cache=False)
        logprobs, entropy = scorer.result(out.logits)  # (B, W)
    else:
        scorer = Scorer(plan.suffix_ids[:, 1:], drop_last, temperature, top_k, top_p, with_entropy, chunk)
        logprobs, entropy = scorer.result(shared_prefix_logits(model, plan, scorer.inside))  # (B, S - 1)
        logprobs = _to_columns(logprobs, plan.columns, batch.mask)  # suffix label positions -> (B, W) columns
        entropy = None if entropy is None else _to_columns(entropy, plan.columns, batch.mask)
    return logprobs, entropy


def packed_logprobs(model, batch: Rows, temperature: float, with_entropy: bool = False, top_k: int = 0,
                    top_p: float = 1.0, chunk: int = 0) -> tuple[Tensor, Tensor | None]:
    """`policy_logprobs` without padding (`packed_call`): logits only at the positions that predict a
    completion token, so the forward costs the batch's real tokens, not B x its longest row."""
    keep = completion_index(batch)  # (M,)
    labels = batch.input_ids[:, batch.start + 1 :][batch.mask]  # (M,)
    scorer = Scorer(labels, lambda z: z[0], temperature, top_k, top_p, with_entropy, chunk)  # one packed row
    with scorer.inside(model):
        out = packed_call(model, batch, logits_to_keep=keep)
    logprobs, entropy = scorer.result(out.logits)  # (M,)
    return to_completions(logprobs, batch.mask), None if entropy is None else to_completions(entropy, batch.mask)


PACKING_MARGIN = 0.8  # "auto" packs when that costs under this share of the layout it replaces


def packs(config, batch: Rows, packing: str, plan: PrefixPlan | None = None) -> bool:
    """Whether to run `batch` packed under `train.packing`: never without a completion token, nor for a model
    with recurrent or sliding-window layers (`full_attention_only`; "always" raises there); "auto"
    when the packed forward's estimated FLOPs are under PACKING_MARGIN x those of the layout it replaces
    (the shared-prompt one of `plan`, else the padded one). The margin covers what FLOPs miss, e.g. one
    attention call per sequence. Attention scores are counted as the kernels compute them: every one of a
    masked (padded or shared-prompt) layout, the causal half of a packed sequence."""
    if packing == "never" or not bool(batch.mask.any()):
        return False
    lengths = batch.attention_mask.sum(-1).double()  # (B,)
    window = getattr(config, "sliding_window", None)
    if not full_attention_only(config) or (window is not None and int(lengths.max()) > window):
        if packing == "always":
            raise ValueError(f"train.packing=always: this {getattr(config, 'model_type', '')} model has recurrent or "
                             "sliding-window layers, which packed rows would let see across sequences; use auto or never")
        return False  # auto: the padded or shared-prompt forward
    if packing == "always":
        return True
    packed = forward_flops(config, float(lengths.sum()), float((lengths * (lengths + 1) / 2).sum()))
    B, L = batch.input_ids.shape
    if plan is None:
        other = forward_flops(config, B * L, B * L * L)
    else:
        (U, P), S = plan.prefix_ids.shape, plan.suffix_ids.shape[1]
        other = forward_flops(config, U * P + B * S, U * P * P + B * S * (P + S))
    return packed < PACKING_MARGIN * other


def forward_flops(config, tokens: float, scores: float) -> float:
    """Rough forward FLOPs of a decoder: per layer, 2 x its projection weights per token (q and o: d x the
    heads' width; k and v: d x the kv heads' width; the MLP's three d x f) and 4 x the heads' width per
    attention score (q.k and p.v). `config`: a transformers config."""
    d, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads, head_dim = attention_heads(config)
    ffn = getattr(config, "intermediate_size", None) or 4 * d
    per_token = 2 * (2 * d * heads * head_dim + 2 * d * kv_heads * head_dim + 3 * d * ffn)
    return layers * (tokens * per_token + scores * 4 * heads * head_dim)


def packed_call(model, batch: Rows, **kwargs):
    """`model` (a causal LM or its base model) on the batch's real tokens as one row of B packed sequences.

    Right padding puts every real token at its row's column, so the column is its position id. The
    attention stays inside each sequence: varlen sdpa (`rlvr.models.varlen`, one causal call per
    sequence) for eager / sdpa models, flash-attention's own varlen path (from the position ids) otherwise.
    """
    B, L = batch.input_ids.shape
    real = batch.attention_mask  # (B, L) bool
    positions = torch.arange(L, device=real.device).expand(B, L)[real]  # (N,)
    return forward_packed(model, batch.input_ids[real][None], positions[None], uses_varlen(model), **kwargs)


def completion_index(batch: Rows) -> Tensor:
    """(M,) the packed-row index (`packed_call`) of the position predicting each completion token, in
    `batch.mask`'s row-major order: row b starts at the sum of the earlier rows' lengths, and its
    position start + w predicts label column w."""
    lengths = batch.attention_mask.sum(-1)  # (B,)
    offsets = torch.cumsum(lengths, 0) - lengths  # (B,)
    columns = torch.arange(batch.mask.shape[1], device=lengths.device)  # (W,)
    return (offsets[:, None] + batch.start + columns)[batch.mask]


def to_completions(values: Tensor, mask: Tensor) -> Tensor:
    """values (M,) of the completion tokens in row-major order -> (B, W) on `mask`, 0 elsewhere."""
    return values.new_zeros(mask.shape).masked_scatter(mask, values)


def _to_columns(values: Tensor, columns: Tensor, mask: Tensor) -> Tensor:
    """values (B, S - 1) at suffix label positions -> (B, W) at the batch's label columns, 0 off `mask`."""
    return torch.where(mask, values.gather(1, columns), torch.zeros((), dtype=values.dtype, device=values.device))


@torch.no_grad()
def cached_logprobs(model, batch: Rows, temperature: float, micro_batch_size: int,
                    packing: str = "never", top_k: int = 0, top_p: float = 1.0, chunk: int = 0) -> Tensor:
    """log-probs (B, W) of the whole batch under `model`, in micro-batches, without gradient."""
    out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=batch.mask.device)
    for lo in range(0, len(batch), micro_batch_size):
        part = batch.select(slice(lo, lo + micro_batch_size))
        logprobs, _ = policy_logprobs(model, part, temperature, packing=packing, top_k=top_k, top_p=top_p,
                                      chunk=chunk)
        out[lo : lo + micro_batch_size, : logprobs.shape[1]] = logprobs
    return out
