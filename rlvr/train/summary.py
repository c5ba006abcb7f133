"""How a run ends on the terminal (`rlvr train`, `rlvr demo`): held-out greedy metrics before and after RL with
the gain, the wall time, and where the run folder, its report and its doctor are."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlvr.train.loop import RunResult

TITLE = "held-out greedy exact-match accuracy"
# (metric after the eval/ prefix and a group's, what the row says); a metric the run did not log has no row
ROWS = (("greedy_accuracy", "accuracy"), ("greedy_format", "answer stated as asked (format)"),
        ("greedy_formatted_wrong", "stated as asked but wrong"))


def _groups(metrics: dict[str, float]) -> list[str]:
    """'' for the main held-out set, then each `eval_group` the run reported (`rlvr.train.evaluate`)."""
    return [""] + sorted({k.split("/")[1] + "/" for k in metrics if k.startswith("eval/") and k.count("/") == 2})


def summary_table(first: dict[str, float], final: dict[str, float], before: str = "before RL",
                  after: str = "after RL") -> Table:
    """Before, after and gain of each held-out greedy metric both evaluations hold, per held-out group."""
    table = Table(title=TITLE)
    for column in ("held-out set", "metric", before, after, "gain"):
        table.add_column(column, justify="left" if column in ("held-out set", "metric") else "right")
    for group in _groups(final):
        for key, label in ROWS:
            name = f"eval/{group}{key}"
            if name in first and name in final:
                table.add_row(group.rstrip("/") or "main", label, f"{first[name]:.3f}", f"{final[name]:.3f}",
                              f"{final[name] - first[name]:+.3f}")
    return table


def where_lines(run_dir: Path, seconds: float) -> list[str]:
    return [f"wall time {seconds:.0f} s; run folder [bold]{run_dir}[/]: config.yaml, metrics.jsonl, timings.jsonl, "
            "samples.jsonl, plots/*.png, final_model/ (a Hugging Face checkpoint)",
            f"report: rlvr report {run_dir} (writes {Path(run_dir) / 'report.html'}); what went wrong, if anything: "
            f"rlvr doctor {run_dir}"]


def print_summary(result: RunResult, seconds: float, console: Console | None = None, before: str = "before RL",
                  after: str = "after RL") -> None:
    console = console or Console()
    console.print(summary_table(result.first_eval, result.final_eval, before, after))
    for line in where_lines(result.run_dir, seconds):
        console.print(line, soft_wrap=True)  # paths whole, to copy
