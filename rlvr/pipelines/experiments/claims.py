"""A lecture claim checked by a measurement, and the report that lists them.

Each `Claim` carries the lecture's sentence, the number rlvr measured (mean and spread over seeds),
whether the direction holds (computed by the experiment from its own numbers, never written by hand)
and what in the run is smaller than the paper's. `write_report` renders them as one table plus a
section per claim with its figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence


@dataclass
class Claim:
    key: str  # short identifier, also the section anchor
    lecture: str  # the claim, in one line
    measured: str  # what rlvr measured, with mean +- sd over seeds
    holds: bool | None  # None: could not be decided from this run (said in `measured`)
    seeds: int  # independent seeds (or replicas) behind the number; 0 = exact computation
    setup: str = ""  # how it was measured, and what is smaller than the paper's
    figures: list[str] = field(default_factory=list)  # file names inside the report folder

    @property
    def verdict(self) -> str:
        return {True: "holds", False: "does not hold", None: "undecided"}[self.holds]


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_sd needs at least one value")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def fmt(values: Sequence[float], digits: int = 3) -> str:
    """'mean ± sd (n=K)' over the values that are defined (not NaN); the sd only where it is (K >= 2):
    'mean (n=1)'; undefined values are counted ('(n=2 of 3 defined)'), all undefined is 'n/a'."""
    defined = [v for v in values if not math.isnan(v)]
    n = f"n={len(defined)}" + (f" of {len(values)} defined" if len(defined) < len(values) else "")
    if not defined:
        return f"n/a ({n})"
    mean, sd = mean_sd(defined)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if len(defined) > 1 else "") + f" ({n})"


def se_of_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """Standard error of mean(a) - mean(b) for independent samples (Welch)."""
    return math.sqrt(mean_sd(a)[1] ** 2 / len(a) + mean_sd(b)[1] ** 2 / len(b))


QUICK_BANNER = ("> **Quick run (`--quick`): checks the pipeline only; too few runs and steps to test any claim.** "
                "No direction below is a verdict; run without `--quick` for one.")
QUICK_VERDICT = "not tested (quick)"


def write_report(claims: Sequence[Claim], out: str | Path, title: str, intro: str, footer: str = "",
                 quick: bool = False) -> Path:
    """`out/report.md`: a one-line-per-claim table, then each claim's setup and figures. `quick` (a
    pipeline check at tiny sizes) opens it with a banner and prints no verdict: its numbers decide nothing."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""] + ([QUICK_BANNER, ""] if quick else [])
    lines += [intro, "", "| claim | measured by rlvr | seeds | direction |", "|---|---|---|---|"]
    for c in claims:
        seeds = "exact" if c.seeds == 0 else str(c.seeds)
        verdict = QUICK_VERDICT if quick else c.verdict
        lines.append(f"| [{c.lecture}](#{c.key}) | {c.measured} | {seeds} | **{verdict}** |")
    for c in claims:
        verdict = QUICK_VERDICT if quick else c.verdict
        lines += ["", f'<a id="{c.key}"></a>', f"## {c.lecture}", "", f"Measured: {c.measured}. "
                  f"Direction: **{verdict}**.", "", c.setup]
        lines += [f"\n![{c.key}]({name})" for name in c.figures]
    if footer:
        lines += ["", footer]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
