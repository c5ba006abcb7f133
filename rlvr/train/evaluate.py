"""Scoring completions and evaluating a fixed held-out set, greedy and sampled.

`evaluate` is the entry point for `rlvr eval` and the loop's periodic evaluation; it only talks to
the engine through the RolloutEngine protocol, so any engine (HF, vLLM, remote) can be evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvr.rewards.base import RewardFn, RewardOutput
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.tasks.base import Example, Task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), computed as a product so it
    never forms huge binomials."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass
class Scores:
    """Per-completion rewards, exact correctness and named reward components (lists of floats)."""

    rewards: list[float]
    correct: list[bool]
    components: dict[str, list[float]] = field(default_factory=dict)


def score_completions(task: Task, reward_fn: RewardFn, completions: Sequence[Completion],
                      examples: Sequence[Example]) -> Scores:
    """Reward and exact-match correctness of completions[i] against examples[i]."""
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    rewards, correct, components = [], [], {}
    for i, (comp, ex) in enumerate(zip(completions, examples)):
        out = reward_fn(comp.prompt, comp.text, ex.as_dict())
        score = out.score if isinstance(out, RewardOutput) else out
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            raise ValueError(f"reward function returned {score!r} for completion {comp.text!r}; expected a "
                             "finite float")
        rewards.append(float(score))
        correct.append(bool(task.is_correct(comp.text, ex)))
        for name, value in (out.components if isinstance(out, RewardOutput) else {}).items():
            components.setdefault(name, [0.0] * len(completions))[i] = float(value)
    return Scores(rewards, correct, components)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _sample_rows(mode: str, completions: Sequence[Completion], examples: Sequence[Example],
                 scores: Scores, limit: int) -> list[dict[str, Any]]:
    return [{"mode": mode, "prompt": c.prompt, "completion": c.text, "answer": ex.answer, "reward": r,
             "correct": ok, "finish_reason": c.finish_reason}
            for c, ex, r, ok in list(zip(completions, examples, scores.rewards, scores.correct))[:limit]]


def evaluate(engine: RolloutEngine, task: Task, examples: Sequence[Example], max_new_tokens: int,
             samples: int = 4, temperature: float = 1.0, seed: int = 0, log_samples: int = 8
             ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy and sampled evaluation of `examples`.

    Returns (metrics, sample rows). Metrics: eval/greedy_{reward,accuracy,length},
    eval/sampled_{reward,accuracy}, and eval/pass@k for k = 1, 2, 4, ... up to `samples`.
    """
    reward_fn = task.reward_fn()
    prompts = [ex.prompt for ex in examples]
    greedy = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    g = score_completions(task, reward_fn, greedy, examples)
    metrics = {"eval/greedy_reward": _mean(g.rewards), "eval/greedy_accuracy": _mean(g.correct),
               "eval/greedy_length": _mean([len(c.token_ids) for c in greedy])}
    rows = _sample_rows("greedy", greedy, examples, g, log_samples)
    if samples > 0:
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        sampled = engine.generate(prompts, samples, sampling)
        repeated = [ex for ex in examples for _ in range(samples)]
        s = score_completions(task, reward_fn, sampled, repeated)
        metrics["eval/sampled_reward"] = _mean(s.rewards)
        metrics["eval/sampled_accuracy"] = _mean(s.correct)
        n_correct = [sum(s.correct[i * samples:(i + 1) * samples]) for i in range(len(examples))]
        for k in sorted({2**j for j in range(samples.bit_length()) if 2**j <= samples} | {samples}):
            metrics[f"eval/pass@{k}"] = _mean([pass_at_k(samples, c, k) for c in n_correct])
        rows += _sample_rows("sampled", sampled, repeated, s, log_samples)
    return metrics, rows
