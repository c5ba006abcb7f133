"""A Bradley-Terry reward model as a reward for RL (RLHF), with proxy-vs-gold logging.

Model: `AutoModelForSequenceClassification` with `num_labels=1`: a causal LM backbone plus a linear
`score` head. Why this and not a value head bolted onto the causal LM: it is the format every HF tool
reads as a reward model (TRL's RewardTrainer, vLLM's reward serving), it saves and loads as an
ordinary folder, and it drops the LM head's (H x V) matrix that a scalar reward never uses.

One deviation from the HF forward: the score is read at the last *attended* token (the EOS that
closes the response; right padding), not at the "rightmost token that is not the pad id" as
`...ForSequenceClassification.forward` does. Many checkpoints use pad == eos, and then HF's rule
silently scores the token before the EOS. The head is applied to that one position only.
Training it is `rlvr.algorithms.reward_model`.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor
from transformers import AutoConfig, AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from rlvr.config import check_finite_number
from rlvr.models import load_model, model_folder
from rlvr.models.placement import autocast_forward
from rlvr.models.tokenizer import pad_token_id
from rlvr.rewards.base import BatchContext, RewardBatch, RewardOutput, bounded
from rlvr.rollout.batch import encode_prompt_completion, pad_right


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


def load_reward_model(path: str | Path, dtype: torch.dtype = torch.float32, from_lm: bool = False) -> PreTrainedModel:
    """Load a reward model folder (or the `rlvr reward-model` output folder holding it: `model_folder`). With
    `from_lm`, a causal LM folder starts one (its head is then new: what `rlvr reward-model` trains); without it,
    such a folder is refused, since scoring with an untrained random head would be a silent noise reward."""
    path = model_folder(path)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if not any(a.endswith("ForSequenceClassification") for a in config.architectures or []):
        if not from_lm:
            kinds = ", ".join(config.architectures or []) or "no architectures in config.json"
            raise ValueError(f"{str(path)!r} is not a reward model ({kinds}; `rlvr reward-model` saves a "
                             f"...ForSequenceClassification with num_labels=1); train one with `rlvr reward-model "
                             f"--model {path}`")
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


def load_placed_reward_model(path: str | Path, device: torch.device, dtype: torch.dtype,
                             from_lm: bool = False) -> PreTrainedModel:
    """`load_reward_model` placed as `load_policy` places a policy: float32 weights on `device`, the
    forward under autocast in `dtype` (`rlvr reward-model --device/--dtype`, the reward's options)."""
    return autocast_forward(load_reward_model(path, from_lm=from_lm).to(device), device, dtype)


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
    ids, attn = pad_right(seqs, pad_token_id(tokenizer))
    return sequence_rewards(rm, ids.to(rm.device), attn.to(rm.device))


@bounded
class RewardModelReward:
    """A trained reward model as an rlvr reward (RewardFn and BatchRewardFn): RLHF.

    The score is the raw BT reward; `scale` and `shift` map it as (r - shift) * scale, e.g. to
    centre it on the SFT policy's mean reward (Ouyang et al. 2022 normalise the same way).
    """

    def __init__(self, rm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 32,
                 shift: float = 0.0, scale: float = 1.0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        # a NaN score reads as "not applicable": 0
        shift = check_finite_number("reward_model option shift", shift)
        scale = check_finite_number("reward_model option scale", scale)
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
