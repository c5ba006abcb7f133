"""The claims of lecture 17 that need a language model, on CPU-sized runs of the real trainer.

Every run goes through the public API (`rlvr.config.load_config` + `rlvr.train.loop.train`) and is read
back from its `metrics.jsonl`. The setting: sort 4 digits (0..9, repeats allowed; a right answer is 8
tokens) with the 0/1 exact-match reward and a 20-token budget, so wrong answers can run long; a tiny
Qwen2-style model warm-started by SFT on the task's demonstrations. Per seed, three RL runs share one
warm start (the first run's `sft_model`):

    per_sequence   GRPO, each completion's loss divided by its own length (seq_mean_token_mean)
    constant       the same with Dr. GRPO's constant normaliser (seq_sum_constant, the budget)
    kimi_late      per_sequence + Kimi k1.5's length reward switched on at the middle step

and the warm start also samples the rollouts on which std scaling's weights are measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.config import load_config
from rlvr.core import centered_advantages, grpo_advantages
from rlvr.pipelines.experiments.claims import Claim, fmt, mean_sd, se_of_difference
from rlvr.models import load_model_and_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import get_task
from rlvr.train.loop import train

TASK = {"name": "sort", "options": {"length": 4, "reward": "sparse"}}


@dataclass
class LMSizes:
    seeds: int = 3
    sft_steps: int = 400
    rl_steps: int = 30
    batch_size: int = 64
    group_size: int = 8
    max_new_tokens: int = 20
    eval_size: int = 64
    rollout_prompts: int = 64  # prompts whose groups measure std scaling's weights
    threads: int = 1  # torch threads per process; the workers fill the cores


def _overrides(out: Path, seed: int, s: LMSizes) -> list[str]:
    return [f"seed={seed}", f"out_dir={out}", "model.tiny_preset=test", f"task.name={TASK['name']}",
            "task.options={length: 4, reward: sparse}", f"task.eval_size={s.eval_size}", "task.train_size=4000",
            f"sft.steps={s.sft_steps}", "sft.batch_size=32", "sft.lr=3e-3", f"rollout.max_new_tokens={s.max_new_tokens}",
            "algorithm.advantage=grpo", "algorithm.beta=0.0", f"train.steps={s.rl_steps}",
            f"train.batch_size={s.batch_size}", f"train.group_size={s.group_size}", "optim.lr=3e-4",
            "optim.max_grad_norm=1.0", "eval.every=0", "eval.samples=0", "log.progress=false",
            "log.report_to=[]", "checkpoint.every=0", f"threads={s.threads}"]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _late_mean(rows: list[dict], key: str, first_step: int) -> float:
    values = [r[key] for r in rows if r.get("step", 0) >= first_step and key in r]
    return sum(values) / len(values) if values else float("nan")


def run_seed(out: Path, seed: int, s: LMSizes) -> dict[str, list[dict]]:
    """{variant: metrics rows} of one seed: per_sequence (with the SFT warm start), then constant and
    kimi_late from that warm start. A run whose metrics already reach the last step is read, not redone."""
    kimi = f"task.rewards=[{{name: kimi_length, weight: 1.0, options: {{start_step: {s.rl_steps // 2 + 1}}}}}]"
    first = out / f"seed{seed}" / "per_sequence"
    warm = first / "sft_model"
    plan = [("per_sequence", ["algorithm.aggregation=seq_mean_token_mean"]),
            ("constant", ["sft.steps=0", f"model.path={warm}", "algorithm.aggregation=seq_sum_constant"]),
            ("kimi_late", ["sft.steps=0", f"model.path={warm}", "algorithm.aggregation=seq_mean_token_mean", kimi])]
    rows = {}
    for name, extra in plan:
        run_dir = out / f"seed{seed}" / name
        done = (run_dir / "metrics.jsonl").is_file() and any(r.get("step") == s.rl_steps for r in _metrics(run_dir))
        if not done:
            train(load_config(None, _overrides(run_dir, seed, s) + extra))
        rows[name] = _metrics(run_dir)
    return rows


def collect(per_seed: list[dict[str, list[dict]]]) -> dict[str, list[list[dict]]]:
    """[{variant: rows} per seed] -> {variant: [rows per seed]}."""
    return {name: [seed_runs[name] for seed_runs in per_seed] for name in per_seed[0]}


def _plot_series(runs: dict[str, list[list[dict]]], keys: list[tuple[str, str]], path: Path, marker: int = 0) -> Path:
    """One panel per (metric key, title), one line per variant (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4))
    for ax, (key, title) in zip(axes, keys):
        for i, (name, per_seed) in enumerate(runs.items()):
            steps = sorted({r["step"] for rows in per_seed for r in rows if key in r})
            mean = [sum(vals) / len(vals) for st in steps
                    if (vals := [r[key] for rows in per_seed for r in rows if r["step"] == st and key in r])]
            ax.plot(steps, mean, color=f"C{i}", label=f"{name} (mean of {len(per_seed)} seeds)")
        if marker:
            ax.axvline(marker, color="gray", linestyle=":", linewidth=1)
        ax.set(xlabel="RL step", title=title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def length_bias_claim(runs: dict[str, list[list[dict]]], out: Path, s: LMSizes) -> Claim:
    late = s.rl_steps // 2 + 1
    per_seq = [_late_mean(rows, "completion_length/wrong", late) for rows in runs["per_sequence"]]
    const = [_late_mean(rows, "completion_length/wrong", late) for rows in runs["constant"]]
    acc = {k: [_late_mean(rows, "accuracy", late) for rows in runs[k]] for k in ("per_sequence", "constant")}
    _plot_series({k: runs[k] for k in ("per_sequence", "constant")},
                 [("completion_length/wrong", "Length of wrong answers (tokens)"), ("accuracy", "Training accuracy")],
                 out / "length_bias.png")
    setup = (f"Sort 4 digits, exact-match reward, budget {s.max_new_tokens} tokens (a right answer is 8), tiny "
             f"model after {s.sft_steps} SFT steps, GRPO, {s.rl_steps} RL steps of {s.batch_size} completions "
             f"(groups of {s.group_size}), {s.seeds} seeds, the two normalisers from the same warm start. Number: "
             f"mean length of the wrong training completions over steps {late}-{s.rl_steps}. Training accuracy "
             f"there: per-sequence {fmt(acc['per_sequence'])}, constant {fmt(acc['constant'])}. A difference under 2 "
             f"standard errors is reported as undecided. Far smaller than "
             f"Liu et al. (2025): Qwen2.5 models, hundreds of steps, thousands of tokens.")
    return Claim("length-bias", "Per-sequence length normalisation lets wrong answers grow longer than Dr. GRPO's "
                 "constant normaliser", f"wrong-answer length per-sequence {fmt(per_seq, 2)} vs constant "
                 f"{fmt(const, 2)}; {_difference(per_seq, const)}", _direction(per_seq, const), s.seeds,
                 setup, ["length_bias.png"])


def _direction(a: list[float], b: list[float]) -> bool | None:
    """mean(a) > mean(b) by at least 2 standard errors: True; below by as much: False; else None (noise)."""
    d, se = mean_sd(a)[0] - mean_sd(b)[0], se_of_difference(a, b)
    return None if abs(d) < 2 * se or d == 0 else d > 0


def _difference(a: list[float], b: list[float]) -> str:
    """'difference d ± se (standard error), within noise' when |d| < 2 se: a direction is not a size."""
    d, se = mean_sd(a)[0] - mean_sd(b)[0], se_of_difference(a, b)
    return f"difference {d:+.2f} ± {se:.2f} (s.e.){', within noise' if abs(d) < 2 * se else ''}"


def kimi_claim(runs: dict[str, list[list[dict]]], out: Path, s: LMSizes) -> Claim:
    start = s.rl_steps // 2 + 1
    length = {k: [_late_mean(rows, "completion_length", start) for rows in runs[k]] for k in ("per_sequence", "kimi_late")}
    acc = {k: [_late_mean(rows, "accuracy", start) for rows in runs[k]] for k in ("per_sequence", "kimi_late")}
    final = {k: [rows[-1].get("eval/greedy_accuracy", float("nan")) for rows in runs[k]] for k in acc}
    _plot_series({k: runs[k] for k in ("per_sequence", "kimi_late")},
                 [("completion_length", "Completion length (tokens)"), ("accuracy", "Training accuracy")],
                 out / "kimi_length.png", marker=start)
    shorter = _direction(length["per_sequence"], length["kimi_late"])
    kept = mean_sd(acc["kimi_late"])[0] >= mean_sd(acc["per_sequence"])[0] - 2 * se_of_difference(
        acc["kimi_late"], acc["per_sequence"])
    setup = (f"The per-sequence runs of the length-bias claim, against the same runs with Kimi k1.5's length reward "
             f"(weight 1) switched on from step {start} of {s.rl_steps} (dotted line). Numbers over steps "
             f"{start}-{s.rl_steps}: completion length, and training accuracy (without: {fmt(acc['per_sequence'])}; "
             f"with: {fmt(acc['kimi_late'])}); held-out greedy accuracy at the end: without "
             f"{fmt(final['per_sequence'])}, with {fmt(final['kimi_late'])}. Holds = shorter, and accuracy not "
             f"lower by more than 2 standard errors; a length difference under 2 standard errors is undecided. "
             f"Far smaller than Kimi k1.5 (long-CoT models, the reward "
             f"added after a warm-up phase of a large run).")
    return Claim("kimi-length", "Kimi's length reward switched on late shortens completions without losing "
                 "accuracy", f"length with {fmt(length['kimi_late'], 2)} vs without {fmt(length['per_sequence'], 2)} "
                 f"({_difference(length['kimi_late'], length['per_sequence'])}); "
                 f"training accuracy with {fmt(acc['kimi_late'])} vs without {fmt(acc['per_sequence'])}",
                 None if shorter is None else shorter and kept, s.seeds, setup, ["kimi_length.png"])


def std_weights(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group (N/G,): #correct, mean |A| under GRPO and under centered deltas (0/1 rewards (N,))."""
    grpo = grpo_advantages(rewards, group_size).abs().reshape(-1, group_size).mean(1)
    centered = centered_advantages(rewards, group_size).abs().reshape(-1, group_size).mean(1)
    return rewards.reshape(-1, group_size).sum(1), grpo, centered


def std_scaling_claim(out: Path, s: LMSizes) -> Claim:
    """Sample groups from each seed's warm start; how much |A| mass near-uniform groups get with and
    without the std division."""
    g, share_grpo, share_centered, ratio, counts = s.group_size, [], [], [], torch.zeros(s.group_size + 1)
    task = get_task(TASK["name"], **TASK["options"])
    for seed in range(s.seeds):
        model, tokenizer = load_model_and_tokenizer(out / f"seed{seed}" / "per_sequence" / "sft_model")
        examples = task.train_examples(s.rollout_prompts, 10_000 + seed)
        completions = HFEngine(model, tokenizer).generate(
            [ex.prompt for ex in examples], g, SamplingParams(temperature=1.0, max_new_tokens=s.max_new_tokens, seed=seed))
        owners = [ex for ex in examples for _ in range(g)]
        rewards = torch.tensor([float(task.is_correct(c.text, ex)) for c, ex in zip(completions, owners)])
        k, grpo, centered = std_weights(rewards, g)
        counts += torch.bincount(k.long(), minlength=g + 1)
        near = (k == 1) | (k == g - 1)  # one sample differs from the rest
        middle = (k - g / 2).abs() <= 1
        share_grpo.append(float(grpo[near].sum() / grpo.sum()) if grpo.sum() > 0 else float("nan"))
        share_centered.append(float(centered[near].sum() / centered.sum()) if centered.sum() > 0 else float("nan"))
        if near.any() and middle.any():
            ratio.append(float((grpo[near] / centered[near]).mean() / (grpo[middle] / centered[middle]).mean()))
    decided = len(ratio) == s.seeds and all(x == x for x in share_grpo + share_centered)
    setup = (f"{s.rollout_prompts} training prompts x {s.group_size} samples (temperature 1) from each seed's "
             f"warm start, 0/1 rewards; groups by number correct, summed over seeds: "
             f"{', '.join(f'{i}: {int(c)}' for i, c in enumerate(counts.tolist()))}. Near-uniform = 1 or "
             f"{g - 1} of {g} correct. Per-sample weight of a group = mean |A_GRPO| / mean |A_centered| = "
             f"1 / (std + eps); near-uniform groups get {fmt(ratio, 2) if ratio else 'n/a'} times the weight of "
             f"balanced groups ({g // 2 - 1}-{g // 2 + 1} correct).")
    return Claim("std-scaling", "Std scaling up-weights near-uniform groups (Dr. GRPO's argument, real rollouts)",
                 f"share of the |A| mass on near-uniform groups: GRPO {fmt(share_grpo)} vs centered "
                 f"{fmt(share_centered)}", (mean_sd(share_grpo)[0] > mean_sd(share_centered)[0]) if decided else None,
                 s.seeds, setup)
