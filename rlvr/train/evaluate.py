"""The periodic held-out evaluation of the loop.

It reuses `rlvr.eval` (the code behind `rlvr eval`), so training curves and `rlvr eval` numbers are
the same computation.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rlvr.eval.evaluate import grade, summarize
from rlvr.eval.metrics import default_ks
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

    Metrics: eval/greedy_{accuracy,reward,length}, with a task that defines a format eval/greedy_format (the
    share stating the answer as asked) and eval/greedy_formatted_wrong (stated as asked, but wrong: the value, not
    the format), eval/sampled_{accuracy,reward} and eval/pass@k (unbiased estimator, Chen et al. 2021) for
    k = 1, 2, 4, ... up to `samples`; over the examples without an `eval_group`, and the same under
    eval/<group>/ for each group (`eval_groups`).
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


def eval_groups(examples: Sequence[Example]) -> dict[str | None, list[int]]:
    """The held-out examples by their `eval_group` field (None: the main set), as indices, in order: a task may
    hold out a part of its set that training must not reach in another way (`word_problems`' held-out families),
    reported as metrics of its own."""
    groups: dict[str | None, list[int]] = {}
    for i, example in enumerate(examples):
        groups.setdefault(example.fields.get("eval_group"), []).append(i)
    return groups


def _by_group(records: list[dict[str, Any]], groups: dict[str | None, list[int]], n: int) -> dict:
    """(metric prefix, the group's records) per group: an example's n records are contiguous, as graded."""
    return {f"eval/{name}/" if name else "eval/": [r for i in rows for r in records[i * n:(i + 1) * n]]
            for name, rows in groups.items()}


def _greedy(prefix: str, records: list[dict[str, Any]]) -> dict[str, float]:
    g = summarize(records, 1)
    metrics = {f"{prefix}greedy_accuracy": g["accuracy"], f"{prefix}greedy_reward": g["reward"],
               f"{prefix}greedy_length": g["mean_length"], **_turns(records, f"{prefix}greedy")}
    if "format_error_rate" in g:  # a task that says what a well-formatted answer is
        metrics |= {f"{prefix}greedy_format": 1.0 - g["format_error_rate"],
                    f"{prefix}greedy_formatted_wrong": g["formatted_wrong_rate"]}
    return metrics


def _sampled(prefix: str, records: list[dict[str, Any]], samples: int) -> dict[str, float]:
    ks = default_ks(samples)
    s = summarize(records, samples, ks)
    return {f"{prefix}sampled_accuracy": s["accuracy"], f"{prefix}sampled_reward": s["reward"],
            **_turns(records, f"{prefix}sampled"), **{f"{prefix}pass@{k}": s[f"pass@{k}"] for k in ks}}


def _evaluate(grade_fn: Callable[[Sequence[Example], int, SamplingParams], list[dict[str, Any]]],
              examples: Sequence[Example], max_new_tokens: int, samples: int, temperature: float, seed: int,
              log_samples: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
    groups, metrics = eval_groups(examples), {}
    greedy = grade_fn(examples, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    for prefix, records in _by_group(greedy, groups, 1).items():
        metrics |= _greedy(prefix, records)
    rows = _rows(greedy, "greedy", log_samples)
    if samples > 0:
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        sampled = grade_fn(examples, samples, sampling)
        for prefix, records in _by_group(sampled, groups, samples).items():
            metrics |= _sampled(prefix, records, samples)
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
        info = [t.get("info", {}) for t in episode["turns"]]
        records.append({"index": i // n, "prompt": c.prompt, "completion": c.text, "answer": example.answer,
                        "correct": bool(episode["correct"]), "reward": float(episode["reward"]),
                        "length": len(c.token_ids), "finish_reason": c.finish_reason, "format_ok": None,
                        "answer_key": last, "components": {"episode": episode}, "turns": len(episode["turns"]),
                        "tool_calls": sum(float(i.get("tool_calls", 0)) for i in info),
                        "tool_errors": sum(float(i.get("tool_errors", 0)) for i in info),
                        "tool_calls_correct": sum(float(i.get("tool_calls_correct", 0)) for i in info)})
    return records


def _turns(records: list[dict[str, Any]], name: str) -> dict[str, float]:
    """Mean turns per episode and per solved episode (when one was solved), as `{name}_turns` (`eval/greedy`), tool
    calls per episode, the share of episodes that made one (`_tool_call_episodes`) and, when one was made, the
    shares of the calls that failed (`_tool_call_errors`) and that were correct (`_tool_calls_correct`: the
    environment's `tool_calls_correct`, e.g. the `tools` environment's calls that returned the reference answer);
    nothing for single completions."""
    if not records or "turns" not in records[0]:
        return {}
    solved = [r["turns"] for r in records if r["correct"]]
    calls = sum(r["tool_calls"] for r in records)
    out = {f"{name}_turns": sum(r["turns"] for r in records) / len(records),
           f"{name}_tool_calls": calls / len(records),
           f"{name}_tool_call_episodes": sum(r["tool_calls"] > 0 for r in records) / len(records)}
    if calls:
        out[f"{name}_tool_call_errors"] = sum(r["tool_errors"] for r in records) / calls
        out[f"{name}_tool_calls_correct"] = sum(r["tool_calls_correct"] for r in records) / calls
    return out | ({f"{name}_turns_solved": sum(solved) / len(solved)} if solved else {})
