"""PNG plots of a run's metrics.jsonl (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

UNIT = (0.0, 1.0)  # accuracies and pass rates: a flat 0 drew an axis from -0.04 to 0.04
# file name -> (title, y label, [(metric key, legend label)], fixed y range or None)
PLOTS: dict[str, tuple[str, str, list[tuple[str, str]], tuple[float, float] | None]] = {
    "reward.png": ("Training reward and exact-match accuracy (rollout batch)", "mean over the batch",
                   [("reward", "reward"), ("accuracy", "exact-match accuracy"),
                    ("eval/greedy_reward", "held-out greedy reward")], None),
    "heldout_accuracy.png": ("Held-out exact-match accuracy", "exact match",
                             [("eval/greedy_accuracy", "greedy"), ("eval/sampled_accuracy", "sampled"),
                              ("eval/pass@4", "pass@4")], UNIT),
    "completion_length.png": ("Completion length", "tokens",
                              [("completion_length", "train (mean)"), ("eval/greedy_length", "held-out greedy")], None),
    "kl.png": ("KL(policy || reference), per token", "KL estimate", [("kl", "kl")], None),
    "loss.png": ("Policy loss (not a progress signal: it moves with the advantages)", "aggregated loss",
                 [("loss", "loss")], None),
}
TERMS = ("reward_terms.png", "Reward by term: the batch mean of each, before its weight", "mean over the batch")
NOT_TERMS = {"reward/errors", "reward/timeouts"}  # counts logged beside the terms
_STYLES = ["-", "--", ":"]  # equal curves (reward == accuracy under a 0/1 reward) stay visible


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [float(p[1]) for p in points]


def reward_terms(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(key, label) of each logged part of the reward: `reward/<term>`, and `reward/<term>/<part>` of a term
    made of parts (sort's inclusion and ordered_pairs), so that a term climbing alone (hacking) shows."""
    keys = sorted({k for r in records for k in r if k.startswith("reward/") and k not in NOT_TERMS})
    return [(k, k.removeprefix("reward/")) for k in keys]


def chart(title: str, ylabel: str, series: list[tuple[str, list[int], list[float]]],
          ylim: tuple[float, float] | None = None, size: tuple[float, float] = (6.4, 4.0)) -> Any:
    """One matplotlib figure: a line per (label, steps, values) against the RL step, with axis titles, a grid and
    a legend (line samples) when there are several; markers on sparse series (held-out points)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=size, dpi=100)
    ax = fig.add_subplot()
    for i, (label, steps, values) in enumerate(series):
        marker = "o" if len(steps) <= 30 else None
        ax.plot(steps, values, _STYLES[i % len(_STYLES)], label=label, marker=marker, markersize=3,
                linewidth=1.5, clip_on=ylim is None)  # markers on a pinned 0 or 1 are drawn whole
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at 2.5
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    return fig


def series_of(records: list[dict[str, Any]], keys: list[tuple[str, str]]) -> list[tuple[str, list[int], list[float]]]:
    """(label, steps, values) of each (metric key, label) that the records hold."""
    return [(label, *_series(records, key)) for key, label in keys if _series(records, key)[0]]


def plot_metrics(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Draw every plot of PLOTS that has data; return the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = dict(PLOTS)
    if len(terms := reward_terms(records)) > 1:  # one term alone is the reward itself
        plots[TERMS[0]] = (*TERMS[1:], [("reward", "reward (weighted sum)"), *terms], None)
    written = []
    for name, (title, ylabel, keys, ylim) in plots.items():
        series = series_of(records, keys)
        if not series:
            continue
        fig = chart(title, ylabel, series, ylim)
        path = out_dir / name
        fig.savefig(path)
        written.append(path)
    return written
