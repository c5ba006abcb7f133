"""Rejection-sampling fine-tuning (RFT) and expert iteration.

RFT (Yuan et al. 2023, "Scaling Relationship on Learning Mathematical Reasoning with Large Language
Models"): sample N completions per training prompt, keep those the verifier accepts, drop duplicate
completions of a prompt (distinct reasoning paths are what help), and fine-tune on what is left.
Expert iteration (Anthony et al. 2017; STaR, Zelikman et al. 2022; Havrilla et al. 2024 find it on
par with PPO for reasoning) repeats this with the current model: each round samples from the policy
the previous round produced, so it is the simplest on-policy RL with a 0/1 verifier reward.

The fine-tuning step is packed SFT (`rlvr.algorithms.packing.train_sft_packed`): kept completions
vary in length, and packing spends no compute on padding.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Sequence

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms.packing import train_sft_packed
from rlvr.config.offline import RFTConfig
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.tasks.base import Example

Verifier = Callable[[str, Example], bool]  # (completion text, example) -> correct?


def rft_sampling(cfg: RFTConfig, round_index: int) -> SamplingParams:
    """How round `round_index` samples: the config's temperature and budget, seeded by seed + round."""
    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                          seed=cfg.seed + round_index)


def filter_correct(group: Sequence[Completion], example: Example, verify: Verifier, dedup: bool,
                   max_per_prompt: int | None) -> list[str]:
    """Texts of the verified-correct completions of one prompt, in sampling order."""
    kept: list[str] = []
    for completion in group:
        if verify(completion.text, example) and not (dedup and completion.text in kept):
            kept.append(completion.text)
    return kept if max_per_prompt is None else kept[:max_per_prompt]


def rejection_sample(engine: RolloutEngine, examples: Sequence[Example], verify: Verifier, cfg: RFTConfig,
                     round_index: int = 0) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """Sample `cfg.num_samples` per prompt, keep verified-correct ones -> ((prompt, completion) pairs, stats).

    stats: sample_accuracy (share of all samples that are correct), coverage (share of prompts with
    at least one correct sample, i.e. pass@N), kept (pairs kept after dedup and the per-prompt cap).
    """
    n = cfg.num_samples
    completions = engine.generate([ex.prompt for ex in examples], n, rft_sampling(cfg, round_index))
    if len(completions) != n * len(examples):
        raise ValueError(f"engine returned {len(completions)} completions, expected {n * len(examples)}")
    pairs: list[tuple[str, str]] = []
    n_correct = covered = 0
    for i, ex in enumerate(examples):
        group = completions[i * n: (i + 1) * n]
        n_correct += sum(verify(c.text, ex) for c in group)
        kept = filter_correct(group, ex, verify, cfg.dedup, cfg.max_per_prompt)
        covered += bool(kept)
        pairs += [(ex.prompt, text) for text in kept]
    stats = {"sample_accuracy": n_correct / len(completions), "coverage": covered / len(examples),
             "kept": float(len(pairs))}
    return pairs, stats


def greedy_accuracy(engine: RolloutEngine, examples: Sequence[Example], verify: Verifier,
                    max_new_tokens: int) -> float:
    """Share of `examples` the greedy completion solves."""
    completions = engine.generate([ex.prompt for ex in examples], 1,
                                  SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    return sum(verify(c.text, ex) for c, ex in zip(completions, examples)) / len(examples)


def train_rft(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, engine: RolloutEngine,
              examples: Sequence[Example], verify: Verifier, config: RFTConfig | None = None,
              eval_examples: Sequence[Example] | None = None,
              on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """RFT (`rounds=1`) or expert iteration (`rounds>1`) of `model` in place.

    `engine` must sample from `model`'s weights: after each round's SFT the new weights are pushed
    with `engine.load_weights`. A round where nothing is correct trains nothing (and says so).
    Returns per-round stats (sampling, SFT loss first/last step, greedy eval accuracy) and the
    greedy eval accuracy before round 1 when `eval_examples` are given.
    """
    cfg = config or RFTConfig()
    cfg.validate()
    if not examples:
        raise ValueError("train_rft: no training examples given")
    evaluate = (lambda: greedy_accuracy(engine, eval_examples, verify, cfg.max_new_tokens)) if eval_examples else None
    result: dict[str, Any] = {"config": asdict(cfg), "rounds": []}
    if evaluate:
        result["eval_accuracy_before"] = evaluate()
    for r in range(cfg.rounds):
        # --- rollout + verifier filter ---
        pairs, stats = rejection_sample(engine, examples, verify, cfg, r)
        row: dict[str, Any] = {"round": r + 1, **stats}
        # --- supervised step on the kept samples ---
        if pairs:
            sft = train_sft_packed(model, tokenizer, pairs, cfg)
            row["sft_loss_first"], row["sft_loss_last"] = sft["history"][0]["loss"], sft["history"][-1]["loss"]
            row["sft_steps"] = len(sft["history"])
            engine.load_weights(model.named_parameters())
        else:
            row["skipped"] = "no correct samples: nothing to train on"
        if evaluate:
            row["eval_accuracy"] = evaluate()
        result["rounds"].append(row)
        if on_round is not None:
            on_round(row)
    model.eval()
    return result
