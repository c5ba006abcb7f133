"""A preallocated key/value cache for batched sampling with a shared prompt prefix.

Why not transformers' `DynamicCache`: it grows by `torch.cat` at every step, which reallocates and
copies the whole cache each token (allocator traffic that costs up to 2x on CPU). Why not
`StaticCache`: it attends over all `max_cache_len` slots every step and cannot drop finished rows.

Layout per layer: keys/values (rows, heads, max_len, head_dim), allocated once. Rows are sequences;
all rows share the column index (prompts are left-padded to a common length), so one integer
`length` says how many columns are filled. `update` writes the new columns in place and returns
views `[:rows, :, :length + q]`: no copy, and attention only spans the filled columns.
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor
from transformers.cache_utils import Cache


class PreallocatedKVCache(Cache):
    """Passed to a Hugging Face model as its cache; the engine owns `rows` and `length`.

    During prefill, `expand_index` (rows,) maps each cache row to the prompt (batch row of the
    forward pass) it continues: the prompt is computed once and its keys/values are written to the
    n rows of its group (GRPO samples n completions per prompt).
    """

    def __init__(self, num_layers: int, rows: int, max_len: int):
        super().__init__(layers=[])
        self.num_layers = num_layers
        self.capacity_rows, self.max_len = rows, max_len
        self.rows = rows  # live rows; rows >= self.rows are dropped (finished) sequences
        self.length = 0  # filled columns
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers
        self.expand_index: Tensor | None = None

    def _allocate(self, layer_idx: int, key: Tensor, value: Tensor) -> None:
        heads = key.shape[1]
        shape_k = (self.capacity_rows, heads, self.max_len, key.shape[-1])
        shape_v = (self.capacity_rows, heads, self.max_len, value.shape[-1])
        self.keys[layer_idx] = torch.empty(shape_k, dtype=key.dtype, device=key.device)
        self.values[layer_idx] = torch.empty(shape_v, dtype=value.dtype, device=value.device)

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[Tensor, Tensor]:
        """key/value_states: (batch, heads, q, head_dim) for the q new columns of this forward."""
        if self.keys[layer_idx] is None:
            self._allocate(layer_idx, key_states, value_states)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        start, stop = self.length, self.length + key_states.shape[2]
        if stop > self.max_len:
            raise RuntimeError(f"KV cache full: {stop} columns needed, {self.max_len} allocated")
        if self.expand_index is not None:  # prefill: one forward per prompt, copied to its group
            if start != 0:
                raise RuntimeError("prefill must start from an empty cache")
            keys[: self.rows, :, :stop] = key_states.index_select(0, self.expand_index)
            values[: self.rows, :, :stop] = value_states.index_select(0, self.expand_index)
            return key_states, value_states  # the prefill attends within its own prompts only
        keys[: self.rows, :, start:stop] = key_states
        values[: self.rows, :, start:stop] = value_states
        return keys[: self.rows, :, :stop], values[: self.rows, :, :stop]

    def move_rows(self, sources: Tensor, targets: Tensor) -> None:
        """Copy rows `sources` to rows `targets` (filled columns only) in every layer."""
        for layer in range(self.num_layers):
            for buf in (self.keys[layer], self.values[layer]):
                if buf is not None:
                    buf[targets, :, : self.length] = buf[sources, :, : self.length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:
        return self.max_len

    def __len__(self) -> int:
        return self.num_layers


def cache_kwarg(model) -> str:
    """The forward's name for the cache argument: transformers 5.x renamed `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper passes it on
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
