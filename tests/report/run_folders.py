"""Planted run folders: synthetic metrics.jsonl / timings.jsonl / samples.jsonl showing one problem each."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

HEALTHY = {"reward": 0.3, "reward_std": 0.3, "accuracy": 0.2, "completion_length": 20.0, "truncated": 0.0,
           "entropy": 1.5, "approx_kl": 0.001, "clip_frac_low": 0.01, "clip_frac_high": 0.01, "ratio_max": 1.2,
           "grad_norm": 0.5, "reward/errors": 0.0}


def healthy_rows(steps: int = 20) -> list[dict]:
    """A run that learns: reward and accuracy rise together, held-out accuracy too."""
    rows = [{"step": 0, "eval/greedy_accuracy": 0.1}]
    for s in range(1, steps + 1):
        row = dict(HEALTHY, step=s, reward=0.3 + 0.02 * s, accuracy=0.2 + 0.02 * s)
        if s % 5 == 0:
            row["eval/greedy_accuracy"] = 0.1 + 0.02 * s
        rows.append(row)
    return rows


def write_run(path: Path, rows: list[dict], timings: list[dict] | None = None,
              samples: list[dict] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "task": {"name": "sort"}, "train": {"steps": 20}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    timings = timings if timings is not None else [{"step": r["step"], "s_per_step": 1.0} for r in rows if r["step"]]
    (path / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timings))
    samples = samples if samples is not None else [
        {"step": 20, "mode": "greedy", "prompt": "sort 3 1=", "completion": "1 3", "answer": "1 3", "reward": 1.0,
         "correct": True, "finish_reason": "stop"}]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    return path


def planted(path: Path, problem: str) -> Path:
    """A run folder whose metrics show `problem` (a key of PROBLEMS) from step 11 on."""
    rows = healthy_rows()
    timings = None
    for row in rows[11:]:
        if problem == "slow":
            continue
        row.update(PROBLEMS[problem])
    if problem == "slow":
        timings = [{"step": r["step"], "s_per_step": 9.0 if r["step"] > 15 else 1.0} for r in rows if r["step"]]
    if problem == "hacking":
        for row in rows[1:]:
            row.update(reward=0.1 + 0.04 * row["step"], accuracy=0.2)
            if "eval/greedy_accuracy" in row:
                row["eval/greedy_accuracy"] = 0.1
    return write_run(path, rows, timings)


PROBLEMS = {  # metrics that show each problem, applied to steps 11-20
    "flat": {"reward_std": 0.0},
    "truncation": {"truncated": 0.8},
    "length": {"completion_length": 90.0},
    "entropy": {"entropy": 0.01},
    "converged": {"entropy": 0.01, "accuracy": 0.97, "reward": 0.97},
    "kl": {"approx_kl": 2.0},
    "grad": {"grad_norm": 40.0},
    "ratio": {"ratio_max": 50.0},
    "clipping": {"clip_frac_low": 0.2, "clip_frac_high": 0.2},
    "errors": {"reward/errors": 3.0},
    "timeouts": {"reward/timeouts": 2.0},
    "env_errors": {"episode/env_errors": 1.0},
    "env_timeouts": {"episode/env_timeouts": 2.0},
    "env_bad_output": {"episode/env_bad_output": 1.0},
    "cut_observations": {"episode/truncated_observations": 4.0},
    "nonfinite": {"loss": "nan", "grad_norm": "inf"},
    "skipped": {"train/skipped_nonfinite": 1.0},
    "collapse": {"reward": 0.0, "accuracy": 0.0},
    "informative": {"sampling/informative_share": 0.2},
    "flat_groups": {"flat_group_share": 0.8},
    "hacking": {},
    "slow": {},
}
