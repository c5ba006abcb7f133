"""Training rewards and the periodic held-out evaluation of the loop.

Rewards go through `rlvr.rewards.CombinedReward`: the task's verifier plus any configured extra
terms (e.g. DAPO's overlong penalty), each made safe (an exception scores the fallback and is
counted as `reward/errors`). The evaluation reuses `rlvr.eval` (the code behind `rlvr eval`), so
training curves and `rlvr eval` numbers are the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rlvr.eval.evaluate import grade, summarize
from rlvr.rewards import BatchContext, CombinedReward, reward_from_name
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.tasks.base import Example, Task


def build_reward(task: Task, extra: Sequence[dict[str, Any]] = ()) -> CombinedReward:
    """The task's verifier (component `task`, weight 1 unless a term {name: task, weight: w} says
    otherwise) plus `extra` terms, each a dict {name: registry name, weight: float, options: {...}}
    (see rlvr.rewards.REWARDS)."""
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
    return CombinedReward([(task.reward_fn(), task_weight, "task"), *parts])


@dataclass
class Scores:
    rewards: list[float]  # combined reward per completion
    correct: list[bool]  # exact correctness per completion (task.is_correct)
    components: dict[str, float]  # mean of each named reward term, and the error count


def score_completions(reward: CombinedReward, task: Task, completions: Sequence[Completion],
                      examples: Sequence[Example], group_size: int, step: int, max_new_tokens: int) -> Scores:
    """Score completions[i] against examples[i] (groups of `group_size` contiguous)."""
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    texts = [c.text for c in completions]
    correct = [bool(task.is_correct(t, ex)) for t, ex in zip(texts, examples)]
    ctx = BatchContext(group_size=group_size, step=step, lengths=[len(c.token_ids) for c in completions],
                       max_new_tokens=max_new_tokens, correct=correct)
    batch = reward.score_batch([c.prompt for c in completions], texts, list(examples), ctx)
    return Scores(batch.scores, correct, batch.metrics("reward/"))


def _rows(records: list[dict[str, Any]], mode: str, limit: int) -> list[dict[str, Any]]:
    keys = ("prompt", "completion", "answer", "reward", "correct", "finish_reason")
    return [{"mode": mode, **{k: r[k] for k in keys}} for r in records[:limit]]


def evaluate_heldout(engine: RolloutEngine, task: Task, examples: Sequence[Example], max_new_tokens: int,
                     samples: int, temperature: float, seed: int, log_samples: int
                     ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy and sampled evaluation -> (metrics, sample rows for samples.jsonl).

    Metrics: eval/greedy_{accuracy,reward,length}, eval/sampled_{accuracy,reward} and eval/pass@k
    (unbiased estimator, Chen et al. 2021) for k = 1, 2, 4, ... up to `samples`.
    """
    greedy = grade(engine, task, examples, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    g = summarize(greedy, 1)
    metrics = {"eval/greedy_accuracy": g["accuracy"], "eval/greedy_reward": g["reward"],
               "eval/greedy_length": g["mean_length"]}
    rows = _rows(greedy, "greedy", log_samples)
    if samples > 0:
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        sampled = grade(engine, task, examples, samples, sampling)
        ks = sorted({2**j for j in range(samples.bit_length()) if 2**j <= samples} | {samples})
        s = summarize(sampled, samples, ks)
        metrics |= {"eval/sampled_accuracy": s["accuracy"], "eval/sampled_reward": s["reward"],
                    **{f"eval/pass@{k}": s[f"pass@{k}"] for k in ks}}
        rows += _rows(sampled, "sampled", log_samples)
    return metrics, rows
