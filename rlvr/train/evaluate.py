"""The periodic held-out evaluation of the loop.

It reuses `rlvr.eval` (the code behind `rlvr eval`), so training curves and `rlvr eval` numbers are
the same computation.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlvr.eval.evaluate import grade, summarize
from rlvr.rewards.combine import CombinedReward
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.tasks.base import Example, Task


def _rows(records: list[dict[str, Any]], mode: str, limit: int) -> list[dict[str, Any]]:
    """samples.jsonl rows: the graded fields, then the reward's components (`task/<term>`) flat, as the
    HTML report shows them."""
    keys = ("prompt", "completion", "answer", "reward", "correct", "finish_reason")
    return [{"mode": mode, **{k: r[k] for k in keys}, **r["components"]} for r in records[:limit]]


def evaluate_heldout(engine: RolloutEngine, task: Task, examples: Sequence[Example], max_new_tokens: int,
                     samples: int, temperature: float, seed: int, log_samples: int,
                     reward: CombinedReward | None = None) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy and sampled evaluation -> (metrics, sample rows for samples.jsonl), graded by `reward` (the
    task's verifier made safe; default as in `rlvr.eval.grade`).

    Metrics: eval/greedy_{accuracy,reward,length}, eval/sampled_{accuracy,reward} and eval/pass@k
    (unbiased estimator, Chen et al. 2021) for k = 1, 2, 4, ... up to `samples`.
    """
    greedy = grade(engine, task, examples, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens),
                   reward)
    g = summarize(greedy, 1)
    metrics = {"eval/greedy_accuracy": g["accuracy"], "eval/greedy_reward": g["reward"],
               "eval/greedy_length": g["mean_length"]}
    rows = _rows(greedy, "greedy", log_samples)
    if samples > 0:
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        sampled = grade(engine, task, examples, samples, sampling, reward)
        ks = sorted({2**j for j in range(samples.bit_length()) if 2**j <= samples} | {samples})
        s = summarize(sampled, samples, ks)
        metrics |= {"eval/sampled_accuracy": s["accuracy"], "eval/sampled_reward": s["reward"],
                    **{f"eval/pass@{k}": s[f"pass@{k}"] for k in ks}}
        rows += _rows(sampled, "sampled", log_samples)
    return metrics, rows
