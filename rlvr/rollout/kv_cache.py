"""A preallocated key/value cache for batched sampling with a shared prompt prefix.

Why not transformers' `DynamicCache`: it grows by `torch.cat` at every step, which reallocates and
copies the whole cache each token (allocator traffic that costs up to 2x on CPU). Why not
`StaticCache`: it attends over all `max_cache_len` slots every step and cannot drop finished rows.

Layout per layer: keys/values (rows, heads, max_len, head_dim), allocated once. Rows are sequences;
all rows share the column index (prompts are left-padded to a common length), so one integer
`length` says how many columns are filled. `update` writes the new columns in place and returns
views `[:rows, :, :length + q]`: no copy, and attention only spans the filled columns.

The prompt's columns are held in one of two ways, chosen when the cache is made:
- copied to every row of its group (`shared_prefix=False`): the rows then hold [prompt ; completion] and
  any attention kernel reads them, told which columns of each row are real (`RowKeys`);
- kept once per group (`shared_prefix=True`, `prefix_keys`/`prefix_values` (groups, heads, P, head_dim)):
  the rows hold only the completion, and the decoding steps' attention is `rlvr.rollout.cascade`'s.
"""

from __future__ import annotations


import torch
from torch import Tensor
from transformers.cache_utils import Cache


class PreallocatedKVCache(Cache):
    """Passed to a Hugging Face model as its cache; the engine owns `rows` and `length`.

    During prefill, `expand_index` (rows,) maps each cache row to the prompt (batch row of the
    forward pass) it continues: the prompt is computed once and its keys/values are written to the
    n rows of its group (GRPO samples n completions per prompt), or with `shared_prefix` kept as they are.
    """

    def __init__(self, num_layers: int, rows: int, max_len: int, shared_prefix: bool = False):
        super().__init__(layers=[])
        self.num_layers = num_layers
        self.capacity_rows, self.max_len = rows, max_len
        self.rows = rows  # live rows; rows >= self.rows are dropped (finished) sequences
        self.length = 0  # filled columns
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers
        self.expand_index: Tensor | None = None
        self.shared_prefix = shared_prefix
        self.prefix_keys: list[Tensor | None] = [None] * num_layers  # with shared_prefix: (groups, heads, P, d)
        self.prefix_values: list[Tensor | None] = [None] * num_layers

    def _allocate(self, layer_idx: int, key: Tensor, value: Tensor) -> None:
        heads = key.shape[1]
        shape_k = (self.capacity_rows, heads, self.max_len, key.shape[-1])
        shape_v = (self.capacity_rows, heads, self.max_len, value.shape[-1])
        self.keys[layer_idx] = torch.empty(shape_k, dtype=key.dtype, device=key.device)
        self.values[layer_idx] = torch.empty(shape_v, dtype=value.dtype, device=value.device)

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[Tensor, Tensor]:
        """key/value_states: (batch, heads, q, head_dim) for the q new columns of this forward."""
        if self.expand_index is not None:  # prefill: one forward per prompt
            return self._prefill(key_states, value_states, layer_idx)
        if self.keys[layer_idx] is None:
            self._allocate(layer_idx, key_states, value_states)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        start, stop = self.length, self.length + key_states.shape[2]
        if stop > self.max_len:
            raise RuntimeError(f"KV cache full: {stop} columns needed, {self.max_len} allocated")
        keys[: self.rows, :, start:stop] = key_states
        values[: self.rows, :, start:stop] = value_states
        return keys[: self.rows, :, :stop], values[: self.rows, :, :stop]

    def _prefill(self, key_states: Tensor, value_states: Tensor, layer_idx: int) -> tuple[Tensor, Tensor]:
        """Keep the prompts once (shared_prefix) or copy each to the rows of its group. The prefill attends
        within its own prompts only."""
        if self.length != 0:
            raise RuntimeError("prefill must start from an empty cache")
        if self.shared_prefix:
            # contiguous (value_states is a transposed view of the projection): every step reads them
            self.prefix_keys[layer_idx] = key_states.contiguous()
            self.prefix_values[layer_idx] = value_states.contiguous()
            return key_states, value_states
        if self.keys[layer_idx] is None:
            self._allocate(layer_idx, key_states, value_states)
        stop = key_states.shape[2]
        if stop > self.max_len:
            raise RuntimeError(f"KV cache full: {stop} columns needed, {self.max_len} allocated")
        self.keys[layer_idx][: self.rows, :, :stop] = key_states.index_select(0, self.expand_index)
        self.values[layer_idx][: self.rows, :, :stop] = value_states.index_select(0, self.expand_index)
        return key_states, value_states

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


class RowKeys:
    """What the decoding steps attend to when every row holds its own copy of the prompt: the model's own
    kernel, given which cache columns of each row are real (not left padding)."""

    def __init__(self, valid: Tensor):
        self.valid = valid  # (R, P + T) bool

    @classmethod
    def of(cls, real: Tensor, max_new: int) -> RowKeys:
        """From the prompt columns that are real, (R, P) bool: the P + max_new cache columns, the new ones marked as
        the decoding steps write them."""
        valid = torch.zeros(real.shape[0], real.shape[1] + max_new, dtype=torch.bool, device=real.device)
        valid[:, : real.shape[1]] = real
        return cls(valid)

    def select(self, keep: Tensor) -> RowKeys:
        """The rows `keep` (R',) in that order."""
        return RowKeys(self.valid[keep])

    def step_kwargs(self, length: int) -> dict:
        """The model's keyword arguments for a step that writes cache column `length`."""
        self.valid[:, length] = True
        return {"attention_mask": self.valid[:, : length + 1][:, None, None, :]}  # (R', 1, 1, L + 1)
