"""The figures of one `rlvr train` run folder that a device check reports: each held-out accuracy (greedy, every
evaluation group) at the first and the last evaluation, and the medians of the per-step throughput rlvr logs in
timings.jsonl (rollout and update tokens/s, TFLOP/s, MFU against the GPU's stated peak, peak GPU memory) over the
steps after the first (which pays the warm-up). Only the standard library: it runs on the lent machine.

    python3 benchmarks/gpu/run_figures.py RUN_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PERF = {"perf/rollout_tokens_per_s": ("rollout tok/s", "{:,.0f}"), "perf/update_tokens_per_s": ("update tok/s", "{:,.0f}"),
        "perf/tflops_per_s": ("model TFLOP/s", "{:.2f}"), "perf/mfu": ("MFU (step)", "{:.2%}"),
        "perf/mfu_rollout": ("MFU (rollout)", "{:.2%}"), "perf/mfu_update": ("MFU (update)", "{:.2%}"),
        "perf/gpu_peak_mib": ("peak GPU MiB", "{:,.0f}"), "s_per_step": ("s/step", "{:.2f}")}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def figures(run: Path) -> list[str]:
    """The report's lines for the run folder `run`."""
    evals = [r for r in rows(run / "metrics.jsonl") if any(k.startswith("eval/") for k in r)]
    lines = []
    if evals:
        first, last = evals[0], evals[-1]
        for key in sorted(k for k in first if k.startswith("eval/") and k.endswith("greedy_accuracy")):
            if key in last:
                lines.append(f"{key}: {first[key]:.3f} (step {first['step']}) -> {last[key]:.3f} (step {last['step']}), "
                             f"gain {last[key] - first[key]:+.3f}")
    else:
        lines.append("no held-out evaluation in metrics.jsonl")
    steps = [r for r in rows(run / "timings.jsonl") if "s_per_step" in r]
    later = steps[1:] or steps
    for key, (label, fmt) in PERF.items():
        values = [r[key] for r in later if key in r]
        if values:
            lines.append(f"{label}: median {fmt.format(statistics.median(values))} over {len(values)} step(s) "
                         f"({', '.join(fmt.format(v) for v in values)})")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: run_figures.py RUN_DIR")
    print("\n".join(figures(Path(sys.argv[1]))))
