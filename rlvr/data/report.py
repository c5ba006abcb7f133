"""What a curation step kept, what it removed and why, and the report files that record it.

Every step (decontamination, de-duplication, difficulty filtering) returns a `CurationResult`. Its
report is two files: `<step>.removed.jsonl` (one line per removed item: its index, its place in the input
file when the step was told it, reason and the evidence, e.g. the eval item it overlapped) and `<step>.md`
(counts per reason and the first cases), so a user can audit a removal without re-running anything. An
index counts the items handed to the step from 0; a place (`train.jsonl:7`) is the file's real line, blank
lines included, which is what a user opens the file at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr.jsonl import write_jsonl

_MD_EXAMPLES = 10  # removed items shown per reason in the markdown summary
# evidence that names an item by index, and the key of its place: the markdown shows the place alone
_PLACED = {"duplicate_of": "duplicate_of_where", "eval_index": "eval_where"}


@dataclass
class Removal:
    index: int  # position of the removed item in the step's input
    reason: str  # short machine-readable cause, e.g. "eval_overlap", "near_duplicate", "too_easy"
    detail: dict[str, Any] = field(default_factory=dict)  # the evidence behind the reason
    text: str = ""  # the removed item's text (truncated in the markdown summary)
    where: str = ""  # its place in the input file (`train.jsonl:7`), when the step was given one


@dataclass
class CurationResult:
    step: str
    kept: list[Any]
    kept_indices: list[int]
    removed: list[Removal]
    n_input: int
    stats: dict[str, Any] = field(default_factory=dict)  # step-wide numbers (e.g. n, threshold)
    scores: list[float] | None = None  # per input item, when the step measures one (e.g. pass rate)

    def kept_scores(self) -> list[float]:
        """The scores of the kept items, in order (e.g. to build a curriculum from a difficulty filter)."""
        if self.scores is None:
            raise ValueError(f"step {self.step!r} measured no per-item score")
        return [self.scores[i] for i in self.kept_indices]

    def removed_by_reason(self) -> dict[str, int]:
        return dict(Counter(r.reason for r in self.removed))

    def summary(self) -> str:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.removed_by_reason().items())) or "none"
        return f"{self.step}: kept {len(self.kept)} of {self.n_input}, removed {len(self.removed)} ({reasons})"

    def write_report(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write `<step>.removed.jsonl` and `<step>.md` under `out_dir`; return both paths."""
        out_dir = Path(out_dir)
        rows = [{"where": r.where, **asdict(r)} if r.where else asdict(r) for r in self.removed]  # place first
        jsonl = write_jsonl(out_dir / f"{self.step}.removed.jsonl", rows)
        md = out_dir / f"{self.step}.md"
        md.write_text(self._markdown(), encoding="utf-8")
        return jsonl, md

    def _markdown(self) -> str:
        lines = [f"# Curation step: {self.step}", "", self.summary(), ""]
        if self.stats:
            lines += ["| setting | value |", "| --- | --- |"]
            lines += [f"| {k} | {v} |" for k, v in self.stats.items()] + [""]
        for reason, count in sorted(self.removed_by_reason().items()):
            lines += [f"## {reason} ({count})", "", "| item | text | evidence |", "| --- | --- | --- |"]
            shown = [r for r in self.removed if r.reason == reason][:_MD_EXAMPLES]
            lines += [f"| {_cell(r.where or r.index)} | {_cell(r.text)} | {_cell(_evidence(r.detail))} |"
                      for r in shown]
            if count > len(shown):
                lines.append(f"| ... | {count - len(shown)} more in {self.step}.removed.jsonl | |")
            lines.append("")
        return "\n".join(lines)


def _evidence(detail: dict[str, Any]) -> str:
    return "; ".join(f"{k}={v}" for k, v in detail.items() if _PLACED.get(k) not in detail)


def _cell(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def make_result(step: str, items: list[Any], removed: list[Removal], stats: dict[str, Any]) -> CurationResult:
    """Assemble a result from the input and the removals (in input order)."""
    gone = {r.index for r in removed}
    kept_indices = [i for i in range(len(items)) if i not in gone]
    removed = sorted(removed, key=lambda r: r.index)
    return CurationResult(step, [items[i] for i in kept_indices], kept_indices, removed, len(items), stats)
