"""Cascade attention: decoding steps of GRPO groups that read each shared prompt's keys/values once.

The n completions of a prompt attend to the same prompt keys. Stored once per group (not copied to
each of the n rows), a decoding step's attention is computed in two parts and merged exactly (vLLM's
"cascade attention", FlashInfer's shared-prefix decoding):
1. the live rows of a group (and, with grouped-query attention, the query heads of a key/value head)
   attend together to their group's prompt: one small attention per (group, key/value head) whose
   queries are the group's rows, with the group's left padding masked -> out1, lse1;
2. each row attends to its own completion keys (all rows share the column index: no mask) -> out2, lse2;
3. out = (out1 * e^(lse1 - m) + out2 * e^(lse2 - m)) / (e^(lse1 - m) + e^(lse2 - m)), m = max(lse1, lse2):
   softmax over [prompt ; completion] keys, as the two softmax sums weigh the two parts.
The prompt's keys/values are read once per group per step instead of n times.

Rows leave the batch when they finish (the engine moves live rows into the holes), so a group's rows are
scattered: each step `group_slots` lays them into fixed slots per group (slot g * width + j), once for
all layers. The kernel is transformers' attention-function hook (`CASCADE`, registered here): the engine
switches `config._attn_implementation` to it for its decoding steps only (`decoding_kernel`) and passes the
step's `SharedPrefix` as a keyword argument of the forward, which transformers hands down to the attention
function (as it does flash-attention's sequence lengths).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from transformers import AttentionInterface

CASCADE = "rlvr_cascade"  # the name under which transformers finds `cascade_attention_forward`
# attention-function arguments of models whose attention is not plain softmax attention (sinks are `s_aux`)
_NOT_PLAIN = ("sliding_window", "softcap", "s_aux", "position_bias")


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, scaling: float, bias: Tensor | None = None
                       ) -> tuple[Tensor, Tensor]:
    """Softmax attention and the log-sum-exp of its scores, by torch's CPU flash kernel. q (B, H, Q, d),
    k/v (B, H, T, d), bias additive, broadcastable to (B, H, Q, T) (-inf on masked keys). Returns out
    (B, H, Q, d) in q's dtype and lse (B, H, Q) in float32. (Plain products and `logsumexp` are as fast in
    float32 on the benchmark shape and slower in bfloat16.)"""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias, scale=scaling)


def merge_attention(out1: Tensor, lse1: Tensor, out2: Tensor, lse2: Tensor) -> Tensor:
    """Attention over the union of two disjoint key sets from each set's attention: out (..., d) and
    lse (...,) per part. Each part weighs by its share of the softmax sum, e^lse / (e^lse1 + e^lse2);
    m = max(lse1, lse2) keeps the exponents <= 0. Computed in float32; returns out1's dtype."""
    m = torch.maximum(lse1, lse2)
    w1, w2 = (lse1 - m).exp()[..., None], (lse2 - m).exp()[..., None]
    return ((out1.float() * w1 + out2.float() * w2) / (w1 + w2)).to(out1.dtype)


def group_slots(group_of_row: Tensor, num_groups: int, width: int) -> tuple[Tensor, Tensor]:
    """Lay rows out by group: row r of group g takes slot g * width + j, j its rank among g's rows (in row
    order). width: at least the largest group. Returns slot_of_row (R,) and row_of_slot (G * width,);
    empty slots point at row 0 (their results are never read)."""
    order = torch.argsort(group_of_row, stable=True)  # (R,) rows sorted by group
    sizes = torch.bincount(group_of_row, minlength=num_groups)  # (G,)
    starts = sizes.cumsum(0) - sizes  # (G,) first sorted position of each group
    ranked = torch.arange(order.numel(), device=order.device) - starts[group_of_row[order]]  # (R,) j, sorted order
    slot_of_row = torch.empty_like(order)
    slot_of_row[order] = group_of_row[order] * width + ranked
    row_of_slot = torch.zeros(num_groups * width, dtype=torch.long, device=order.device)
    row_of_slot[slot_of_row] = torch.arange(order.numel(), device=order.device)
    return slot_of_row, row_of_slot


def prefix_bias(prefix_mask: Tensor) -> Tensor | None:
    """The additive mask of the prompts' keys, (G, 1, 1, P) float32 (-inf on left padding), or None when no
    prompt is padded (the kernel then runs unmasked). Made once per decoding step, for all layers."""
    if bool(prefix_mask.all()):
        return None
    bias = torch.zeros(prefix_mask.shape, dtype=torch.float32, device=prefix_mask.device)
    return bias.masked_fill(~prefix_mask, float("-inf"))[:, None, None, :]


def cascade_attention(q: Tensor, prefix_k: Tensor, prefix_v: Tensor, bias: Tensor | None,
                      slots: tuple[Tensor, Tensor], suffix_k: Tensor, suffix_v: Tensor, scaling: float) -> Tensor:
    """One decoding step's attention over [group prompt ; own completion] keys.

    q (R, Hq, 1, d): one query per row. prefix_k/v (G, Hk, P, d): each group's prompt, stored once.
    bias: `prefix_bias` of the prompts' (G, P) mask (None: no padding). slots: `group_slots` of the rows'
    groups. suffix_k/v (R, Hk, S, d): each row's completion keys (S >= 1). Hq = Hk * heads per key/value head.
    Returns (R, Hq, 1, d), equal to softmax attention over the concatenated keys."""
    R, Hq, _, d = q.shape
    G, Hk, P, _ = prefix_k.shape
    share = Hq // Hk  # query heads per key/value head
    slot_of_row, row_of_slot = slots
    width = row_of_slot.numel() // G
    grouped = q.index_select(0, row_of_slot).reshape(G, width, Hk, share, d)  # (G, C, Hk, h, d)
    grouped = grouped.permute(0, 2, 1, 3, 4).reshape(G, Hk, width * share, d)  # a group's queries together
    out1, lse1 = attention_with_lse(grouped, prefix_k, prefix_v, scaling, None if bias is None else bias.to(q.dtype))
    out1 = out1.view(G, Hk, width, share, d).transpose(1, 2).reshape(G * width, Hk, share, d).index_select(
        0, slot_of_row)  # (R, Hk, h, d)
    lse1 = lse1.view(G, Hk, width, share).transpose(1, 2).reshape(G * width, Hk, share).index_select(0, slot_of_row)
    out2, lse2 = attention_with_lse(q.reshape(R, Hk, share, d), suffix_k, suffix_v, scaling)  # (R, Hk, h, d)
    return merge_attention(out1, lse1, out2, lse2).view(R, Hq, 1, d)


@dataclass(frozen=True)
class SharedPrefix:
    """A decoding step's prepared attention mask for the cascade kernel: the prompts' keys/values (one per
    group) and the live rows' groups, laid out in slots (`group_slots`, made once for all layers)."""

    keys: list  # per layer: the prompts' keys (G, Hk, P, d), filled by the prefill
    values: list  # per layer: (G, Hk, P, d)
    bias: Tensor | None  # prefix_bias of the (G, P) prompt mask: -inf on left padding; None without padding
    group: Tensor  # (R,) each live row's group
    width: int  # slots per group: the largest group
    slots: tuple[Tensor, Tensor]  # group_slots(group, G, width)

    @classmethod
    def of(cls, keys: list, values: list, prompt_mask: Tensor, group: Tensor, width: int) -> SharedPrefix:
        """prompt_mask (G, P) bool: True on real prompt tokens."""
        slots = group_slots(group, prompt_mask.shape[0], width)
        return cls(keys, values, prefix_bias(prompt_mask), group, width, slots)

    def select(self, keep: Tensor) -> SharedPrefix:
        """The rows `keep` (R',) in that order (finished rows dropped, the rest moved)."""
        group = self.group[keep]
        return replace(self, group=group, slots=group_slots(group, len(self.keys[0]), self.width))

    def step_kwargs(self, length: int) -> dict:
        """The model's keyword arguments for a decoding step: no mask (every row's completion columns are
        real), the shared prefix passed on to the attention function (transformers hands a forward's extra
        keyword arguments down to it)."""
        return {"attention_mask": None, "shared_prefix": self}


def cascade_attention_forward(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, scaling=None,
                              dropout: float = 0.0, shared_prefix: SharedPrefix | None = None, **kwargs
                              ) -> tuple[Tensor, None]:
    """transformers' attention-function signature: query (R, Hq, 1, d), key/value (R, Hk, S, d) the completion
    columns from the cache, attention_mask None (transformers makes none for an attention function it has no
    mask function for), shared_prefix the step's `SharedPrefix`. Returns (R, 1, Hq, d)."""
    if shared_prefix is None or query.shape[2] != 1 or attention_mask is not None:
        raise ValueError(f"{CASCADE} attention runs one-token decoding steps given a shared_prefix and no mask")
    if any(kwargs.get(name) is not None for name in _NOT_PLAIN):
        raise ValueError(f"{CASCADE} attention is plain softmax attention: none of {_NOT_PLAIN}")
    layer, prefix = module.layer_idx, shared_prefix
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    # Under autocast sdpa computes in the autocast dtype (rotary embeddings leave queries and keys in float32)
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    q, k, v, prefix_k, prefix_v = (t.to(dtype) for t in (query, key, value, prefix.keys[layer], prefix.values[layer]))
    out = cascade_attention(q, prefix_k, prefix_v, prefix.bias, prefix.slots, k, v, scaling)
    return out.transpose(1, 2), None


AttentionInterface.register(CASCADE, cascade_attention_forward)


@contextmanager
def decoding_kernel(model, name: str):
    """Run the model with attention implementation `name`, and its own again afterwards (the engine may
    sample from the module the trainer optimises)."""
    config = model.config
    own = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = own
