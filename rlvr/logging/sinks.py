"""Metric sinks: jsonl files and TensorBoard (the other trackers: `rlvr.logging.trackers`). They take Python numbers; the loop does the `.item()`.

Deterministic values go to `metrics.jsonl` and wall-clock timings to `timings.jsonl`, so two runs
with the same seed produce byte-identical `metrics.jsonl` files. On resume from step k, every
record after k is dropped first (the interrupted run may have logged steps it never checkpointed: the
resumed run writes them again), and TensorBoard is told to purge them too. A line that does not parse
(cut short by a crash mid-write) is dropped as well; if it held a step up to k, the resumed run does not
write it again, which is said in one warning line naming the file, line and step.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

METRICS, TIMINGS, SAMPLES = "metrics.jsonl", "timings.jsonl", "samples.jsonl"
_STEP = re.compile(rb'\{"step": (\d+)[,}]')  # how every record begins (MetricsLogger writes the step first)


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so a broken run is visible, not a parse error."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonlSink:
    """Append one JSON object per line; flushed at once so a killed run keeps what it logged."""

    def __init__(self, path: Path, resume_step: int | None = None):
        self.path = Path(path)
        if resume_step is None:
            self.path.write_text("")
        else:
            for warning in truncate_after(self.path, resume_step):
                logging.getLogger("rlvr").warning(warning)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def truncate_after(path: Path, step: int) -> list[str]:
    """Keep only the records with `step <= step`, which the resumed run continues after. Returns one line for
    each unreadable line dropped whose step is not after `step` (or unknown): a record no one writes again."""
    if not path.exists():
        path.write_text("")
        return []
    kept, lost = [], []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            head = _STEP.match(line)
            if head is None or int(head.group(1)) <= step:
                what = f"the record of step {int(head.group(1))}" if head else "a record of an unknown step"
                lost.append(f"{path}:{number}: {what} is cut short or corrupt and is dropped; the run resumes "
                            f"after step {step}, so it is not written again")
            continue
        if record.get("step", 0) <= step:
            kept.append(line.decode("utf-8") + "\n")
    path.write_text("".join(kept), encoding="utf-8")
    return lost


class TensorBoardSink:
    def __init__(self, log_dir: Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        purge = None if resume_step is None else resume_step + 1
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    def write(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def tracker_values(metrics: dict[str, float], timings: dict[str, float]) -> dict[str, float]:
    """One step's values as the trackers get them: the timings under `time/` (throughput keys already carry
    their own prefix, `perf/`), so that they sort apart from the metrics."""
    return {**metrics, **{k if "/" in k else f"time/{k}": v for k, v in timings.items()}}


class MetricsLogger:
    """Fan one step's metrics out to metrics.jsonl, timings.jsonl and the trackers of `log.report_to`
    (`rlvr.logging.trackers.open_trackers`: TensorBoard, wandb, MLflow, trackio)."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, trackers: list | None = None):
        run_dir = Path(run_dir)
        self.metrics = JsonlSink(run_dir / METRICS, resume_step)
        self.timings = JsonlSink(run_dir / TIMINGS, resume_step)
        self.samples = JsonlSink(run_dir / SAMPLES, resume_step)
        self.trackers = list(trackers or [])

    def log(self, step: int, metrics: dict[str, float], timings: dict[str, float]) -> None:
        self.metrics.write({"step": step, **metrics})
        self.timings.write({"step": step, **timings})
        for tracker in self.trackers:
            tracker.write(step, tracker_values(metrics, timings))

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self.samples.write({"step": step, **sample})

    def close(self) -> None:
        for sink in (self.metrics, self.timings, self.samples, *self.trackers):
            sink.close()
