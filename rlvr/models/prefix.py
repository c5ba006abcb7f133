"""The training forward with shared prompts: a group's prompt is computed once, not once per completion.

GRPO samples n completions per prompt, and the plain training forward (and the pi_old / pi_ref
passes) runs the prompt again in every one of the n rows. Here the distinct prompts of a micro-batch
run once into a key/value cache, the cache is expanded to the rows (an index_select, whose backward
adds the rows' gradients into the shared prompt: the gradient n separate copies would get), and the
completions run on top of it. The logits are the plain forward's up to float rounding
(tests/rollout/test_prefix.py bounds the difference and checks the gradients); the tokens computed
drop from B * L to U * P + B * S (U distinct prompts, P the longest prompt minus one, S the longest
completion plus one).

The last prompt token travels with the completion: its logits predict the first completion token,
so the prompt pass needs no logits at all and every label's logits come from one forward.

This is the "prefix sharing" of Prefix Grouper (Liu et al. 2025) done with the model's own cache
rather than a custom attention kernel, so it works for any Hugging Face causal LM whose cache is
the plain `DynamicCache` (full attention, sdpa or eager kernels, no gradient checkpointing, which
switches the cache off in training); `shares_prefix` says when that holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule
from transformers import DynamicCache

from rlvr.models.hf import cache_kwarg

# Share only when it removes at least this share of the token slots: below it, the second forward
# call's fixed cost eats the saving (measured on the demo model, docs/performance.md).
MIN_SAVING = 0.2
KERNELS = ("sdpa", "eager")  # attention kernels whose 2D masks may have holes (padding after a prompt)


@dataclass
class PrefixPlan:
    prefix_ids: Tensor  # (U, P) the distinct prompts minus their last token, right-padded
    prefix_mask: Tensor  # (U, P) bool, True on real tokens
    rows: Tensor  # (B,) each row's prompt: an index into the U prompts
    suffix_ids: Tensor  # (B, S) last prompt token + completion, right-padded
    suffix_mask: Tensor  # (B, S) bool
    positions: Tensor  # (B, S) position ids of the suffix tokens
    columns: Tensor  # (B, W) for each label column of the batch, its position among the S - 1 suffix labels


def plan_shared_prefix(input_ids: Tensor, attention_mask: Tensor, mask: Tensor, start: int,
                       min_saving: float | None = None) -> PrefixPlan | None:
    """How to run a right-padded batch (`rlvr.rollout.batch` layout: input_ids, attention_mask (B, L),
    completion mask (B, W), W = L - 1 - start) with each distinct prompt computed once; None when
    sharing saves less than `min_saving` (default `MIN_SAVING`) of the B * L token slots, or a prompt
    has a single token (its prefix would be empty)."""
    B, L = input_ids.shape
    min_saving = MIN_SAVING if min_saving is None else min_saving
    if start < 1:  # the shortest prompt has one token
        return None
    prefix_len = start + mask.int().argmax(-1)  # (B,) prompt length - 1 (first completion label column + start)
    total = attention_mask.sum(-1)  # (B,) real tokens per row
    P, S = int(prefix_len.max()), int((total - prefix_len).max())
    col = torch.arange(P, device=input_ids.device)
    keyed = torch.where(col < prefix_len[:, None], input_ids[:, :P], -1)  # -1 past a prefix's end: lengths differ
    distinct, rows = torch.unique(keyed, dim=0, return_inverse=True)  # (U, P), (B,)
    if distinct.shape[0] * P + B * S > (1 - min_saving) * B * L:
        return None
    positions = prefix_len[:, None] + torch.arange(S, device=input_ids.device)  # (B, S)
    label_col = torch.arange(L - 1 - start, device=input_ids.device)  # (W,)
    return PrefixPlan(
        prefix_ids=distinct.clamp(min=0), prefix_mask=distinct >= 0, rows=rows,
        suffix_ids=input_ids.gather(1, positions.clamp(max=L - 1)), suffix_mask=positions < total[:, None],
        positions=positions,
        # label column w of row i is the token at w + start + 1, predicted by suffix position w + start - prefix_len
        columns=(label_col + start - prefix_len[:, None]).clamp(0, S - 2))


def shares_prefix(model) -> bool:
    """Whether `model`'s forward can continue from an expanded `DynamicCache` with gradient. Not under
    FSDP2: its forward and backward run collectives per module call, and whether sharing pays is
    decided per micro-batch, so two ranks could call their modules a different number of times and
    wait on each other for ever."""
    config = model.config
    return (config._attn_implementation in KERNELS and not _checkpointing(model) and not isinstance(model, FSDPModule)
            and full_attention_only(config))


def full_attention_only(config) -> bool:
    """Every layer attends to every earlier token: no sliding-window layers (hybrids say so in layer_types) and
    no recurrent state (state-space models). The shared-prompt cache and packed rows both rely on it."""
    return (all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ["full_attention"])
            and getattr(config, "model_type", "") not in _RECURRENT)


def _checkpointing(model) -> bool:
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model: its base's flag
    if hasattr(model, "is_activation_checkpointing"):  # the name since transformers 5.2x (the old one warns)
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


# state-space and hybrid models: their cache is not a list of keys and values (hybrids also say so in layer_types)
_RECURRENT = ("mamba", "mamba2", "falcon_mamba", "jamba", "bamba", "zamba", "zamba2", "falcon_h1", "rwkv")


def shared_prefix_logits(model, plan: PrefixPlan, suffix_call: Callable[[nn.Module], Any]) -> Tensor:
    """Logits (B, S, V) of the suffix positions: position j predicts suffix token j + 1 (the last, past the end).
    `suffix_call(model)`: a context around the suffix's call (`rlvr.models.head.Scorer.inside`)."""
    cache = DynamicCache()
    kwarg = cache_kwarg(model)
    model(input_ids=plan.prefix_ids, attention_mask=plan.prefix_mask.long(), use_cache=True, logits_to_keep=1,
          **{kwarg: cache})
    cache.batch_select_indices(plan.rows)  # (U, ...) -> (B, ...); differentiable
    attention = torch.cat([plan.prefix_mask[plan.rows], plan.suffix_mask], dim=1).long()  # (B, P + S)
    with suffix_call(model):
        out = model(input_ids=plan.suffix_ids, attention_mask=attention, position_ids=plan.positions,
                    use_cache=True, **{kwarg: cache})
    return out.logits

