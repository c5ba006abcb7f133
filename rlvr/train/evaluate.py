"""The periodic held-out evaluation of the loop.

It reuses `rlvr.eval` (the code behind `rlvr eval`), so training curves and `rlvr eval` numbers are
the same computation.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rlvr.eval.evaluate import grade, summarize
from rlvr.rewards.combine import CombinedReward
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
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
    return _evaluate(lambda ex, n, sampling: grade(engine, task, ex, n, sampling, reward), examples,
                     max_new_tokens, samples, temperature, seed, log_samples)


Episodes = Callable[[Sequence[Example], int, SamplingParams], list[Completion]]  # (items, n, sampling) -> episodes


def evaluate_episodes(play: Episodes, examples: Sequence[Example], max_new_tokens: int, samples: int,
                      temperature: float, seed: int, log_samples: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """`evaluate_heldout` for an environment's episodes (`play`), success as accuracy, with the turns per episode
    and per solved episode (eval/greedy_turns, eval/greedy_turns_solved, eval/sampled_turns, ...)."""
    return _evaluate(lambda ex, n, sampling: grade_episodes(play, ex, n, sampling), examples, max_new_tokens,
                     samples, temperature, seed, log_samples)


def _evaluate(grade_fn: Callable[[Sequence[Example], int, SamplingParams], list[dict[str, Any]]],
              examples: Sequence[Example], max_new_tokens: int, samples: int, temperature: float, seed: int,
              log_samples: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
    greedy = grade_fn(examples, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    g = summarize(greedy, 1)
    metrics = {"eval/greedy_accuracy": g["accuracy"], "eval/greedy_reward": g["reward"],
               "eval/greedy_length": g["mean_length"], **_turns(greedy, "greedy")}
    rows = _rows(greedy, "greedy", log_samples)
    if samples > 0:
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        sampled = grade_fn(examples, samples, sampling)
        ks = sorted({2**j for j in range(samples.bit_length()) if 2**j <= samples} | {samples})
        s = summarize(sampled, samples, ks)
        metrics |= {"eval/sampled_accuracy": s["accuracy"], "eval/sampled_reward": s["reward"],
                    **_turns(sampled, "sampled"), **{f"eval/pass@{k}": s[f"pass@{k}"] for k in ks}}
        rows += _rows(sampled, "sampled", log_samples)
    return metrics, rows


def grade_episodes(play: Episodes, examples: Sequence[Example], n: int, sampling: SamplingParams
                   ) -> list[dict[str, Any]]:
    """`rlvr.eval.grade`'s records for an environment's episodes (n per example, as `play` runs them), graded by
    the environment: reward, correct, the tokens after the prompt, the turns, and the episode (every turn) for
    samples.jsonl; the maj@k vote is the last assistant message."""
    records = []
    for i, c in enumerate(play(examples, n, sampling)):
        episode, example = c.extra["episode"], examples[i // n]
        last = episode["turns"][-1]["assistant"].strip() if episode["turns"] else ""
        records.append({"index": i // n, "prompt": c.prompt, "completion": c.text, "answer": example.answer,
                        "correct": bool(episode["correct"]), "reward": float(episode["reward"]),
                        "length": len(c.token_ids), "finish_reason": c.finish_reason, "format_ok": None,
                        "answer_key": last, "components": {"episode": episode}, "turns": len(episode["turns"])})
    return records


def _turns(records: list[dict[str, Any]], mode: str) -> dict[str, float]:
    """Mean turns per episode and per solved episode (when one was solved); nothing for single completions."""
    if not records or "turns" not in records[0]:
        return {}
    solved = [r["turns"] for r in records if r["correct"]]
    out = {f"eval/{mode}_turns": sum(r["turns"] for r in records) / len(records)}
    return out | ({f"eval/{mode}_turns_solved": sum(solved) / len(solved)} if solved else {})
