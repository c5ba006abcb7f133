"""A lecture claim decided by a stated test, and the report that lists them.

Each `Claim` carries the lecture's sentence, the numbers rlvr measured (mean ± sd over seeds), the
test that decides it (`rlvr.pipelines.experiments.stats`: its estimate, standard error, degrees of
freedom, p-value and sample sizes) and the verdict read from that test: holds, contradicted or
undecided, never a comparison of means. `write_report` renders them as one table plus a section per
claim with its setup and figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rlvr.pipelines.experiments.stats import CONTRADICTED, HOLDS, UNDECIDED, mean_sd

VERDICTS = (HOLDS, CONTRADICTED, UNDECIDED)


@dataclass
class Claim:
    key: str  # short identifier, also the section anchor
    lecture: str  # the claim, in one line
    measured: str  # what rlvr measured, with mean ± sd over seeds
    verdict: str  # one of VERDICTS, read from `test` (or from an exact computation)
    test: str  # the stated test with its numbers, and the rule that turned it into the verdict
    seeds: int  # independent seeds (or replicas) behind the test; 0 = exact computation, no sampling
    setup: str = ""  # how it was measured, and what is smaller than the paper's
    figures: list[str] = field(default_factory=list)  # file names inside the report folder

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.key!r}: verdict {self.verdict!r} is not one of {VERDICTS}")


def fmt(values: Sequence[float], digits: int = 3) -> str:
    """'mean ± sd (n=K)' over the values that are defined (not NaN); the sd only where it is (K >= 2):
    'mean (n=1)'; undefined values are counted ('(n=2 of 3 defined)'), all undefined is 'n/a'."""
    defined = [v for v in values if not math.isnan(v)]
    n = f"n={len(defined)}" + (f" of {len(values)} defined" if len(defined) < len(values) else "")
    if not defined:
        return f"n/a ({n})"
    mean, sd = mean_sd(defined)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if len(defined) > 1 else "") + f" ({n})"


QUICK_BANNER = ("> **Quick run (`--quick`): checks the pipeline only; too few runs and steps to test any claim.** "
                "No verdict below is one; run without `--quick` for them.")
QUICK_VERDICT = "not tested (quick)"
RULES = ("Verdicts: **holds** when the stated test rejects its null at level 0.05 in the claimed direction, "
         "**contradicted** when it rejects in the opposite direction, **undecided** when it does not reject. "
         "Mean ± sd are over seeds; the test column gives the estimate ± its standard error, t, the degrees "
         "of freedom, the two-sided p-value and the number of seeds (n).")


def write_report(claims: Sequence[Claim], out: str | Path, title: str, intro: str, footer: str = "",
                 quick: bool = False) -> Path:
    """`out/report.md`: a one-line-per-claim table, then each claim's test, setup and figures. `quick`
    (a pipeline check at tiny sizes) opens it with a banner and prints no verdict: its numbers decide nothing."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""] + ([QUICK_BANNER, ""] if quick else [])
    lines += [intro, ""] + ([] if quick else [RULES, ""])
    lines += ["| claim | measured by rlvr | seeds | verdict |", "|---|---|---|---|"]
    for c in claims:
        seeds = "exact" if c.seeds == 0 else str(c.seeds)
        verdict = QUICK_VERDICT if quick else c.verdict
        lines.append(f"| [{c.lecture}](#{c.key}) | {c.measured} | {seeds} | **{verdict}** |")
    for c in claims:
        verdict = QUICK_VERDICT if quick else c.verdict
        lines += ["", f'<a id="{c.key}"></a>', f"## {c.lecture}", "", f"Measured: {c.measured}.", "",
                  f"Test: {c.test}. Verdict: **{verdict}**.", "", c.setup]
        lines += [f"\n![{c.key}]({name})" for name in c.figures]
    if footer:
        lines += ["", footer]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
