"""The claims of lecture 17 that need a language model, on CPU-sized runs of the real trainer.

Every run goes through the public API (`rlvr.config.load_config` + `rlvr.train.loop.train`) and is read
back from its `metrics.jsonl`. The setting: sort 4 digits (0..9, repeats allowed; a right answer is 8
tokens) with the 0/1 exact-match reward, a tiny Qwen2-style model warm-started by SFT on the task's
demonstrations to answer about half the prompts, then GRPO. Per seed, one run; its warm start samples
the groups on which std scaling's weights are measured, and its logged series (share of flat groups,
loss, reward) feed the flat-group and loss-vs-reward claims.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.config import load_config
from rlvr.core import centered_advantages, grpo_advantages
from rlvr.pipelines.experiments.claims import Claim, fmt
from rlvr.pipelines.experiments.stats import UNDECIDED, direction, paired_test
from rlvr.models import load_model_and_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks import get_task
from rlvr.train.loop import train

TASK = {"name": "sort", "options": {"length": 4, "reward": "sparse"}}


@dataclass
class LMSizes:
    seeds: int = 5
    sft_steps: int = 300  # a warm start that answers about half the prompts: groups are mixed
    rl_steps: int = 60
    batch_size: int = 128
    group_size: int = 8
    max_new_tokens: int = 20
    eval_size: int = 64
    rollout_prompts: int = 64  # prompts whose groups measure std scaling's weights
    threads: int = 1  # torch threads per process; the workers fill the cores


def _overrides(out: Path, seed: int, s: LMSizes) -> list[str]:
    return [f"seed={seed}", f"out_dir={out}", "model.tiny_preset=test", f"task.name={TASK['name']}",
            "task.options={length: 4, reward: sparse}", f"task.eval_size={s.eval_size}", "task.train_size=4000",
            f"sft.steps={s.sft_steps}", "sft.batch_size=32", "sft.lr=3e-3",
            f"rollout.max_new_tokens={s.max_new_tokens}",
            "algorithm.advantage=grpo", "algorithm.beta=0.0", "algorithm.aggregation=seq_mean_token_mean",
            f"train.steps={s.rl_steps}", f"train.batch_size={s.batch_size}", f"train.group_size={s.group_size}",
            "optim.lr=3e-4", "optim.max_grad_norm=1.0", "eval.every=0", "eval.samples=0", "log.progress=false",
            "log.report_to=[]", "checkpoint.every=0", f"threads={s.threads}"]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def run_seed(out: Path, seed: int, s: LMSizes) -> list[dict]:
    """The metrics rows of one seed's GRPO run (SFT warm start, then RL). A run whose metrics already
    reach the last step is read, not redone."""
    run_dir = out / f"seed{seed}" / "grpo"
    done = (run_dir / "metrics.jsonl").is_file() and any(r.get("step") == s.rl_steps for r in _metrics(run_dir))
    if not done:
        train(load_config(None, _overrides(run_dir, seed, s)))
    return _metrics(run_dir)


def series(runs: list[list[dict]], key: str) -> list[list[float]]:
    """(seeds, steps) one logged metric of every run, over the RL steps that log it."""
    return [[row[key] for row in rows if key in row] for rows in runs]


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
        model, tokenizer = load_model_and_tokenizer(out / f"seed{seed}" / "grpo" / "sft_model")
        examples = task.train_examples(s.rollout_prompts, 10_000 + seed)
        completions = HFEngine(model, tokenizer).generate(
            [ex.prompt for ex in examples], g,
            SamplingParams(temperature=1.0, max_new_tokens=s.max_new_tokens, seed=seed))
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
    both = [(a, b) for a, b in zip(share_grpo, share_centered) if a == a and b == b]  # seeds with mixed groups
    if len(both) >= 2:
        test = paired_test([a for a, _ in both], [b for _, b in both])
        verdict, stated = direction(test, +1), f"{test.describe()} (GRPO - centered); holds if > 0 at p < 0.05"
    else:
        verdict, stated = UNDECIDED, f"{len(both)} seeds with mixed groups: too few to test"
    setup = (f"{s.rollout_prompts} training prompts x {s.group_size} samples (temperature 1) from each seed's "
             f"warm start, 0/1 rewards; groups by number correct, summed over seeds: "
             f"{', '.join(f'{i}: {int(c)}' for i, c in enumerate(counts.tolist()))}. Near-uniform = 1 or "
             f"{g - 1} of {g} correct. Per-sample weight of a group = mean abs(A_GRPO) / mean abs(A_centered) = "
             f"1 / (std + eps), fixed by the group's count: near-uniform groups get "
             f"{fmt(ratio, 2) if ratio else 'n/a'} times the weight of balanced groups ({g // 2 - 1}-{g // 2 + 1} "
             f"correct). The test is paired by seed (one set of groups, weighed both ways).")
    return Claim("std-scaling", "Std scaling up-weights near-uniform groups (Dr. GRPO's argument, real rollouts)",
                 f"share of the advantage mass (sum of abs(A)) on near-uniform groups: GRPO {fmt(share_grpo)} vs "
                 f"centered {fmt(share_centered)}", verdict, stated, s.seeds, setup)
