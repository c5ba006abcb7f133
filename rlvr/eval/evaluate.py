"""Evaluate a model on a task: sample with any `RolloutEngine`, grade, summarise, write jsonl.

    metrics = evaluate(engine, task, task.eval_examples(100, 0), n=8,
                       sampling=SamplingParams(temperature=1.0, max_new_tokens=512), k_list=(1, 4, 8))

Metrics: accuracy (mean correctness of all samples), pass@k (unbiased), maj@k, mean reward,
mean completion length (tokens), format-error rate and the share of well-formatted wrong answers (when the
task defines a format) and truncation rate (finish_reason == "length").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rlvr.eval.metrics import maj_at_k, mean, pass_at_k, vote_keys
from rlvr.jsonl import write_jsonl
from rlvr.rewards.base import BatchContext
from rlvr.rewards.combine import CombinedReward
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.tasks.base import Example, Task


def _correct(task: Task, texts: list[str], examples: list[Example]) -> list[bool]:
    batch = getattr(task, "correct_batch", None)  # math tasks grade in parallel
    if batch is not None:
        return list(batch(texts, examples))
    return [bool(task.is_correct(t, e)) for t, e in zip(texts, examples)]


def answer_votes(task: Task, texts: Sequence[str], example: Example) -> list[Any]:
    """The maj@k votes of one prompt's completions: the task's `answer_key` (the stripped text for a task without
    one), answers its `same_answers` finds equal grouped under the first one's key (a task without it: equal keys)."""
    key, same = getattr(task, "answer_key", None), getattr(task, "same_answers", None)
    keys = [key(t, example) if key is not None else t.strip() for t in texts]
    return vote_keys(keys, texts, None if same is None else lambda pairs: same(pairs, example))


def grade(engine: RolloutEngine, task: Task, examples: Sequence[Example], n: int,
          sampling: SamplingParams, reward: CombinedReward | None = None) -> list[dict[str, Any]]:
    """One record per completion (prompt i's n samples contiguous), graded by the task; `reward`: the
    task's verifier made safe (default: `CombinedReward.single(task.reward_fn())`)."""
    if n < 1 or not examples:
        raise ValueError(f"need n >= 1 and at least one example, got n={n}, {len(examples)} examples")
    completions = engine.generate([e.prompt for e in examples], n, sampling)
    if len(completions) != len(examples) * n:
        raise ValueError(f"engine returned {len(completions)} completions for {len(examples)} x {n}")
    repeated = [e for e in examples for _ in range(n)]
    texts = [c.text for c in completions]
    correct = _correct(task, texts, repeated)
    reward = (reward or CombinedReward.single(task.reward_fn())).score_batch(
        [c.prompt for c in completions], texts, repeated,
        BatchContext(group_size=n, lengths=[len(c.token_ids) for c in completions],
                     max_new_tokens=sampling.max_new_tokens, correct=correct))
    fmt = getattr(task, "format_ok", None)
    votes = [v for j, e in enumerate(examples) for v in answer_votes(task, texts[j * n:(j + 1) * n], e)]
    return [{"index": i // n, "prompt": c.prompt, "completion": c.text, "answer": e.answer,
             "correct": ok, "reward": r, "length": len(c.token_ids), "finish_reason": c.finish_reason,
             "format_ok": None if fmt is None else bool(fmt(c.text, e)), "answer_key": votes[i],
             "components": {k: v[i] for k, v in reward.components.items() if k != "task"}}  # "task" = reward
            for i, (c, e, ok, r) in enumerate(zip(completions, repeated, correct, reward.scores))]


def summarize(records: Sequence[dict[str, Any]], n: int, k_list: Sequence[int] = (1,)) -> dict[str, float]:
    groups = [records[i:i + n] for i in range(0, len(records), n)]
    out = {"prompts": float(len(groups)), "samples_per_prompt": float(n),
           "accuracy": mean([float(r["correct"]) for r in records]),
           "reward": mean([r["reward"] for r in records]),
           "mean_length": mean([float(r["length"]) for r in records]),
           "truncation_rate": mean([float(r["finish_reason"] == "length") for r in records])}
    formats = [r for r in records if r["format_ok"] is not None]
    if formats:
        out["format_error_rate"] = mean([float(not r["format_ok"]) for r in formats])
        out["formatted_wrong_rate"] = mean([float(r["format_ok"] and not r["correct"]) for r in formats])
    for k in sorted(set(k_list)):
        if k > n:
            raise ValueError(f"k={k} needs at least k samples per prompt; n={n}")
        out[f"pass@{k}"] = mean([pass_at_k(n, sum(r["correct"] for r in g), k) for g in groups])
        out[f"maj@{k}"] = mean([maj_at_k([r["answer_key"] for r in g], [r["correct"] for r in g], k)
                                for g in groups])
    return out


# The keys of every row `evaluate` writes of `grade`'s records: how `rlvr eval --out` knows an earlier output of
# its own (a run's samples.jsonl has `step` and none of index, length, answer_key).
ROW_KEYS = frozenset({"mode", "index", "prompt", "completion", "answer", "correct", "reward", "length",
                      "finish_reason", "answer_key"})
_FIRST_LINE_LIMIT = 1 << 24  # bytes: a binary file (weights) without a newline is not read whole


def is_eval_jsonl(path: str | Path) -> bool:
    """Whether the file's first line is a graded sample as `evaluate` writes them (an earlier `rlvr eval`)."""
    try:
        with Path(path).open("rb") as f:
            row = json.loads(f.readline(_FIRST_LINE_LIMIT).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(row, dict) and ROW_KEYS <= row.keys() and row["mode"] in ("greedy", "sampled")


def evaluate(engine: RolloutEngine, task: Task, examples: Sequence[Example], n: int,
             sampling: SamplingParams, k_list: Sequence[int] = (1,), out: str | Path | None = None,
             mode: str | None = None) -> dict[str, float]:
    """Sample n completions per example, grade them and return the summary; with `out`, append
    the graded samples to that jsonl file."""
    if any(k > n for k in k_list):
        raise ValueError(f"every k in k_list must be <= n={n}, got {list(k_list)}")
    records = grade(engine, task, examples, n, sampling)
    if out is not None:
        mode = mode or ("greedy" if sampling.temperature == 0 else "sampled")
        write_jsonl(out, [{"mode": mode, **r} for r in records], append=True)  # graded samples, tagged
    return summarize(records, n, k_list)
