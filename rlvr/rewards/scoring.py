"""Training rewards: the task's verifier plus configured extra terms, scored over a batch.

Rewards go through `CombinedReward`: the task's verifier plus any configured extra terms (e.g.
DAPO's overlong penalty), each made safe (an exception or a timeout, `reward.timeout`, scores the
fallback and is counted as `reward/errors`). Tasks are duck-typed (`reward_fn()`,
`is_correct(text, example)`): tasks build on rewards, not the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvr.rewards.base import COUNTS, BatchContext, RewardBatch
from rlvr.rewards.breaker import TimeoutLimits
from rlvr.rewards.combine import CombinedReward
from rlvr.rewards.registry import reward_from_name
from rlvr.rewards.safe import DEFAULT_TIMEOUT
from rlvr.rollout.base import Completion


def build_reward(task: Any, extra: Sequence[dict[str, Any]] = (), timeout: float | None = DEFAULT_TIMEOUT,
                 n_workers: int = 0, limits: TimeoutLimits = TimeoutLimits()) -> CombinedReward:
    """The task's verifier (the first part, component `task`, weight 1 unless a term {name: task,
    weight: w} says otherwise) plus `extra` terms, each a dict {name: registry name, weight: float,
    options: {...}} (see rlvr.rewards.REWARDS); `timeout`, `n_workers` and `limits` as in `SafeReward`
    (reward.timeout, reward.workers, reward.step_timeout and the breaker's reward.max_timeout*)."""
    task_weight, parts = 1.0, []
    for term in extra:
        unknown = set(term) - {"name", "weight", "options"}
        if "name" not in term or unknown:
            raise ValueError(f"a reward term needs `name` (and optionally weight, options); got {term}")
        if term["name"] == "task":  # re-weights the verifier; weight 0 logs it only (gold beside a proxy RM)
            task_weight = float(term.get("weight", 1.0))
            continue
        parts.append((reward_from_name(term["name"], **term.get("options", {})), float(term.get("weight", 1.0)),
                      term["name"]))
    return CombinedReward([(task.reward_fn(), task_weight, "task"), *parts], timeout=timeout, n_workers=n_workers,
                          limits=limits)


@dataclass
class Scores:
    rewards: list[float]  # combined reward per completion
    correct: list[bool]  # exact correctness per completion (task.is_correct)
    components: dict[str, float]  # mean of each named reward term, and the error count
    values: dict[str, list[float]] = field(default_factory=dict)  # each term's score per completion (NaN: n/a)

    def term_means(self) -> dict[str, float]:
        """The components that are means of a term over the completions (not counts like reward/errors)."""
        return {k: v for k, v in self.components.items() if k in self.values}

    def select(self, rows: Sequence[int]) -> "Scores":
        """The scores of completions `rows`, each term's mean taken over those rows alone, so that it
        describes the same completions as their rewards; counts (reward/errors, reward/timeouts) are kept as they
        are."""
        values = {k: [v[r] for r in rows] for k, v in self.values.items()}
        means = RewardBatch([], values).metrics(prefix="")
        for count in COUNTS:
            means.pop(count)
        counts = {k: v for k, v in self.components.items() if k not in self.values}
        return Scores([self.rewards[r] for r in rows], [self.correct[r] for r in rows], {**counts, **means}, values)


def score_completions(reward: CombinedReward, task: Any, completions: Sequence[Completion],
                      examples: Sequence[Any], group_size: int, step: int, max_new_tokens: int) -> Scores:
    """Score completions[i] against examples[i] (groups of `group_size` contiguous)."""
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    texts = [c.text for c in completions]
    correct = [bool(task.is_correct(t, ex)) for t, ex in zip(texts, examples)]
    ctx = BatchContext(group_size=group_size, step=step, lengths=[len(c.token_ids) for c in completions],
                       max_new_tokens=max_new_tokens, correct=correct)
    batch = reward.score_batch([c.prompt for c in completions], texts, list(examples), ctx)
    return Scores(batch.scores, correct, batch.metrics("reward/"),
                  {f"reward/{k}": list(v) for k, v in batch.components.items()})


def score_episodes(completions: Sequence[Completion]) -> Scores:
    """An environment's episodes (`rlvr.rollout.episode`), scored by the environment itself: each reward is the
    sum of the episode's step rewards, `correct` what its last step's info said; `reward/env` their mean."""
    episodes = [c.extra["episode"] for c in completions]
    rewards = [float(e["reward"]) for e in episodes]
    return Scores(rewards, [bool(e["correct"]) for e in episodes], {"reward/env": sum(rewards) / len(rewards)},
                  {"reward/env": rewards})
