"""Accuracy against thinking budget: `rlvr eval --thinking-budget 64,128,256`.

For each budget the examples are answered through `ThinkingBudgetEngine`; the verifier
(`task.is_correct`) sees only the answer after `</think>`, so a correct number inside cut-off
reasoning does not count. Qwen3 (Sec. 4.3 and its Fig. 2 scaling curves) shows accuracy rising with
the budget; this sweep draws the same curve for any model and task.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.thinking.budget import ThinkingBudgetEngine


@dataclass
class BudgetPoint:
    budget: int
    accuracy: float  # share of (example, sample) pairs whose answer is correct
    mean_thinking_tokens: float  # tokens spent thinking (before any inserted early-stop text)
    exhausted: float  # share of samples whose thinking was cut by the budget
    n: int  # samples scored


def budget_sweep(engine: RolloutEngine, task: Any, examples: Sequence[Any], budgets: Sequence[int], *,
                 sampling: SamplingParams | None = None, answer_tokens: int | None = None,
                 n: int = 1) -> list[BudgetPoint]:
    """One `BudgetPoint` per budget (in the given order). `task` needs `is_correct(answer, example)`;
    `sampling` defaults to greedy with 64 answer tokens."""
    if not budgets:
        raise ValueError("budget_sweep needs at least one budget")
    if not examples:
        raise ValueError("budget_sweep needs at least one example")
    sampling = sampling or SamplingParams(temperature=0.0, max_new_tokens=64)
    prompts = [ex.prompt if hasattr(ex, "prompt") else ex["prompt"] for ex in examples]
    points = []
    for budget in budgets:
        completions = ThinkingBudgetEngine(engine, budget, answer_tokens=answer_tokens).generate(prompts, n, sampling)
        owners = [ex for ex in examples for _ in range(n)]
        correct = [bool(task.is_correct(c.extra["answer"], ex)) for c, ex in zip(completions, owners)]
        points.append(BudgetPoint(
            budget=budget,
            accuracy=sum(correct) / len(correct),
            mean_thinking_tokens=sum(c.extra["thinking_tokens"] for c in completions) / len(completions),
            exhausted=sum(c.extra["budget_exhausted"] for c in completions) / len(completions),
            n=len(correct),
        ))
    return points


def plot_budget_sweep(points: Sequence[BudgetPoint], path: str | Path, title: str = "") -> Path:
    """Accuracy (left axis) and share of cut-off thinking (right axis) against the budget, log2 x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pts = sorted(points, key=lambda p: p.budget)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    budgets = [p.budget for p in pts]
    ax.plot(budgets, [p.accuracy for p in pts], "o-", color="C0", label="accuracy")
    ax.set(xlabel="thinking budget (tokens)", ylabel="accuracy", ylim=(-0.02, 1.02),
           title=title or "Accuracy against thinking budget")
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    twin = ax.twinx()
    twin.plot(budgets, [p.exhausted for p in pts], "s--", color="C1", alpha=0.7, label="thinking cut by budget")
    twin.set(ylabel="share cut by the budget", ylim=(-0.02, 1.02))
    # one legend for both axes, under the plot: inside it, it covered budgets' tick labels or the curves
    ax.legend([*ax.get_lines(), *twin.get_lines()], [line.get_label() for line in (*ax.get_lines(),
              *twin.get_lines())], loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_budget_table(points: Sequence[BudgetPoint]) -> str:
    lines = [f"{'budget':>7} {'accuracy':>9} {'think tokens':>13} {'cut':>6} {'n':>5}"]
    lines += [f"{p.budget:>7} {p.accuracy:>9.3f} {p.mean_thinking_tokens:>13.1f} {p.exhausted:>6.2f} {p.n:>5}"
              for p in points]
    return "\n".join(lines)


def run_budget_eval(args: argparse.Namespace, engine: RolloutEngine, task: Any, examples: Sequence[Any],
                    out_dir: str | Path, sampling: SamplingParams | None = None) -> list[BudgetPoint]:
    """What `rlvr eval` runs when `args.thinking_budget` is set: sweep, print a table, write
    `thinking_budget.png` and `thinking_budget.jsonl` into `out_dir`."""
    points = budget_sweep(engine, task, examples, args.thinking_budget, sampling=sampling,
                          answer_tokens=args.answer_tokens)
    print(format_budget_table(points))
    name = getattr(task, "name", "")
    png = save_budget_sweep(points, out_dir, f"{name}: accuracy against thinking budget" if name else "")
    print(f"plot: {png}")
    return points


def save_budget_sweep(points: Sequence[BudgetPoint], out_dir: str | Path, title: str) -> Path:
    """`thinking_budget.png` and `thinking_budget.jsonl` (one point a line) in `out_dir`; the plot's path."""
    out_dir = Path(out_dir)
    png = plot_budget_sweep(points, out_dir / "thinking_budget.png", title=title)
    (out_dir / "thinking_budget.jsonl").write_text("".join(json.dumps(asdict(p)) + "\n" for p in points))
    return png
