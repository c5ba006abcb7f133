"""The run's PNG plots: accuracy axes on [0, 1], the reward split into its logged terms, and the thinking
budget's legend clear of the axes (read back from the figures as they are saved)."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from rlvr.logging.plots import plot_metrics, reward_terms
from rlvr.thinking import BudgetPoint, plot_budget_sweep


@pytest.fixture
def saved(monkeypatch) -> dict[str, Figure]:
    """File name -> the figure as it was saved (drawn, so text extents are known)."""
    figures: dict[str, Figure] = {}
    save = Figure.savefig

    def keep(fig: Figure, path, *args, **kwargs):
        save(fig, path, *args, **kwargs)
        figures[Path(path).name] = fig

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _labels(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_accuracy_flat_at_zero_is_drawn_on_zero_to_one(tmp_path, saved):
    """A flat 0 drew a y axis from -0.04 to 0.04: negative accuracy."""
    records = [{"step": s, "eval/greedy_accuracy": 0.0, "eval/sampled_accuracy": 0.0, "reward": 0.0}
               for s in (0, 1, 2)]
    plot_metrics(records, tmp_path)
    assert saved["heldout_accuracy.png"].axes[0].get_ylim() == (0.0, 1.0)
    assert saved["reward.png"].axes[0].get_ylim()[0] < 0  # a reward may be negative: not pinned


def test_the_reward_is_plotted_by_term(tmp_path, saved):
    """reward/<term> (and a term's parts) were logged but never plotted: one term climbing alone (hacking)
    was invisible in reward.png."""
    records = [{"step": s, "reward": 0.1 * s, "accuracy": 0.1, "reward/task": 0.1 * s,
                "reward/task/inclusion": 0.2 * s, "reward/task/ordered_pairs": 0.0, "reward/overlong": -0.1,
                "reward/errors": 0.0} for s in range(1, 5)]
    assert [label for _, label in reward_terms(records)] == ["overlong", "task", "task/inclusion",
                                                             "task/ordered_pairs"]
    written = {p.name for p in plot_metrics(records, tmp_path)}
    assert "reward_terms.png" in written
    assert _labels(saved["reward_terms.png"]) == ["reward (weighted sum)", "overlong", "task", "task/inclusion",
                                                  "task/ordered_pairs"]
    alone = [{"step": s, "reward": 0.1, "reward/task": 0.1, "reward/errors": 0.0} for s in (1, 2)]
    assert "reward_terms.png" not in {p.name for p in plot_metrics(alone, tmp_path / "alone")}  # the reward itself


def test_thinking_budget_legend_covers_no_tick_label(tmp_path, saved):
    """The legend sat in the lower right corner of the figure, over the budget tick labels ("32")."""
    points = [BudgetPoint(budget=b, accuracy=a, mean_thinking_tokens=b / 2, exhausted=1 - a, n=8)
              for b, a in [(8, 0.1), (16, 0.2), (32, 0.4), (64, 0.5), (128, 0.6)]]
    plot_budget_sweep(points, tmp_path / "thinking_budget.png")
    fig = saved["thinking_budget.png"]
    legends = [leg for leg in (*fig.legends, *(ax.get_legend() for ax in fig.axes)) if leg is not None]
    assert len(legends) == 1 and [t.get_text() for t in legends[0].get_texts()] == ["accuracy",
                                                                                  "thinking cut by budget"]
    box = legends[0].get_window_extent()
    ticks = [t for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels()) if t.get_text()]
    assert "32" in [t.get_text() for t in ticks]
    assert not [t.get_text() for t in ticks if box.overlaps(t.get_window_extent())]
    assert not box.overlaps(fig.axes[0].get_window_extent())  # nor the curves
