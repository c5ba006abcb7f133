"""Rollout batches as tensors: the one prompt + completion layout the Learner trains on (its forward over them:
`rlvr.models.forward`).

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

from rlvr.core import keep_tokens


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
