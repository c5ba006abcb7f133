"""Keys and values of whole sequences, kept from one `HFEngine.generate` call for the next call that continues them.

A multi-turn episode (`rlvr.rollout.episode`) feeds each history back as its token ids: the previous call's
prompt, what it sampled, then the environment's observation. Without this, every turn prefills the whole history
again; with it (`HFEngine.reuse_histories()`, which the runner opens around an episode batch) the engine keeps,
for every sequence it sampled, the keys/values of the prompt and the sampled tokens but the last (whose keys no
forward has computed yet), by their token ids, and the next call's prompt that starts with one of them prefills
only the rest. This is vLLM's automatic prefix caching for rlvr's engine, across one call's sequences.

What one call keeps is capped (`max_bytes`, the runner's `env.kv_cache_mb`): a 135M model's keys/values take 46 kB a
token in float32, so 256 episodes of 300 tokens would hold 3.5 GB beside the model. Past the cap the call keeps
nothing (what it had kept is freed), and the next call prefills every history whole: the same episodes (the
prefill computes the same keys), at the cost of the recomputation.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.rollout.kv_cache import PreallocatedKVCache, RowKeys

KV = list[tuple[Tensor, Tensor]]  # per layer: keys, values (heads, length, head_dim)


class Histories:
    """The kept sequences of one call: their token ids -> their keys/values per layer, at most `max_bytes` of them
    (past it none: `dropped`)."""

    def __init__(self, max_bytes: float = math.inf) -> None:
        self.kept: dict[tuple[int, ...], KV] = {}
        self.lengths: set[int] = set()
        self.max_bytes, self.bytes, self.dropped = max_bytes, 0, False

    def add(self, ids: list[int], kv: KV) -> None:
        if self.dropped:
            return
        self.bytes += sum(t.numel() * t.element_size() for pair in kv for t in pair)
        if self.bytes > self.max_bytes:  # a partial store would not help: a call continues only when all continue
            self.kept, self.lengths, self.dropped = {}, set(), True
            return
        self.kept[tuple(ids)] = kv
        self.lengths.add(len(ids))

    def longest(self, prompt: list[int]) -> tuple[int, KV | None]:
        """(length, keys/values) of the longest kept sequence that `prompt` starts with and goes beyond (at least
        one token of the prompt is left to compute its next-token logits), or (0, None)."""
        for length in sorted((n for n in self.lengths if n < len(prompt)), reverse=True):
            kv = self.kept.get(tuple(prompt[:length]))
            if kv is not None:
                return length, kv
        return 0, None


def keep_ended(store: Histories, cache: PreallocatedKVCache, attend, seq: Tensor, ended: Tensor, t: int,
               prompts: list[list[int]], tokens: Tensor) -> None:
    """Keep the keys/values of the sequences that end at step t (live rows `ended`): their prompt and the t
    tokens sampled before this step's, whose columns the cache holds (`Histories`)."""
    if store.dropped:  # over its cap: no more copies
        return
    rows = torch.nonzero(ended).squeeze(-1).tolist()
    sampled = tokens[seq[rows], :t].tolist()
    for row, sid, ids in zip(rows, seq[rows].tolist(), sampled):
        prompt, kv = prompts[sid], []
        for layer in range(cache.num_layers):
            if cache.shared_prefix:  # the prompt's columns are its group's (left-padded), the row holds the rest
                group = int(attend.group[row])
                head = [p[layer][group, :, p[layer].shape[2] - len(prompt):] for p in
                        (cache.prefix_keys, cache.prefix_values)]
                tail = [b[layer][row, :, :t] for b in (cache.keys, cache.values)] if t else None  # none before a step
                kv.append((torch.cat([head[0], tail[0]], dim=1), torch.cat([head[1], tail[1]], dim=1)) if tail
                          else (head[0].clone(), head[1].clone()))
            else:  # left padding: the prompt ends at column `cache.length - t`
                start = cache.length - t - len(prompt)
                kv.append((cache.keys[layer][row, :, start:cache.length].clone(),
                           cache.values[layer][row, :, start:cache.length].clone()))
        store.add(prompt + ids, kv)


def prefill_continuing(forward, pad_id: int, device: torch.device, config, prompt_ids: list[list[int]],
                       kept: list[tuple[int, KV]], max_new: int):
    """`HFEngine._prefill` (one row per prompt) for prompts that continue kept sequences: their kept columns are
    copied into the cache and only the last S columns (S: the most any prompt adds) are run, attending to them.
    `forward(ids, positions, cache, mask)` is the engine's. Returns the cache, its `RowKeys`, the next positions
    (R,) and the next-token logits (R, V)."""
    dev, rows = device, len(prompt_ids)
    width = max(map(len, prompt_ids))
    S = max(len(p) - length for p, (length, _) in zip(prompt_ids, kept))
    cache = PreallocatedKVCache(config.num_hidden_layers, rows, width + max_new)
    lengths = torch.tensor([len(p) for p in prompt_ids], device=dev)  # (R,)
    for layer in range(cache.num_layers):
        k, v = kept[0][1][layer]
        cache._allocate(layer, k[None], v[None])
        # the columns left of each prompt are never written: attention weighs them 0, but 0 x (uninitialised NaN) is NaN
        cache.keys[layer][:, :, :width - S].zero_()
        cache.values[layer][:, :, :width - S].zero_()
        for r, (p, (_, kv)) in enumerate(zip(prompt_ids, kept)):
            copied = len(p) - S  # the kept columns that the run does not recompute (<= the kept length)
            if copied > 0:
                start = width - len(p)
                cache.keys[layer][r, :, start:start + copied] = kv[layer][0][:, :copied]
                cache.values[layer][r, :, start:start + copied] = kv[layer][1][:, :copied]
    cache.length = width - S
    ids = torch.full((rows, S), pad_id, dtype=torch.long, device=dev)
    for r, p in enumerate(prompt_ids):
        tail = p[-S:]
        ids[r, S - len(tail):] = torch.tensor(tail, device=dev)
    column = torch.arange(width, device=dev)
    real = column[None, :] >= (width - lengths)[:, None]  # (R, width)
    positions = (column[width - S:][None, :] - (width - lengths)[:, None]).clamp(min=0)  # (R, S)
    queries = column[width - S:]  # (S,) the run's columns
    sees = (column[None, :] <= queries[:, None])[None] & real[:, None, :]  # (R, S, width)
    # a padding query sees only itself: a row with no visible key would give NaN
    sees |= ~real[:, width - S:, None] & (column[None, None, :] == queries[None, :, None])
    logits = forward(ids, positions, cache, sees[:, None])  # (R, V)
    cache.length = width
    return cache, RowKeys.of(real, max_new), lengths.clone(), logits
