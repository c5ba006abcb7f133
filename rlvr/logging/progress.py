"""Progress during training: a live rich bar on a terminal; elsewhere (a log file, CI, nohup, a
notebook's captured output) a plain line every `every_steps` steps or `every_seconds` seconds,
whichever comes first, and at the last step. Both show the same figures: step, reward, held-out
accuracy, KL, completion length, s/step."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, TextIO

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


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}"


class TrainProgress:
    """Keeps the latest value of each shown metric (`enabled=False`: silent). `stream`: where the
    plain lines go when it is not a terminal (default stderr, like the bar)."""

    def __init__(self, total: int, start: int = 0, enabled: bool = True, description: str = "RL",
                 every_steps: int = 10, every_seconds: float = 30.0, stream: TextIO | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.console = Console(file=self.stream)
        self.enabled, self.total, self.description = enabled, total, description.strip()
        self.every_steps, self.every_seconds = max(1, every_steps), every_seconds
        self.plain = not self.console.is_terminal
        self._values: dict[str, Any] = {}
        self._started = self._last_time = time.monotonic()
        self._last_step = start
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                             console=self.console, disable=not enabled or self.plain)
        self._task = self._bar.add_task(description, total=total, completed=start, stats="")

    def __enter__(self) -> "TrainProgress":
        status = os.environ.pop("RLVR_ALLOCATOR_STATUS", None)  # set by the CLI (rlvr.allocator); said once
        if self.enabled and status:
            print(status, file=self.stream, flush=True)
        self._bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.stop()

    def update(self, step: int, values: dict[str, Any]) -> None:
        self._values.update({k: v for k, v in values.items() if isinstance(v, (int, float))})
        self._bar.update(self._task, completed=step, stats=format_stats(self._values))
        if self.enabled and self.plain:
            self._plain_line(step)

    def _plain_line(self, step: int) -> None:
        now = time.monotonic()
        due = step - self._last_step >= self.every_steps or now - self._last_time >= self.every_seconds
        if due or step >= self.total:
            self._last_step, self._last_time = step, now
            line = f"{self.description} step {step}/{self.total}  {format_stats(self._values)}  " \
                   f"[{_elapsed(now - self._started)}]"
            print(line.rstrip(), file=self.stream, flush=True)

    def print(self, message: str) -> None:
        if self.enabled:
            self.console.print(message)

    def warn(self, message: str) -> None:
        """A warning of the run: above the bar (one unwrapped line in a log file), or through the
        `rlvr` logger when progress is off."""
        if self.enabled:
            self.console.print(message, soft_wrap=True, markup=False, highlight=False)
        else:
            logging.getLogger("rlvr").warning(message)
