"""The thinking-budget claim on a tiny model taught to think: accuracy against the budget.

Qwen3 (Yang et al. 2025, sec. 4.3) cuts the thinking at a token budget, inserts its early-stop phrase
and `</think>`, and lets the model answer from the partial reasoning; accuracy grows with the budget.
A tiny model has no reasoning to cut, so one is taught: SFT on sort-4 demonstrations whose thinking
writes the sorted digits one by one (`<think>\n0 1 2 3\n</think>\n\n0 1 2 3`); a quarter of the rows
are cut at a random point of the thinking and continue with the early-stop text and the right answer,
so the model has seen the inserted phrase. `rlvr.thinking.budget_sweep` then measures greedy accuracy
on held-out prompts at each budget (`ThinkingBudgetEngine`).

The cut falls anywhere before the closing tag is complete, inside the tag included. The character
tokenizer spells `</think>` in 8 tokens (Qwen3's is one token, which a budget cannot split), so the
budgets 17-23 cut inside it; demonstrations cut only inside the digits never show the early-stop text
after a partial tag, and a model taught on them answers almost nothing at those budgets: a dip in the
curve that is the tokenizer's, not the thinking's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

from rlvr.config import load_config
from rlvr.pipelines.experiments.claims import Claim, fmt
from rlvr.pipelines.experiments.figures import band, pyplot, save
from rlvr.pipelines.experiments.lecture17_lm import TASK
from rlvr.pipelines.experiments.stats import (ALPHA, CONTRADICTED, HOLDS, all_of, direction, one_sample_test,
                                              paired_test)
from rlvr.models import load_model_and_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import get_task
from rlvr.thinking import EARLY_STOP_TEXT, THINK_END, THINK_START, budget_sweep
from rlvr.train.loop import train

CUT_SHARE = 0.25  # share of SFT rows whose thinking is cut and closed by the early-stop text


def thinking_rows(task, n: int, seed: int) -> list[dict]:
    """SFT rows {prompt, completion}: the thinking writes the sorted digits, the answer repeats them. A
    cut row stops the thinking after 1 .. len - 1 of its characters (`<think>` kept whole, `</think>` never
    complete) and continues with the early-stop text and the answer."""
    rng = random.Random(seed)
    rows = []
    for ex in task.train_examples(n, seed):
        answer = ex.answer
        thinking = f"{THINK_START}\n{answer}\n{THINK_END}"
        if rng.random() < CUT_SHARE:
            cut = thinking[: rng.randint(len(THINK_START) + 1, len(thinking) - 1)]
            completion = f"{cut}{EARLY_STOP_TEXT}{answer}"
        else:
            completion = f"{thinking}\n\n{answer}"
        rows.append({"prompt": ex.prompt, "completion": completion})
    return rows


def thinking_curve(runs: Path, seed: int, threads: int, budgets: Sequence[int], sft_steps: int,
                   eval_prompts: int) -> list[float]:
    """Greedy accuracy at each budget of one seed's model taught to think."""
    task = get_task(TASK["name"], **TASK["options"])
    folder = runs / f"seed{seed}" / "thinking"
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in thinking_rows(task, 4000, seed)), encoding="utf-8")
    # SFT is what is measured; the one RL step the loop requires is taken at learning rate ~0
    cfg = load_config(None, [f"seed={seed}", f"out_dir={folder / 'run'}", "model.tiny_preset=test",
                             f"sft.data={data}", f"sft.steps={sft_steps}", "sft.batch_size=32", "sft.lr=3e-3",
                             "train.steps=1", "train.batch_size=8", "train.group_size=4", "optim.lr=1e-12",
                             "eval.every=0", "eval.samples=0", "task.eval_size=4", "log.progress=false",
                             "log.report_to=[]", "checkpoint.every=0", f"threads={threads}",
                             "rollout.max_new_tokens=8"])
    warm = folder / "run" / "sft_model"
    if not warm.is_dir():  # a finished run is read back, not redone
        train(cfg)
    model, tokenizer = load_model_and_tokenizer(warm)
    points = budget_sweep(HFEngine(model, tokenizer), task, task.eval_examples(eval_prompts, seed), budgets,
                          sampling=SamplingParams(temperature=0.0, max_new_tokens=12))
    return [p.accuracy for p in points]


def budget_tests(budgets: Sequence[int], curves: list[list[float]], alpha: float = ALPHA) -> tuple[str, str]:
    """(verdict, stated test) of "accuracy grows with the budget": the per-seed least-squares slope of
    accuracy on budget is > 0 (one-sample t), and no step from one budget to the next lowers accuracy
    (paired t per step, Bonferroni over the steps: level alpha / steps)."""
    mean_b = sum(budgets) / len(budgets)
    sxx = sum((b - mean_b) ** 2 for b in budgets)
    slopes = [sum((b - mean_b) * a for b, a in zip(budgets, c)) / sxx for c in curves]
    trend = one_sample_test(slopes)
    level = alpha / (len(budgets) - 1)
    steps = [(budgets[i], budgets[i + 1], paired_test([c[i + 1] for c in curves], [c[i] for c in curves]))
             for i in range(len(budgets) - 1)]
    drops = [(lo, hi, t) for lo, hi, t in steps if direction(t, -1, level) == HOLDS]
    worst = min(steps, key=lambda s: s[2].t)
    stated = (f"trend: {trend.describe()} (accuracy per budget token, per-seed slope); steps: the largest drop is "
              f"{worst[0]} -> {worst[1]}, {worst[2].describe()}; " + (
                  f"significant drops at level {level:.4f}: " + ", ".join(f"{lo} -> {hi}" for lo, hi, _ in drops)
                  if drops else f"no step lowers accuracy at level {alpha} / {len(steps)} = {level:.4f} (Bonferroni)")
              + "; holds if the slope is > 0 at p < 0.05 and no step drops")
    return all_of(direction(trend, +1), CONTRADICTED if drops else HOLDS), stated


def thinking_claim(curves: list[list[float]], figures: Path, budgets: Sequence[int], sft_steps: int,
                   eval_prompts: int) -> Claim:
    _plot(budgets, curves, figures / "thinking_budget.png")
    verdict, stated = budget_tests(budgets, curves)
    by_budget = "; ".join(f"{b}: {fmt([c[i] for c in curves], 2)}" for i, b in enumerate(budgets))
    setup = (f"Tiny model, {sft_steps} SFT steps on thinking demonstrations (this module's docstring), "
             f"{len(curves)} seeds, greedy answers on {eval_prompts} held-out sort-4 prompts. A full thinking is "
             f"{len(THINK_START) + 17} tokens up to the end of `</think>` (character tokenizer); budgets from "
             f"{budgets[0]} to {budgets[-1]}. Accuracy by budget: {by_budget}. Figure: mean and 95% confidence "
             f"band over seeds. Far smaller than Qwen3's (reasoning models, budgets of thousands of tokens, "
             f"AIME-style tasks).")
    mid = len(budgets) // 2
    at = "; ".join(f"budget {budgets[i]}: {fmt([c[i] for c in curves], 2)}" for i in (0, mid, len(budgets) - 1))
    return Claim("thinking-budget", "A larger thinking budget gives higher accuracy (Qwen3's thinking budget)",
                 f"accuracy {at}", verdict, stated, len(curves), setup, ["thinking_budget.png"])


def _plot(budgets: Sequence[int], curves: list[list[float]], path: Path) -> Path:
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    for i, c in enumerate(curves):
        ax.plot(budgets, c, color="C0", alpha=0.3, linewidth=0.8, label="one seed" if i == 0 else None)
    band(ax, budgets, [list(col) for col in zip(*curves)], "C0", f"mean of {len(curves)} seeds, 95% CI",
         level=0.95, marker="o")
    ax.axvline(len(THINK_START) + 17, color="gray", linestyle=":", linewidth=1, label="thinking ends (</think>)")
    ax.set(xlabel="thinking budget (tokens)", ylabel="greedy accuracy", title="Accuracy against thinking budget",
           ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    return save(fig, path)
