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

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms.common import config_field
from rlvr.algorithms.packing import PackedSFTConfig, train_sft_packed
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.tasks.base import Example

Verifier = Callable[[str, Example], bool]  # (completion text, example) -> correct?


@dataclass
class RFTConfig(PackedSFTConfig):
    rounds: int = config_field(1, "Sample -> filter -> SFT rounds: 1 is RFT, more is expert iteration "
                                  "(each round samples from the model the previous one trained).")
    num_samples: int = config_field(8, "Completions sampled per prompt (Yuan et al. 2023: k up to 100).")
    temperature: float = config_field(1.0, "Sampling temperature; diversity is what finds new correct paths.")
    top_p: float = config_field(1.0, "Nucleus sampling threshold.")
    max_new_tokens: int = config_field(128, "Generation budget per completion.")
    dedup: bool = config_field(True, "Keep each distinct correct completion of a prompt once.")
    max_per_prompt: int | None = config_field(None, "Keep at most this many correct completions per "
                                                    "prompt (None: all), so easy prompts do not dominate.")

    def validate(self) -> None:
        super().validate()
        for name in ("rounds", "num_samples", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_per_prompt is not None and self.max_per_prompt < 1:
            raise ValueError(f"max_per_prompt must be >= 1 or None, got {self.max_per_prompt}")
        self.sampling(0)  # temperature and top_p in range: checked before any model is loaded

    def sampling(self, round_index: int) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens, seed=self.seed + round_index)


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
    completions = engine.generate([ex.prompt for ex in examples], n, cfg.sampling(round_index))
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
