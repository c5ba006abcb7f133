"""The experiments' figure helpers: a headless matplotlib, and a mean line with its error band.

Every curve over seeds is drawn the same way: the mean over seeds and a band of +-1 standard error
of that mean (the spread a reader needs to judge whether two curves differ), the seed count in the
legend.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from rlvr.pipelines.experiments.stats import t_quantile


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display on a server or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mean_and_se(rows: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """rows (points, seeds) -> per point the mean over seeds and its standard error (0 for one seed);
    NaN entries (a quantity undefined for that seed) are left out of their point."""
    means, ses = [], []
    for row in rows:
        vals = [v for v in row if not math.isnan(v)]
        n = len(vals)
        mean = sum(vals) / n if n else float("nan")
        var = sum((v - mean) ** 2 for v in vals) / (n - 1) if n > 1 else 0.0
        means.append(mean)
        ses.append(math.sqrt(var / n) if n else float("nan"))
    return means, ses


def band(ax: Any, x: Sequence[float], rows: Sequence[Sequence[float]], color: str, label: str | None = None,
         scale: float = 1.0, level: float | None = None, **line: Any) -> None:
    """Mean over seeds (a line) with a shaded band: +-1 standard error, or with `level` the two-sided
    t confidence interval of the mean (e.g. 0.95); rows are (len(x), seeds)."""
    mean, se = mean_and_se(rows)
    k = len(rows[0])
    width = 1.0 if level is None or k < 2 else t_quantile(0.5 + level / 2, k - 1)
    ax.plot(x, [m / scale for m in mean], color=color, label=label, **line)
    if k > 1:
        ax.fill_between(x, [(m - width * e) / scale for m, e in zip(mean, se)],
                        [(m + width * e) / scale for m, e in zip(mean, se)], color=color, alpha=0.18, linewidth=0)


def save(fig: Any, path: str | Path, dpi: int = 110, rect: tuple[float, ...] | None = None) -> Path:
    """Lay out (inside `rect` of the figure when given, e.g. to leave room for a caption) and write a PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
