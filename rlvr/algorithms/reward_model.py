"""A Bradley-Terry reward model, and its use as a reward for RL (RLHF), with proxy-vs-gold logging.

Model: `AutoModelForSequenceClassification` with `num_labels=1`: a causal LM backbone plus a linear
`score` head. Why this and not a value head bolted onto the causal LM: it is the format every HF tool
reads as a reward model (TRL's RewardTrainer, vLLM's reward serving), it saves and loads as an
ordinary folder, and it drops the LM head's (H x V) matrix that a scalar reward never uses.

One deviation from the HF forward: the score is read at the last *attended* token (the EOS that
closes the response; right padding), not at the "rightmost token that is not the pad id" as
`...ForSequenceClassification.forward` does. Many checkpoints use pad == eos, and then HF's rule
silently scores the token before the EOS. The head is applied to that one position only.

Training (Ouyang et al. 2022, eq. 1; Bradley & Terry 1952): loss = -log sigmoid(r(x, y_w) - r(x, y_l)).
BT is blind to a constant shift of r, so rewards can drift; `center_coef` adds
coef * (r_w + r_l)^2 to pin their mean near 0 (Eisenstein et al. 2023, "Helping or Herding?").
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from rlvr.algorithms.common import config_field, encode_prompt_completion, pad_right, train_epochs
from rlvr.algorithms.preference import PairConfig, PreferencePair, pairs_and_holdout
from rlvr.rewards.base import BatchContext, RewardBatch, RewardOutput


def bradley_terry_loss(chosen_rewards: Tensor, rejected_rewards: Tensor, center_coef: float = 0.0
                       ) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-pair loss (P,) = -log sigmoid(r_w - r_l) + center_coef * (r_w + r_l)^2, and detached
    metrics: accuracy (share with r_w > r_l), margin, mean chosen / rejected reward."""
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.dim() != 1:
        raise ValueError(f"chosen and rejected rewards must both be (P,), got {tuple(chosen_rewards.shape)} "
                         f"and {tuple(rejected_rewards.shape)}")
    if center_coef < 0:
        raise ValueError(f"center_coef must be >= 0, got {center_coef}")
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards) + center_coef * (chosen_rewards + rejected_rewards) ** 2
    w, l = chosen_rewards.detach(), rejected_rewards.detach()
    metrics = {"accuracy": (w > l).to(w.dtype).mean(), "margin": (w - l).mean(),
               "chosen_reward": w.mean(), "rejected_reward": l.mean()}
    return loss, metrics


def reward_model_from_lm(lm: PreTrainedModel, seed: int = 0) -> PreTrainedModel:
    """A reward model whose backbone is a copy of the causal LM `lm` and whose head is new.

    The head starts at N(0, 1 / (H + 1)) as in OpenAI's lm-human-preferences (Ziegler et al. 2019),
    so the initial rewards are small and BT starts near log 2.
    """
    config = copy.deepcopy(lm.config)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        rm = AutoModelForSequenceClassification.from_config(config, dtype=lm.dtype,
                                                           attn_implementation=lm.config._attn_implementation)
        torch.nn.init.normal_(rm.score.weight, std=1 / math.sqrt(config.hidden_size + 1))
    getattr(rm, rm.base_model_prefix).load_state_dict(getattr(lm, lm.base_model_prefix).state_dict())
    return rm.to(lm.device).eval()


def load_reward_model(path: str | Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """Load a reward model folder, or start one from a causal LM folder (its head is then new)."""
    from rlvr.models import load_model

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a Hugging Face model folder (no config.json)")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if not any(a.endswith("ForSequenceClassification") for a in config.architectures or []):
        return reward_model_from_lm(load_model(path, dtype))
    if config.num_labels != 1:
        raise ValueError(f"{str(path)!r} is a classifier with {config.num_labels} labels, not a reward model")
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no per-shard bar inside a training run's own display
    try:
        rm = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype, local_files_only=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return rm.eval()


def sequence_rewards(rm: PreTrainedModel, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Scalar rewards (B,) of right-padded sequences (B, T), read at each last attended token."""
    if not hasattr(rm, "score"):
        raise ValueError(f"{type(rm).__name__} has no `score` head; use a ...ForSequenceClassification model")
    if bool((attention_mask[:, 1:].long() > attention_mask[:, :-1].long()).any()):
        raise ValueError("sequence_rewards expects right padding (attention_mask 1...1 0...0)")
    backbone = getattr(rm, rm.base_model_prefix)
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask.long(), use_cache=False
                      ).last_hidden_state  # (B, T, H)
    last = attention_mask.long().sum(-1) - 1  # (B,)
    pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, H)
    return rm.score(pooled).squeeze(-1).float()  # (B,)


def score_texts(rm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                completions: Sequence[str]) -> Tensor:
    """Rewards (B,) of completions given prompts, encoded as in training (completion + EOS)."""
    seqs = [sum(encode_prompt_completion(tokenizer, p, c), []) for p, c in zip(prompts, completions)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, attn = pad_right(seqs, pad)
    return sequence_rewards(rm, ids.to(rm.device), attn.to(rm.device))


@dataclass
class RewardModelConfig(PairConfig):
    lr: float = config_field(1e-5, "Peak AdamW learning rate (InstructGPT RM: 9e-6).")
    center_coef: float = config_field(0.0, "Weight of (r_w + r_l)^2 that keeps rewards centred "
                                           "(Eisenstein et al. 2023; TRL center_rewards_coefficient 0.01).")

    def validate(self) -> None:
        super().validate()
        if self.center_coef < 0:
            raise ValueError(f"center_coef must be >= 0, got {self.center_coef}")


def _pair_loss(rm, tokenizer, pairs: Sequence[PreferencePair], idx: Sequence[int], center_coef: float):
    prompts = [pairs[i].prompt for i in idx]
    texts = [pairs[i].chosen for i in idx] + [pairs[i].rejected for i in idx]
    rewards = score_texts(rm, tokenizer, prompts + prompts, texts)  # (2P,) one forward for both
    loss, metrics = bradley_terry_loss(rewards[: len(idx)], rewards[len(idx):], center_coef)
    return loss.sum(), metrics


@torch.no_grad()
def evaluate_reward_model(rm, tokenizer, pairs: Sequence[PreferencePair], batch_size: int = 32,
                          center_coef: float = 0.0) -> dict[str, float]:
    """Mean BT loss, accuracy (share of pairs ranked right), margin and mean rewards on `pairs`."""
    totals: dict[str, float] = {}
    for start in range(0, len(pairs), batch_size):
        idx = list(range(start, min(start + batch_size, len(pairs))))
        loss, metrics = _pair_loss(rm, tokenizer, pairs, idx, center_coef)
        totals["loss"] = totals.get("loss", 0.0) + loss.item() / len(pairs)
        for k, v in metrics.items():
            totals[k] = totals.get(k, 0.0) + v.item() * len(idx) / len(pairs)
    return totals


def train_reward_model(rm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                       pairs: Sequence[PreferencePair | Mapping[str, Any]],
                       config: RewardModelConfig | None = None,
                       eval_pairs: Sequence[PreferencePair | Mapping[str, Any]] | None = None,
                       on_step: Callable[[dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Train the reward model `rm` in place with the Bradley-Terry loss; returns held-out metrics
    before and after, and the per-step history. Eval mode throughout (no dropout)."""
    cfg = config or RewardModelConfig()
    cfg.validate()
    pairs, eval_pairs = pairs_and_holdout(pairs, eval_pairs, cfg.eval_fraction, cfg.seed)
    rm.eval()
    evaluate = lambda: evaluate_reward_model(rm, tokenizer, eval_pairs, cfg.micro_batch_size or cfg.batch_size,
                                             cfg.center_coef) if eval_pairs else {}
    before = evaluate()
    history = train_epochs(rm, len(pairs), cfg, lambda idx: _pair_loss(rm, tokenizer, pairs, idx, cfg.center_coef),
                           on_step=on_step)
    return {"config": asdict(cfg), "num_train": len(pairs), "num_eval": len(eval_pairs),
            "eval_before": before, "eval_after": evaluate(), "history": history}


class RewardModelReward:
    """A trained reward model as an rlvr reward (RewardFn and BatchRewardFn): RLHF.

    The score is the raw BT reward; `scale` and `shift` map it as (r - shift) * scale, e.g. to
    centre it on the SFT policy's mean reward (Ouyang et al. 2022 normalise the same way).
    """

    def __init__(self, rm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 32,
                 shift: float = 0.0, scale: float = 1.0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.rm, self.tokenizer, self.batch_size = rm.eval(), tokenizer, batch_size
        self.shift, self.scale = shift, scale

    @torch.no_grad()
    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        out: list[float] = []
        for lo in range(0, len(prompts), self.batch_size):
            r = score_texts(self.rm, self.tokenizer, prompts[lo: lo + self.batch_size],
                            completions[lo: lo + self.batch_size])
            out += ((r - self.shift) * self.scale).tolist()
        return out

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        return RewardOutput(self.scores([prompt], [completion])[0])

    def score_batch(self, prompts: list[str], completions: list[str], examples: list[Mapping[str, Any]],
                    ctx: BatchContext | None = None) -> RewardBatch:
        return RewardBatch(self.scores(prompts, completions))


# --- proxy vs gold: over-optimisation made visible (Gao et al. 2023, "Scaling Laws for Reward Model
# Overoptimization"): RL pushes the learned (proxy) reward up; past some point the true (gold) reward
# falls. Logging both over training shows where.


def reward_scores(fn: Any, prompts: list[str], completions: list[str], examples: list[Mapping[str, Any]],
                  ctx: BatchContext | None = None) -> list[float]:
    """Scores of any reward: `score_batch` when it has one (BatchRewardFn), else one call each."""
    if hasattr(fn, "score_batch"):
        return list(fn.score_batch(prompts, completions, examples, ctx).scores)
    outs = [fn(p, c, e) for p, c, e in zip(prompts, completions, examples)]
    return [float(o.score if isinstance(o, RewardOutput) else o) for o in outs]


def proxy_and_gold_scores(prompts: list[str], completions: list[str], examples: list[Mapping[str, Any]],
                          proxy: Any, gold: Any, ctx: BatchContext | None = None) -> dict[str, list[float]]:
    """{"proxy": scores of the learned reward, "gold": scores of the verifier}, one per completion."""
    if not len(prompts) == len(completions) == len(examples):
        raise ValueError(f"got {len(prompts)} prompts, {len(completions)} completions, {len(examples)} examples")
    return {"proxy": reward_scores(proxy, prompts, completions, examples, ctx),
            "gold": reward_scores(gold, prompts, completions, examples, ctx)}


class ProxyGoldReward:
    """Train on the proxy reward, log the gold one: the score is the proxy's, and the components
    `proxy` and `gold` reach the trainer's logs as reward/proxy and reward/gold at every step."""

    def __init__(self, proxy: Any, gold: Any):
        self.proxy, self.gold = proxy, gold

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        batch = self.score_batch([prompt], [completion], [example])
        return RewardOutput(batch.scores[0], {k: v[0] for k, v in batch.components.items()})

    def score_batch(self, prompts: list[str], completions: list[str], examples: list[Mapping[str, Any]],
                    ctx: BatchContext | None = None) -> RewardBatch:
        both = proxy_and_gold_scores(prompts, completions, examples, self.proxy, self.gold, ctx)
        return RewardBatch(list(both["proxy"]), components=both)
