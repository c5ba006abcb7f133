"""`ScoredBatch`: what a rollout worker hands the learner, as plain picklable data.

Lists and CPU tensors only, no model, tokenizer or task objects, so the same value crosses a process
boundary (a Ray actor, a vLLM worker) unchanged. The n samples of one prompt are contiguous, the
layout `rlvr.core` group functions expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from rlvr.core import flat_group_share


@dataclass
class ScoredBatch:
    prompts: list[str]  # (N,) prompt text of each completion (repeated group_size times)
    prompt_ids: list[list[int]]  # (N,) prompt token ids
    completion_ids: list[list[int]]  # (N,) generated token ids, EOS included when emitted
    sampler_logprobs: list[list[float]]  # (N,) log-prob of each of the model's tokens under the sampler
    rewards: Tensor  # (N,) float32 scalar reward per completion
    correct: list[bool]  # (N,) the task's verifier said the answer is right
    finish_reasons: list[str]  # (N,) "stop" or "length"
    group_size: int  # samples per prompt
    step: int = 0  # the RL step that collected it; seeds the learner's minibatch shuffle
    components: dict[str, float] = field(default_factory=dict)  # reward terms, averaged over the batch
    stats: dict[str, float] = field(default_factory=dict)  # sampling/* metrics of the rollout
    version: int = 0  # policy version (optimizer steps) the completions were sampled from
    sampler_entropies: list[list[float]] | None = None  # (N,) entropy at each of the model's tokens; None: not asked
    # (N,) 1 per completion token the model wrote, 0 per token of an environment (an episode's observations), which
    # never trains; None: every completion token is the model's. The sampler's lists above hold the model's tokens
    loss_masks: list[list[int]] | None = None
    # (N,) the policy version that sampled each token (partial rollouts: a sample's tokens may come from several
    # steps' weights, and `version` is the oldest); None: every token from `version`
    token_versions: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.completion_ids)

    @property
    def truncated(self) -> Tensor:
        """(N,) bool, True where the completion hit max_new_tokens."""
        return torch.tensor([r == "length" for r in self.finish_reasons])

    def metrics(self) -> dict[str, Tensor | float]:
        """Reward, accuracy, reward components, sampling stats, length and truncation of the batch."""
        lengths = torch.tensor([len(c) for c in self.completion_ids], dtype=torch.float32)
        wrong = ~torch.tensor([bool(c) for c in self.correct], dtype=torch.bool)  # (N,)
        # per-sequence normalisation's length bias shows on wrong answers (Liu et al. 2025)
        on_wrong = {"completion_length/wrong": lengths[wrong].mean()} if wrong.any() else {}
        return {
            "reward": self.rewards.mean(), "reward_std": self.rewards.std(),
            "flat_group_share": flat_group_share(self.rewards, self.group_size),
            "accuracy": sum(self.correct) / len(self.correct),
            **self.components, **self.stats,
            "completion_length": lengths.mean(),
            "truncated": sum(r == "length" for r in self.finish_reasons) / len(self.finish_reasons),
            **on_wrong,
            # updates between the sampling weights and the ones this step trains (0 when synchronous; the oldest
            # token's with partial rollouts, and their mean over the tokens)
            "staleness": float(self.step - 1 - self.version),
            **({"staleness/token_mean": sum(self.step - 1 - v for vs in self.token_versions for v in vs)
                / max(1, sum(map(len, self.token_versions)))} if self.token_versions else {}),
        }
