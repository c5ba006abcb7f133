"""The thinking-budget claim on a tiny model taught to think: accuracy against the budget.

Qwen3 (Yang et al. 2025, sec. 4.3) cuts the thinking at a token budget, inserts its early-stop phrase
and `</think>`, and lets the model answer from the partial reasoning; accuracy grows with the budget.
A tiny model has no reasoning to cut, so one is taught: SFT on sort-4 demonstrations whose thinking
writes the sorted digits one by one (`<think>\\n0 1 2 3\\n</think>\\n\\n0 1 2 3`); a quarter of the rows
are cut at a random point of the thinking and continue with the early-stop text and the right answer,
so the model has seen the inserted phrase. `rlvr.thinking.budget_sweep` then measures greedy accuracy
on held-out prompts at each budget (`ThinkingBudgetEngine`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

from rlvr.config import load_config
from rlvr.pipelines.experiments.claims import Claim, fmt, mean_sd
from rlvr.pipelines.experiments.lecture17_lm import TASK
from rlvr.models import load_model_and_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import get_task
from rlvr.thinking import EARLY_STOP_TEXT, THINK_END, THINK_START, budget_sweep
from rlvr.train.loop import train

CUT_SHARE = 0.25  # share of SFT rows whose thinking is cut and closed by the early-stop text


def thinking_rows(task, n: int, seed: int) -> list[dict]:
    """SFT rows {prompt, completion}: the thinking writes the sorted digits, the answer repeats them."""
    rng = random.Random(seed)
    rows = []
    for ex in task.train_examples(n, seed):
        answer = ex.answer
        thinking = f"{THINK_START}\n{answer}"
        if rng.random() < CUT_SHARE:
            cut = thinking[: rng.randint(len(THINK_START) + 1, len(thinking))]
            completion = f"{cut}{EARLY_STOP_TEXT}{answer}"
        else:
            completion = f"{thinking}\n{THINK_END}\n\n{answer}"
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


def thinking_claim(curves: list[list[float]], figures: Path, budgets: Sequence[int], sft_steps: int,
                   eval_prompts: int) -> Claim:
    _plot(budgets, curves, figures / "thinking_budget.png")
    low, high = [c[0] for c in curves], [c[-1] for c in curves]
    by_budget = "; ".join(f"{b}: {fmt([c[i] for c in curves], 2)}" for i, b in enumerate(budgets))
    setup = (f"Tiny model, {sft_steps} SFT steps on thinking demonstrations (this module's docstring), "
             f"{len(curves)} seeds, greedy answers on {eval_prompts} held-out sort-4 prompts. A full thinking is "
             f"about {len(THINK_START) + 9} tokens (character tokenizer). Accuracy by budget: {by_budget}. Far "
             f"smaller than Qwen3's (reasoning models, budgets of thousands of tokens, AIME-style tasks).")
    return Claim("thinking-budget", "A larger thinking budget gives higher accuracy (Qwen3's thinking budget)",
                 f"accuracy at budget {budgets[0]} {fmt(low, 2)} vs at {budgets[-1]} {fmt(high, 2)}",
                 mean_sd(high)[0] > mean_sd(low)[0], len(curves), setup, ["thinking_budget.png"])


def _plot(budgets: Sequence[int], curves: list[list[float]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, c in enumerate(curves):
        ax.plot(budgets, c, color="C0", alpha=0.3, marker="o", label="one seed" if i == 0 else None)
    ax.plot(budgets, [sum(v) / len(v) for v in zip(*curves)], color="C0", marker="o", label="mean")
    ax.set(xlabel="thinking budget (tokens)", ylabel="greedy accuracy", title="Accuracy against thinking budget",
           ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
