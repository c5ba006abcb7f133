"""Rollout batches as tensors, and the policy forward that turns them into per-token log-probs.

Layout: each row is prompt + completion, right-padded to the longest row (B, L). Per-token tensors
(log-probs, masks, old/reference log-probs) cover label positions `start+1 .. L-1`, where `start + 1`
is the shortest prompt's length: every completion token of every row lies in that window, and the
logits of earlier positions (prompt only) are never computed (`logits_to_keep`). Right padding needs
no custom attention mask: a causal mask never lets a real token see the padding after it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from rlvr.core import entropy_from_logits, keep_tokens, process_logits, token_logprobs
from rlvr.models.varlen import forward_packed, uses_varlen
from rlvr.rollout.prefix import (PrefixPlan, full_attention_only, plan_shared_prefix, shared_prefix_logits,
                                 shares_prefix)


@dataclass
class RolloutBatch:
    input_ids: Tensor  # (B, L) prompt + completion, right-padded
    attention_mask: Tensor  # (B, L) bool, True on real tokens
    mask: Tensor  # (B, W) bool, True on the completion tokens that train (the model's); W = L - 1 - start
    start: int  # logits of positions start .. L-2 predict the W labels
    advantages: Tensor | None  # (B,) per sequence, or (B, W) per token
    rewards: Tensor  # (B,)
    old_logprobs: Tensor | None = None  # (B, W) log pi_old, cached when mu > 1 or several minibatches
    ref_logprobs: Tensor | None = None  # (B, W) log pi_ref, when beta > 0
    returns: Tensor | None = None  # (B, W) value targets (advantage gae)
    old_values: Tensor | None = None  # (B, W) V at sampling time (advantage gae)
    is_weights: Tensor | None = None  # (B, W) pi_old / pi_sampler correction (algorithm.is_cap)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: Tensor | slice) -> "RolloutBatch":
        """Rows `index`, right padding trimmed to the longest selected row."""
        rows = {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}
        picked = {k: v[index] for k, v in rows.items()}
        length = int(picked["attention_mask"].sum(-1).max())  # longest real row
        width = length - 1 - self.start
        for key, value in picked.items():
            if key in ("input_ids", "attention_mask"):
                picked[key] = value[:, :length]
            elif value.dim() == 2:  # per-token tensors (B, W)
                picked[key] = value[:, :width]
        return replace(self, **picked)

    def partition(self, where: Tensor) -> tuple["RolloutBatch | None", "RolloutBatch | None"]:
        """(the rows where `where` (B,) bool is False, those where it is True), None for an empty side."""
        if not where.any():
            return self, None
        if where.all():
            return None, self
        return self.select(torch.nonzero(~where).squeeze(-1)), self.select(torch.nonzero(where).squeeze(-1))

    def to(self, device: torch.device) -> "RolloutBatch":
        """Every tensor field on `device` (the policy's): the one place batch tensors leave the CPU."""
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self)
                 if isinstance(getattr(self, f.name), Tensor)}
        return replace(self, **moved)


def encode_prompt_completion(tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str
                             ) -> tuple[list[int], list[int]]:
    """Token ids of the prompt and of the completion (EOS appended), encoded separately.

    Separately, because that is how the sequence exists at generation time: the prompt is encoded,
    the completion is sampled token by token after it. Encoding the joined text could merge tokens
    across the boundary and score a sequence the model never produces.
    """
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token; completions must end with one")
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return list(prompt_ids), list(completion_ids)


def pad_right(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Ragged id lists -> (ids (B, T), attention_mask (B, T) bool), padded on the right."""
    lengths = torch.tensor([len(s) for s in seqs])  # (B,)
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]  # (B, T)
    ids = torch.full(mask.shape, pad_id, dtype=torch.long)
    ids[mask] = torch.tensor([t for s in seqs for t in s], dtype=torch.long)  # row-major: each row's run in order
    return ids, mask


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int
         ) -> tuple[Tensor, Tensor, Tensor, int]:
    """Token id lists -> (input_ids (B, L), attention_mask (B, L), completion mask (B, W), start)."""
    if any(not c for c in completions):
        raise ValueError("a completion has no tokens; the engine must return at least one token")
    if any(not p for p in prompts):
        raise ValueError("a prompt has no tokens; the first completion token needs a position to predict it")
    ids, attn = pad_right([[*p, *c] for p, c in zip(prompts, completions)], pad_id)  # (B, L)
    prompt_len = torch.tensor([len(p) for p in prompts])  # (B,)
    start = int(prompt_len.min()) - 1
    # label column j predicts token start + 1 + j: a completion token when it lies in [len(p), len(seq))
    position = torch.arange(start + 1, ids.shape[1])[None, :]  # (1, W)
    mask = (position >= prompt_len[:, None]) & attn[:, start + 1 :]  # (B, W)
    return ids, attn, mask, start


def build_batch(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                advantages: Tensor | None, rewards: Tensor, pad_id: int,
                loss_masks: Sequence[Sequence[int]] | None = None) -> RolloutBatch:
    """Token ids of prompts and completions (n samples of a prompt contiguous) -> a right-padded RolloutBatch.
    `loss_masks` (one 0/1 per completion token; episodes of an environment, `rlvr.rollout.episode`) clears the
    environment's tokens from `mask`, so that only the model's tokens train (`rlvr.core.keep_tokens`)."""
    ids, attn, mask, start = pack(prompt_ids, completion_ids, pad_id)
    if loss_masks is not None:
        mask = keep_tokens(mask, torch.tensor([k for row in loss_masks for k in row], dtype=torch.bool))
    return RolloutBatch(ids, attn, mask, start, advantages, rewards)


def completion_values(mask: Tensor, values: Sequence[Sequence[float]]) -> Tensor:
    """Per-completion-token values (N lists, one per token `mask` keeps) -> (B, W) float32 on those positions of
    `mask`, 0 elsewhere.

    A row's kept tokens lie in `mask` in token order (one contiguous run, or a run with the environment's
    tokens cleared), so a row-major assignment lines each value up with its label column.
    """
    lengths = mask.sum(-1).tolist()
    if [len(v) for v in values] != lengths:
        raise ValueError("per-token values do not match the completion lengths of the batch")
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    out[mask] = torch.tensor([x for v in values for x in v], dtype=torch.float32, device=mask.device)
    return out


def micro_batches(attention_mask: Tensor, rows: int, tokens: int) -> list[Tensor]:
    """Row indices of each micro-batch of a minibatch (attention_mask (B, L)).

    tokens = 0: consecutive groups of `rows` rows. tokens > 0: rows sorted by length (longest first)
    and packed greedily so that each micro-batch's padded size (rows x its longest row, what the
    forward computes once `select` trims the padding) stays within `tokens`; a row longer than the
    budget goes alone. Every row lands in exactly one micro-batch.
    """
    B = attention_mask.shape[0]
    if tokens <= 0:
        return [torch.arange(lo, min(lo + rows, B)) for lo in range(0, B, rows)]
    lengths = attention_mask.sum(-1)  # (B,)
    order = torch.sort(lengths, descending=True, stable=True).indices.tolist()
    groups: list[list[int]] = []
    longest = 0
    for i in order:
        if groups and (len(groups[-1]) + 1) * longest <= tokens:
            groups[-1].append(i)
        else:  # descending order: the first row of a group is its longest
            groups.append([i])
            longest = int(lengths[i])
    return [torch.tensor(g) for g in groups]


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


def policy_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False,
                    share_prefix: bool = True, packing: str = "never", top_k: int = 0, top_p: float = 1.0
                    ) -> tuple[Tensor, Tensor | None]:
    """log pi(label) per position (B, W) and, optionally, the entropy (B, W) without gradient.

    pi is the distribution the completions were sampled from, processed by the sampling temperature,
    top-k and top-p (`scored_logprobs`), which is what the engines report (`SCORED_LOGPROBS`): the
    importance ratio then compares the trained policy with the sampler like for like. Rows that
    share a prompt (a GRPO group) have it computed once (`rlvr.rollout.prefix`) where that saves work
    and `share_prefix` allows it. `packing` (`train.packing`: auto, always, never) runs the rows without
    padding instead (`packed_logprobs`), always or where that costs less (`packs`). With either,
    positions outside the completions (`batch.mask` False) hold 0.
    """
    plan = plan_shared_prefix(batch.input_ids, batch.attention_mask, batch.mask, batch.start) \
        if share_prefix and packing != "always" and shares_prefix(model) else None
    if packs(model.config, batch, packing, plan):
        return packed_logprobs(model, batch, temperature, with_entropy, top_k, top_p)
    if plan is None:
        keep = batch.input_ids.shape[1] - batch.start  # positions start .. L-1
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                    logits_to_keep=keep, use_cache=False)
        logits = out.logits[:, :-1]  # (B, W, V): drop the last position, it predicts past the end
        labels = batch.input_ids[:, batch.start + 1 :]  # (B, W)
    else:
        logits = shared_prefix_logits(model, plan)  # (B, S - 1, V)
        labels = plan.suffix_ids[:, 1:]  # (B, S - 1)
    logprobs, entropy = scored_logprobs(logits, labels, temperature, top_k, top_p, with_entropy)
    if plan is not None:  # suffix label positions -> the batch's (B, W) label columns
        logprobs = _to_columns(logprobs, plan.columns, batch.mask)
        entropy = None if entropy is None else _to_columns(entropy, plan.columns, batch.mask)
    return logprobs, entropy


def packed_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False, top_k: int = 0,
                    top_p: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """`policy_logprobs` without padding (`packed_call`): logits only at the positions that predict a
    completion token, so the forward costs the batch's real tokens, not B x its longest row."""
    keep = completion_index(batch)  # (M,)
    logits = packed_call(model, batch, logits_to_keep=keep).logits[0]  # (M, V)
    labels = batch.input_ids[:, batch.start + 1 :][batch.mask]  # (M,)
    logprobs, entropy = scored_logprobs(logits, labels, temperature, top_k, top_p, with_entropy)
    return to_completions(logprobs, batch.mask), None if entropy is None else to_completions(entropy, batch.mask)


PACKING_MARGIN = 0.8  # "auto" packs when that costs under this share of the layout it replaces


def packs(config, batch: RolloutBatch, packing: str, plan: PrefixPlan | None = None) -> bool:
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
    d, layers, heads = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    ffn = getattr(config, "intermediate_size", None) or 4 * d
    per_token = 2 * (2 * d * heads * head_dim + 2 * d * kv_heads * head_dim + 3 * d * ffn)
    return layers * (tokens * per_token + scores * 4 * heads * head_dim)


def packed_call(model, batch: RolloutBatch, **kwargs):
    """`model` (a causal LM or its base model) on the batch's real tokens as one row of B packed sequences.

    Right padding puts every real token at its row's column, so the column is its position id. The
    attention stays inside each sequence: varlen sdpa (`rlvr.models.varlen`, one causal call per
    sequence) for eager / sdpa models, flash-attention's own varlen path (from the position ids) otherwise.
    """
    B, L = batch.input_ids.shape
    real = batch.attention_mask  # (B, L) bool
    positions = torch.arange(L, device=real.device).expand(B, L)[real]  # (N,)
    return forward_packed(model, batch.input_ids[real][None], positions[None], uses_varlen(model), **kwargs)


def completion_index(batch: RolloutBatch) -> Tensor:
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
def cached_logprobs(model, batch: RolloutBatch, temperature: float, micro_batch_size: int,
                    packing: str = "never", top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """log-probs (B, W) of the whole batch under `model`, in micro-batches, without gradient."""
    out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=batch.mask.device)
    for lo in range(0, len(batch), micro_batch_size):
        part = batch.select(slice(lo, lo + micro_batch_size))
        logprobs, _ = policy_logprobs(model, part, temperature, packing=packing, top_k=top_k, top_p=top_p)
        out[lo : lo + micro_batch_size, : logprobs.shape[1]] = logprobs
    return out
