"""Training a Bradley-Terry reward model; the model itself and its use as an RL reward (RLHF) are
`rlvr.rewards.reward_model`.

Training (Ouyang et al. 2022, eq. 1; Bradley & Terry 1952): loss = -log sigmoid(r(x, y_w) - r(x, y_l)).
BT is blind to a constant shift of r, so rewards can drift; `center_coef` adds
coef * (r_w + r_l)^2 to pin their mean near 0 (Eisenstein et al. 2023, "Helping or Herding?").
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.algorithms.common import max_positions
from rlvr.algorithms.offline import train_offline
from rlvr.algorithms.preference import PreferencePair, check_pair_lengths, pairs_and_holdout
from rlvr.config.offline import RewardModelConfig
from rlvr.rewards.reward_model import score_texts


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
    check_pair_lengths(tokenizer, [*pairs, *eval_pairs], cfg.max_length, max_positions(rm))
    rm.eval()
    evaluate = lambda: evaluate_reward_model(rm, tokenizer, eval_pairs, cfg.micro_batch_size or cfg.batch_size,
                                             cfg.center_coef) if eval_pairs else {}
    before = evaluate()
    history = train_offline(rm, len(pairs), cfg, lambda idx: _pair_loss(rm, tokenizer, pairs, idx, cfg.center_coef),
                            on_step=on_step)
    return {"config": asdict(cfg), "num_train": len(pairs), "num_eval": len(eval_pairs),
            "eval_before": before, "eval_after": evaluate(), "history": history}
