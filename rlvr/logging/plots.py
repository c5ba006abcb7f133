"""PNG plots of a run's metrics.jsonl (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# file name -> (title, y label, [(metric key, legend label)])
PLOTS: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "reward.png": ("Training reward and exact-match accuracy (rollout batch)", "mean over the batch",
                   [("reward", "reward"), ("accuracy", "exact-match accuracy"),
                    ("eval/greedy_reward", "held-out greedy reward")]),
    "heldout_accuracy.png": ("Held-out exact-match accuracy", "exact match",
                             [("eval/greedy_accuracy", "greedy"), ("eval/sampled_accuracy", "sampled"),
                              ("eval/pass@4", "pass@4")]),
    "completion_length.png": ("Completion length", "tokens",
                              [("completion_length", "train (mean)"), ("eval/greedy_length", "held-out greedy")]),
    "kl.png": ("KL(policy || reference), per token", "KL estimate", [("kl", "kl")]),
    "loss.png": ("Policy loss (not a progress signal: it moves with the advantages)", "aggregated loss",
                 [("loss", "loss")]),
}
_STYLES = ["-", "--", ":"]  # equal curves (reward == accuracy under a 0/1 reward) stay visible


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [float(p[1]) for p in points]


def plot_metrics(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Draw every plot of PLOTS that has data; return the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (title, ylabel, keys) in PLOTS.items():
        series = [(label, *_series(records, key)) for key, label in keys]
        series = [s for s in series if s[1]]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for (label, steps, values), style in zip(series, _STYLES):
            marker = "o" if len(steps) <= 30 else None
            ax.plot(steps, values, style, label=label, marker=marker, markersize=3, linewidth=1.5)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(loc="best", fontsize=9)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
