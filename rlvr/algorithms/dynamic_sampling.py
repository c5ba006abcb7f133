"""Sampling a training batch: n completions per prompt, scored; DAPO's dynamic sampling and overlong
filtering.

Dynamic sampling (DAPO, Yu et al. 2025, sec. 3.2): a group whose rewards are all equal has zero
group-relative advantage, so it adds no policy gradient and only dilutes the batch. Such groups are
dropped and more prompts are sampled, for at most `max_extra_rounds` extra rounds, until the batch
holds `num_groups` informative groups. Rounds after the first ask for the missing groups divided by
the keep rate seen so far (at most one full batch), so a batch that is half flat is usually refilled
in one extra round. If the cap is reached first, the batch is topped up with flat groups (their
advantage is 0 under any group-centred estimator), so every step trains on the configured shapes;
`sampling/padded_groups` says how often that happened.

Which groups are kept: by default (`metric="accuracy"`) those whose accuracy is strictly between 0 and
1, DAPO's eq. 11 constraint 0 < |{o_i : is_equivalent(a, o_i)}| < G; shaping terms (an overlong
penalty, a length reward) do not make an all-wrong or all-right group informative. `metric="reward"`
keeps any group whose total rewards differ.

Overlong filtering (DAPO sec. 3.4): a truncated completion is not wrong, only unfinished, so it
should not be penalised. Its advantage is set to 0 and its tokens leave the loss mask
(`overlong_loss_mask`), so it adds no policy gradient, no KL term and no token to `token_mean`'s
denominator (TRL's `mask_truncated_completions`). Two exceptions keep the mask: when every completion
is truncated (nothing would be left to average), and under `seq_mean_token_mean`, where an empty row
would be 0 / 0; there the zero advantage alone removes the policy gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from rlvr.config.algorithm import DYNAMIC_SAMPLING_METRICS as METRICS  # what must vary within a kept group
from rlvr.core import informative_groups
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.seeds import derive_seed
from rlvr.rewards.base import COUNTS
from rlvr.rewards.scoring import Scores, score_completions, score_episodes

COUNTED = tuple(f"reward/{count}" for count in COUNTS)  # counts, not means


def next_round_size(missing: int, kept: int, sampled: int, cap: int) -> int:
    """Prompts to sample next: missing / (keep rate so far), rounded up, within [missing, cap]."""
    if missing < 1 or cap < missing or kept < 0 or sampled < kept:
        raise ValueError(f"need 1 <= missing <= cap and 0 <= kept <= sampled, got {missing}, {cap}, {kept}, {sampled}")
    if kept == 0:
        return cap
    return min(cap, max(missing, math.ceil(missing * sampled / kept)))


def choose_groups(informative: Sequence[bool], num_groups: int) -> list[int]:
    """Indices of the groups to train on: informative ones first (in sampling order), then flat ones
    to fill up to `num_groups`."""
    if len(informative) < num_groups:
        raise ValueError(f"{len(informative)} groups sampled, {num_groups} needed")
    good = [i for i, ok in enumerate(informative) if ok][:num_groups]
    flat = [i for i, ok in enumerate(informative) if not ok][: num_groups - len(good)]
    return good + flat


@dataclass
class Rollout:
    """Completions of the batch (n samples of a prompt contiguous), their examples and scores."""

    completions: list[Completion]
    examples: list[Any]
    scores: Scores
    stats: dict[str, float] = field(default_factory=dict)

    def groups(self, index: Sequence[int], group_size: int) -> "Rollout":
        """The rows of groups `index`; reward term means over those rows (the trained batch)."""
        rows = [g * group_size + j for g in index for j in range(group_size)]
        return Rollout([self.completions[r] for r in rows], [self.examples[r] for r in rows], self.scores.select(rows),
                       dict(self.stats))

    @staticmethod
    def concat(parts: Sequence["Rollout"]) -> "Rollout":
        """Rounds joined; component means weighted by completions, the error and timeout counts summed."""
        sizes = [len(p.completions) for p in parts]
        components = {}
        for key in sorted({k for p in parts for k in p.scores.components}):
            seen = [(p.scores.components[key], n) for p, n in zip(parts, sizes) if key in p.scores.components]
            components[key] = (sum(v for v, _ in seen) if key in COUNTED
                               else sum(v * n for v, n in seen) / sum(n for _, n in seen))
        values = {key: [v for p, n in zip(parts, sizes) for v in p.scores.values.get(key, [math.nan] * n)]
                  for key in sorted({k for p in parts for k in p.scores.values})}
        scores = Scores([r for p in parts for r in p.scores.rewards], [c for p in parts for c in p.scores.correct],
                        components, values)
        return Rollout([c for p in parts for c in p.completions], [e for p in parts for e in p.examples], scores)


@dataclass
class RolloutSampler:
    """Draws prompts, samples `group_size` completions of each, scores them, and with `dynamic` keeps
    sampling until the batch is full of informative groups."""

    engine: RolloutEngine
    stream: Any  # rlvr.data.stream.PromptStream
    task: Any
    reward: Any  # rlvr.rewards.CombinedReward: the task's verifier plus the configured extra terms
    sampling: SamplingParams
    group_size: int
    num_groups: int
    seed: int
    purpose: int = 0
    dynamic: bool = False
    max_extra_rounds: int = 0
    metric: str = "accuracy"
    # with an environment: plays (examples, n, sampling) -> n episodes per example (`rlvr.rollout.episode`), which
    # the environment scores, instead of n completions per prompt scored by `reward`
    episodes: Callable[[list[Any], int, SamplingParams], list[Completion]] | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown dynamic-sampling metric {self.metric!r}; choose from {list(METRICS)}")
        if self.max_extra_rounds < 0:
            raise ValueError(f"max_extra_rounds must be >= 0, got {self.max_extra_rounds}")

    def _round(self, num_prompts: int, step: int, round_index: int) -> Rollout:
        examples = self.stream.next(num_prompts)
        # round 0 draws exactly the seed of a run without dynamic sampling; extra rounds get their own
        extra = (round_index,) if round_index else ()
        sampling = replace(self.sampling, seed=derive_seed(self.seed, step, self.purpose, *extra))
        group_examples = [ex for ex in examples for _ in range(self.group_size)]
        if self.episodes is not None:
            completions = self.episodes(examples, self.group_size, sampling)
            return Rollout(completions, group_examples, score_episodes(completions))
        completions = self.engine.generate([ex.prompt for ex in examples], self.group_size, sampling)
        scores = score_completions(self.reward, self.task, completions, group_examples, self.group_size, step,
                                   self.sampling.max_new_tokens)
        return Rollout(completions, group_examples, scores)

    def _informative(self, rollout: Rollout) -> list[bool]:
        values = rollout.scores.rewards if self.metric == "reward" else [float(c) for c in rollout.scores.correct]
        return informative_groups(torch.tensor(values, dtype=torch.float64), self.group_size).tolist()

    def sample(self, step: int) -> Rollout:
        """The step's batch of `num_groups` groups; `stats` holds the sampling/* metrics, among them
        sampling/reward/<term>: the term's mean over every sampled completion, dropped groups included
        (reward/<term> covers the trained batch, as `reward` does)."""
        first = self._round(self.num_groups, step, 0)
        if not self.dynamic:
            return first
        parts, flags = [first], self._informative(first)
        rounds = 0
        while sum(flags) < self.num_groups and rounds < self.max_extra_rounds:
            rounds += 1
            size = next_round_size(self.num_groups - sum(flags), sum(flags), len(flags), self.num_groups)
            parts.append(self._round(size, step, rounds))
            flags += self._informative(parts[-1])
        chosen = choose_groups(flags, self.num_groups)
        sampled = Rollout.concat(parts)
        batch = sampled.groups(chosen, self.group_size)
        batch.stats = {"sampling/rounds": 1.0 + rounds, "sampling/sampled_groups": float(len(flags)),
                       "sampling/informative_share": sum(flags) / len(flags),
                       "sampling/padded_groups": float(sum(not flags[i] for i in chosen)),
                       **{f"sampling/{k}": v for k, v in sampled.scores.term_means().items()}}
        return batch


def overlong_filter(advantages: Tensor, truncated: Tensor) -> Tensor:
    """Zero the advantage of truncated completions: advantages (B,) or (B, W), truncated (B,) bool."""
    if truncated.dtype != torch.bool or truncated.dim() != 1 or truncated.shape[0] != advantages.shape[0]:
        raise ValueError(f"truncated must be a bool (B,) tensor for advantages {tuple(advantages.shape)}, "
                         f"got {truncated.dtype} {tuple(truncated.shape)}")
    keep = ~truncated
    return advantages * (keep if advantages.dim() == 1 else keep[:, None])


def overlong_loss_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """mask (B, W) bool with the rows of truncated completions (B,) bool cleared (DAPO sec. 3.4);
    unchanged when every row is truncated, so a loss never averages over zero tokens."""
    if truncated.dtype != torch.bool or truncated.shape != mask.shape[:1]:
        raise ValueError(f"truncated must be a bool (B,) tensor for mask {tuple(mask.shape)}, "
                         f"got {truncated.dtype} {tuple(truncated.shape)}")
    if bool(truncated.all()):
        return mask
    return mask & ~truncated[:, None]
