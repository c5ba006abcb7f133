"""Live progress bar (rich): step, reward, held-out accuracy, KL, completion length, s/step."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_FIELDS = [  # (metric key, shown as, format)
    ("sft_loss", "loss", "{:.3f}"),
    ("reward", "reward", "{:.3f}"),
    ("accuracy", "acc", "{:.2f}"),
    ("eval/greedy_accuracy", "held-out acc", "{:.2f}"),
    ("kl", "kl", "{:.4f}"),
    ("completion_length", "len", "{:.1f}"),
    ("s_per_step", "s/step", "{:.2f}"),
]


def format_stats(values: dict[str, Any]) -> str:
    parts = [f"{label} {fmt.format(values[key])}" for key, label, fmt in _FIELDS
             if isinstance(values.get(key), (int, float))]
    return "  ".join(parts)


class TrainProgress:
    """A rich progress bar that keeps the latest value of each shown metric (`enabled=False`: silent)."""

    def __init__(self, total: int, start: int = 0, enabled: bool = True, description: str = "GRPO"):
        self.console = Console(stderr=True)
        self.enabled = enabled
        self._values: dict[str, Any] = {}
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                             console=self.console, disable=not enabled)
        self._task = self._bar.add_task(description, total=total, completed=start, stats="")

    def __enter__(self) -> "TrainProgress":
        self._bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.stop()

    def update(self, step: int, values: dict[str, Any]) -> None:
        self._values.update({k: v for k, v in values.items() if isinstance(v, (int, float))})
        self._bar.update(self._task, completed=step, stats=format_stats(self._values))

    def print(self, message: str) -> None:
        if self.enabled:
            self.console.print(message)
