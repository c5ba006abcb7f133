"""Offline preference training: DPO, IPO, SimPO and length-normalised DPO on (prompt, chosen, rejected).

The losses are the pure functions of `rlvr.core.PREFERENCE_LOSSES`; this file only turns text into
the per-sequence log-probs they take. The reference model is the policy before training (or a given
`ref_model`), and its log-probs are computed once, before the first update, and cached: TRL's
`precompute_ref_log_probs`. The reference is frozen, so this is exact, and no second model has to stay
in memory. SimPO uses no reference, so none is computed.

Held-out preference accuracy = share of held-out pairs whose implicit reward margin is > 0 (for DPO
beta * [log pi/pi_ref (chosen) - log pi/pi_ref (rejected)]); it is 0 at the start for DPO/IPO/LN-DPO,
where the policy equals the reference and every margin is exactly 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms.common import check_fits, completion_logprobs, length_checked, max_positions, split_holdout
from rlvr.algorithms.offline import train_offline
from rlvr.config.offline import PreferenceConfig
from rlvr.core import PREFERENCE_LOSSES
from rlvr.core.preference import DEFAULT_BETA, DEFAULT_GAMMA
from rlvr.jsonl import check_fields, read_jsonl_located
from rlvr.rollout.batch import encode_prompt_completion
from rlvr.models.tokenizer import pad_token_id

FIELDS = ("prompt", "chosen", "rejected")
NEEDS_REFERENCE = {"dpo": True, "ipo": True, "ln_dpo": True, "simpo": False}


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str
    # where the pair came from, for errors: `file:LINE`, or `pair i` (its index in the list given); it travels
    # with the pair through the held-out split and the shuffle, so an error names the row, not a position
    where: str = field(default="", compare=False)


def load_preference_pairs(path: str | Path) -> list[PreferencePair]:
    """Read a jsonl of {"prompt", "chosen", "rejected"} rows (extra fields are ignored), checked by `as_pairs`;
    each pair keeps its `path:LINE`."""
    return as_pairs([PreferencePair(r["prompt"], r["chosen"], r["rejected"], where)
                     for where, r in read_jsonl_located(path, FIELDS, "preference data", empty_ok=False)])


def as_pairs(rows: Sequence[PreferencePair | Mapping[str, Any]], what: str = "pair") -> list[PreferencePair]:
    """PreferencePairs from pairs or dicts, checking the fields of each; one without a place is `{what} i`."""
    if not rows:
        raise ValueError("no preference pairs given")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, PreferencePair):
            row = check_fields(row, FIELDS, f"{what} {i}")
            row = PreferencePair(row["prompt"], row["chosen"], row["rejected"])
        if not row.where:
            row = replace(row, where=f"{what} {i}")
        if row.chosen == row.rejected:  # margin 0 forever: no signal, and usually a data bug
            raise ValueError(f"{row.where}: chosen and rejected are identical ({row.chosen[:40]!r})")
        out.append(row)
    return out


def pairs_and_holdout(pairs: Sequence[PreferencePair | Mapping[str, Any]],
                      eval_pairs: Sequence[PreferencePair | Mapping[str, Any]] | None,
                      fraction: float, seed: int) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out) pairs: `eval_pairs` when given, else a seeded `fraction` of `pairs`."""
    pairs = as_pairs(pairs)
    if eval_pairs is None:
        pairs, eval_pairs = split_holdout(pairs, fraction, seed)
    return pairs, as_pairs(eval_pairs, "eval pair") if eval_pairs else []


def resolved_beta(cfg: PreferenceConfig) -> float:
    """The beta used: the config's, else the paper default of its loss."""
    return cfg.beta if cfg.beta is not None else DEFAULT_BETA[cfg.loss]


@dataclass
class EncodedPairs:
    prompt: list[list[int]]
    chosen: list[list[int]]
    rejected: list[list[int]]
    ref_chosen: Tensor | None = None  # (P,) summed reference log-probs, cached once
    ref_rejected: Tensor | None = None


def encode_pairs(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[PreferencePair],
                 max_length: int | None, positions: int | None = None) -> EncodedPairs:
    """Prompt, chosen and rejected ids (completions + EOS) of every pair; prompt + the longer response must fit
    `max_length` and the model's context `positions` (`check_fits`: the error names the pair's row)."""
    enc = EncodedPairs([], [], [])
    for i, pair in enumerate(pairs):
        with length_checked():
            prompt, chosen = encode_prompt_completion(tokenizer, pair.prompt, pair.chosen)
            rejected = encode_prompt_completion(tokenizer, pair.prompt, pair.rejected)[1]
        side, response = ("chosen", chosen) if len(chosen) >= len(rejected) else ("rejected", rejected)
        check_fits(pair.where or f"pair {i}", {"prompt": len(prompt), side: len(response)}, positions, max_length)
        enc.prompt.append(prompt)
        enc.chosen.append(chosen)
        enc.rejected.append(rejected)
    return enc


def check_pair_lengths(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[PreferencePair], max_length: int | None,
                       positions: int | None) -> None:
    """`encode_pairs`' length check alone: every pair fits, checked before any work (a model is loaded)."""
    encode_pairs(tokenizer, pairs, max_length, positions)


def pair_logprobs(model: PreTrainedModel, enc: EncodedPairs, idx: Sequence[int], pad_id: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Summed log-probs and lengths of chosen and rejected for pairs `idx`, each (P,).
    Chosen and rejected share one forward pass (TRL's concatenated forward)."""
    prompts = [enc.prompt[i] for i in idx]
    completions = [enc.chosen[i] for i in idx] + [enc.rejected[i] for i in idx]
    logps, lengths = completion_logprobs(model, prompts + prompts, completions, pad_id)  # (2P,)
    P = len(idx)
    return logps[:P], logps[P:], lengths[:P], lengths[P:]


@torch.no_grad()
def cache_reference(ref_model: PreTrainedModel, enc: EncodedPairs, pad_id: int, batch_size: int) -> None:
    """Fill `enc.ref_chosen` / `enc.ref_rejected` with the frozen reference's log-probs."""
    chosen, rejected = [], []
    for start in range(0, len(enc.prompt), batch_size):
        c, r, _, _ = pair_logprobs(ref_model, enc, range(start, min(start + batch_size, len(enc.prompt))), pad_id)
        chosen.append(c.float())
        rejected.append(r.float())
    enc.ref_chosen, enc.ref_rejected = torch.cat(chosen), torch.cat(rejected)


def preference_loss(model: PreTrainedModel, enc: EncodedPairs, idx: Sequence[int], cfg: PreferenceConfig,
                    pad_id: int) -> tuple[Tensor, dict[str, Tensor]]:
    """(loss summed over pairs `idx`, metrics averaged over them)."""
    pc, pr, nc, nr = pair_logprobs(model, enc, idx, pad_id)
    rows = torch.tensor(list(idx), dtype=torch.long)
    rc = enc.ref_chosen[rows].to(pc) if enc.ref_chosen is not None else None
    rr = enc.ref_rejected[rows].to(pc) if enc.ref_rejected is not None else None
    smoothing = cfg.label_smoothing if cfg.loss == "dpo" else None
    loss, metrics = PREFERENCE_LOSSES[cfg.loss](pc, pr, rc, rr, nc, nr, resolved_beta(cfg),
                                                gamma=cfg.gamma, label_smoothing=smoothing)
    return loss.sum(), metrics


@torch.no_grad()
def evaluate_preference(model: PreTrainedModel, enc: EncodedPairs, cfg: PreferenceConfig, pad_id: int
                        ) -> dict[str, float]:
    """Loss, accuracy (share of pairs with margin > 0), margin and implicit rewards on `enc`."""
    totals: dict[str, float] = {}
    n = len(enc.prompt)
    step = cfg.micro_batch_size or cfg.batch_size
    for start in range(0, n, step):
        idx = list(range(start, min(start + step, n)))
        loss, metrics = preference_loss(model, enc, idx, cfg, pad_id)
        totals["loss"] = totals.get("loss", 0.0) + loss.item() / n
        for k, v in metrics.items():
            totals[k] = totals.get(k, 0.0) + v.item() * len(idx) / n
    return totals


def train_preference(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[PreferencePair | Mapping[str, Any]],
    config: PreferenceConfig | None = None,
    eval_pairs: Sequence[PreferencePair | Mapping[str, Any]] | None = None,
    ref_model: PreTrainedModel | None = None,
    on_step: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train `model` in place on preference pairs; returns held-out metrics before and after and the
    per-step history. Without `eval_pairs`, `config.eval_fraction` of `pairs` is held out.

    The model runs in eval mode throughout (no dropout): dropout would make the policy's implicit
    reward noisy against a reference computed without it (TRL disables dropout for the same reason).
    """
    cfg = config or PreferenceConfig()
    cfg.validate()
    pairs, eval_pairs = pairs_and_holdout(pairs, eval_pairs, cfg.eval_fraction, cfg.seed)
    pad_id = pad_token_id(tokenizer)
    train_enc = encode_pairs(tokenizer, pairs, cfg.max_length, max_positions(model))
    eval_enc = encode_pairs(tokenizer, eval_pairs, cfg.max_length, max_positions(model))
    model.eval()
    if NEEDS_REFERENCE[cfg.loss]:  # before any update: the reference is the initial policy
        for enc in (train_enc, eval_enc):
            if enc.prompt:
                cache_reference(ref_model or model, enc, pad_id, cfg.micro_batch_size or cfg.batch_size)
    before = evaluate_preference(model, eval_enc, cfg, pad_id) if eval_pairs else {}
    history = train_offline(model, len(pairs), cfg,
                            lambda idx: preference_loss(model, train_enc, idx, cfg, pad_id), on_step=on_step)
    after = evaluate_preference(model, eval_enc, cfg, pad_id) if eval_pairs else {}
    gamma = DEFAULT_GAMMA if cfg.loss == "simpo" and cfg.gamma is None else cfg.gamma
    used = {"beta": resolved_beta(cfg), "gamma": gamma}  # the values used, not None
    return {"config": {**asdict(cfg), **used}, "num_train": len(pairs), "num_eval": len(eval_pairs),
            "eval_before": before, "eval_after": after, "history": history}
