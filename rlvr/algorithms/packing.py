"""Sequence packing for SFT and distillation: many short documents per row, no attention across them.

Reasoning traces vary wildly in length; padding every sequence to the longest wastes most of a
batch's compute on pad tokens. Packing concatenates documents into rows of `max_len` tokens, and two
things keep the result identical to running each document on its own:

1. attention never crosses a document boundary: per-document causal attention over one flattened
   row (`rlvr.models.varlen`, the default for eager / sdpa), per-document position ids that
   flash-attention's varlen kernels turn into `cu_seqlens` (transformers'
   `DataCollatorWithFlattening` route), or a dense block-diagonal causal mask;
2. positions restart at 0 in every document, so rotary embeddings see the same positions.

Labels are shifted inside each document: the last token of one document never predicts the first of
the next. Prompt tokens are masked out of the loss (only completion tokens are learned).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms.offline import train_offline
from rlvr.config.offline import PACKING_ROUTES, PackedSFTConfig
from rlvr.rollout.batch import encode_prompt_completion
from rlvr.models.varlen import forward_packed, uses_varlen
from rlvr.core import masked_sum, token_logprobs
from rlvr.models.tokenizer import pad_token_id

PAD_DOC = -1  # document id of the padding at the end of a row


@dataclass(frozen=True)
class Document:
    """One training sequence: token ids and which of them are learned (the completion)."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[bool, ...]  # True where the token is a target (completion, EOS included)

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(f"input_ids ({len(self.input_ids)}) and loss_mask ({len(self.loss_mask)}) "
                             "must have the same length")
        if len(self.input_ids) < 2:
            raise ValueError(f"a document needs at least 2 tokens to have a target, got {len(self.input_ids)}")


def encode_documents(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]]) -> list[Document]:
    """(prompt, completion) pairs -> Documents whose loss mask covers the completion and its EOS."""
    docs = []
    for prompt, completion in pairs:
        prompt_ids, completion_ids = encode_prompt_completion(tokenizer, prompt, completion)
        ids = tuple(prompt_ids + completion_ids)
        docs.append(Document(ids, (False,) * len(prompt_ids) + (True,) * len(completion_ids)))
    return docs


@dataclass
class PackedBatch:
    """Rows of packed documents. Every tensor is (R, L)."""

    input_ids: Tensor  # long; padding rows end with the pad id
    position_ids: Tensor  # long; restart at 0 in each document (and in the padding tail)
    doc_ids: Tensor  # long; 0, 1, ... per document within a row, PAD_DOC for padding
    labels: Tensor  # long; labels[:, t] = input_ids[:, t + 1] (the token that logits[:, t] predict)
    label_mask: Tensor  # bool; labels[:, t] is a completion token of the same document as t

    @property
    def num_targets(self) -> Tensor:
        return self.label_mask.sum()


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bin-pack item indices by length into bins of `capacity` (first-fit decreasing: at most
    11/9 OPT + 6/9 bins, Dósa 2007). Within a bin, indices keep ascending order. Deterministic."""
    too_long = [(i, n) for i, n in enumerate(lengths) if n > capacity]
    if too_long:
        i, n = too_long[0]
        raise ValueError(f"{len(too_long)} document(s) longer than max_len={capacity}, e.g. document {i} "
                         f"with {n} tokens; raise max_len or filter long documents")
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        slot = next((b for b, room in enumerate(free) if room >= lengths[i]), None)
        if slot is None:
            bins.append([])
            free.append(capacity)
            slot = len(bins) - 1
        bins[slot].append(i)
        free[slot] -= lengths[i]
    return [sorted(b) for b in bins]


def _pack_row(docs: Sequence[Document], width: int, pad_id: int) -> tuple[list[int], ...]:
    ids, pos, doc, lab, lab_mask = [], [], [], [], []
    for d, document in enumerate(docs):
        n = len(document.input_ids)
        ids += document.input_ids
        pos += range(n)
        doc += [d] * n
        # shift inside the document: position t predicts t + 1; the last token predicts nothing
        lab += list(document.input_ids[1:]) + [pad_id]
        lab_mask += list(document.loss_mask[1:]) + [False]
    pad = width - len(ids)
    return (ids + [pad_id] * pad, pos + list(range(pad)), doc + [PAD_DOC] * pad,
            lab + [pad_id] * pad, lab_mask + [False] * pad)


def pack_documents(docs: Sequence[Document], max_len: int, pad_id: int) -> PackedBatch:
    """Pack `docs` into as few rows of at most `max_len` tokens as first-fit decreasing finds.
    Rows are padded to the fullest row, not to `max_len`: padding is computed like any token."""
    if not docs:
        raise ValueError("pack_documents: no documents to pack")
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    lengths = [len(d.input_ids) for d in docs]
    bins = first_fit_decreasing(lengths, max_len)
    width = max(sum(lengths[i] for i in b) for b in bins)
    rows = [_pack_row([docs[i] for i in b], width, pad_id) for b in bins]
    ids, pos, doc, lab, lab_mask = (list(col) for col in zip(*rows))
    return PackedBatch(
        input_ids=torch.tensor(ids), position_ids=torch.tensor(pos), doc_ids=torch.tensor(doc),
        labels=torch.tensor(lab), label_mask=torch.tensor(lab_mask, dtype=torch.bool))


def block_causal_mask(doc_ids: Tensor) -> Tensor:
    """(R, L) document ids -> (R, 1, L, L) bool mask, True where query i may attend to key j:
    same document and j <= i. Padding (PAD_DOC) attends only to padding, so no row is all-False
    (an all-masked softmax row would be NaN)."""
    L = doc_ids.shape[-1]
    causal = torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()  # (L, L)
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]  # (R, L, L)
    return (same_doc & causal)[:, None]




def resolve_route(model: PreTrainedModel, route: str) -> str:
    """"auto" -> "varlen" for eager / sdpa models (no dense mask, see rlvr.models.varlen),
    "position_ids" for the rest (flash-attention: transformers' own varlen path)."""
    if route not in PACKING_ROUTES:
        raise ValueError(f"unknown packing route {route!r}; choose from {list(PACKING_ROUTES)}")
    if route != "auto":
        return route
    return "varlen" if uses_varlen(model) else "position_ids"


def _mask_logits(model: PreTrainedModel, input_ids: Tensor, position_ids: Tensor, doc_ids: Tensor) -> Tensor:
    allowed = block_causal_mask(doc_ids)  # (R, 1, L, L)
    if model.config._attn_implementation == "eager":  # eager adds the mask to the scores: additive form
        mask = torch.zeros(allowed.shape, dtype=model.dtype, device=model.device)
        mask = mask.masked_fill(~allowed, torch.finfo(model.dtype).min)
    else:
        mask = allowed
    return model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False).logits


def packed_logits(model: PreTrainedModel, batch: PackedBatch, route: str = "auto") -> Tensor:
    """Forward a packed batch -> logits (R, L, V), each document seeing only itself.

    Routes: "varlen" flattens the rows into one and runs causal attention per document
    (`rlvr.models.varlen`): no mask tensor, attention cost sum_i len_i^2. "mask" passes a 4D
    block-diagonal mask (eager / sdpa): cost R * L^2, every masked score is still computed.
    "position_ids" flattens the rows and passes only per-document position ids, from which
    transformers derives the boundaries (flash-attention varlen; for eager / sdpa it builds one
    (RL x RL) mask, so do not use it there). "auto": see `resolve_route`.
    """
    route = resolve_route(model, route)
    input_ids = batch.input_ids.to(model.device)
    position_ids = batch.position_ids.to(model.device)
    if route == "mask":
        return _mask_logits(model, input_ids, position_ids, batch.doc_ids.to(model.device))
    R, L = input_ids.shape
    logits = forward_packed(model, input_ids.reshape(1, R * L), position_ids.reshape(1, R * L),
                            varlen=route == "varlen").logits
    return logits.reshape(R, L, -1)


def packed_nll(model: PreTrainedModel, batch: PackedBatch, route: str = "auto") -> tuple[Tensor, Tensor]:
    """Summed negative log-likelihood of the completion tokens, and their count (both scalars).

    Returned as a sum so that gradient accumulation over packed micro-batches can divide by the
    step's total target count: the token-mean loss then does not depend on how documents were packed.
    """
    logits = packed_logits(model, batch, route)  # (R, L, V)
    logp = token_logprobs(logits, batch.labels.to(logits.device))  # (R, L)
    mask = batch.label_mask.to(logits.device)
    return -masked_sum(logp, mask), mask.sum()


def _target_count(doc: Document) -> int:
    return sum(doc.loss_mask[1:])  # the first token is never predicted


def train_sft_packed(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     pairs: Sequence[tuple[str, str]], config: PackedSFTConfig | None = None,
                     on_step: Callable[[dict[str, float]], None] | None = None) -> dict[str, Any]:
    """SFT on (prompt, completion) pairs with packed rows: masked NLL of the completion tokens,
    averaged over all completion tokens of a step (token mean, as `rlvr.algorithms.sft.sft_loss`).

    Returns the per-step history (loss, `pack_fill` = share of row slots holding real tokens).
    """
    cfg = config or PackedSFTConfig()
    cfg.validate()
    if not pairs:
        raise ValueError("train_sft_packed: no (prompt, completion) pairs given")
    docs = encode_documents(tokenizer, pairs)
    pad_id = pad_token_id(tokenizer)

    def micro_loss(idx: list[int]) -> tuple[Tensor, dict[str, Tensor]]:
        batch = pack_documents([docs[i] for i in idx], cfg.max_len, pad_id)
        nll, _ = packed_nll(model, batch, cfg.route)
        return nll, {"pack_fill": (batch.doc_ids != PAD_DOC).float().mean()}

    was_training = model.training
    model.train()
    history = train_offline(model, len(docs), cfg, micro_loss,
                            weight=lambda idx: sum(_target_count(docs[i]) for i in idx), on_step=on_step)
    model.train(was_training)
    return {"config": asdict(cfg), "num_docs": len(docs), "history": history}
