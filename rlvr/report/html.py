"""`rlvr report RUN_DIR`: one self-contained HTML file (no network, no external files) with the
run's curves as inline SVG, the doctor's findings, sampled completions with their rewards, and the
config. A `window.onerror` hook writes any script error into the page, so a headless browser's DOM
dump shows whether the page loaded cleanly.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError
from rlvr.jsonl import read_jsonl
from rlvr.logging.plots import UNIT, reward_terms
from rlvr.logging.sinks import SAMPLES
from rlvr.report.doctor import PROBLEM, Finding, RunLog, diagnose, load_run, step_ranges

REPORT = "report.html"
MARKER = '<meta name="generator" content="rlvr report">'  # in the head of every report: --out may overwrite it
# panel title -> [(metric key, legend label)]
PANELS: dict[str, list[tuple[str, str]]] = {
    "Reward and accuracy (rollout batch)": [("reward", "reward"), ("accuracy", "accuracy")],
    "Held-out accuracy": [("eval/greedy_accuracy", "greedy"), ("eval/sampled_accuracy", "sampled")],
    "Completion length (tokens)": [("completion_length", "train"), ("eval/greedy_length", "held-out greedy")],
    "KL": [("kl", "KL to reference"), ("approx_kl", "KL to sampler")],
    "Entropy (per token)": [("entropy", "entropy")],
    "Clip fractions": [("clip_frac_low", "low"), ("clip_frac_high", "high"), ("truncated", "truncated")],
}
UNIT_PANELS = {"Held-out accuracy"}  # accuracies: drawn on 0..1 (a flat 0 was drawn from -0.5 to 0.5)
_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
_DASHES = ["none", "7 4", "2 3"]  # equal curves (reward == accuracy under a 0/1 reward) stay visible
_W, _H, _PAD = 360, 200, 44
_SAMPLES_SHOWN = 12
_STYLE = """body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.panels{display:flex;flex-wrap:wrap;gap:12px}.panel{border:1px solid #ddd;padding:6px}
.problem{color:#b00}.warning{color:#a60}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:4px;vertical-align:top;text-align:left}pre{background:#f6f6f6;padding:8px}
.completion{font-family:monospace;white-space:pre-wrap;max-width:520px}"""


def _points(log: RunLog, key: str) -> list[tuple[int, float]]:
    return [(s, v) for s, v in log.series(key) if math.isfinite(v)]


def svg_panel(title: str, curves: list[tuple[str, list[tuple[int, float]]]],
              bounds: tuple[float, float] | None = None) -> str:
    """One chart: a polyline per (label, [(step, value)]), shared axes, min and max labelled; `bounds` fixes
    the y range (widened only to show a value outside it)."""
    drawn = [(label, pts) for label, pts in curves if pts]
    if not drawn:
        return ""
    xs = [s for _, pts in drawn for s, _ in pts]
    ys = [v for _, pts in drawn for _, v in pts]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(ys)
    if bounds is not None:
        y0, y1 = min(y0, bounds[0]), max(y1, bounds[1])
    y0, y1 = (y0 - 0.5, y1 + 0.5) if y0 == y1 else (y0, y1)

    def xy(s: float, v: float) -> str:
        return (f"{_PAD + (s - x0) / (x1 - x0) * (_W - 2 * _PAD):.1f},"
                f"{_H - _PAD - (v - y0) / (y1 - y0) * (_H - 2 * _PAD):.1f}")

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img">',
             f'<text x="{_W / 2}" y="14" text-anchor="middle" font-size="12">{html.escape(title)}</text>',
             f'<rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" height="{_H - 2 * _PAD}" fill="none" stroke="#ccc"/>',
             f'<text x="{_PAD - 4}" y="{_PAD + 4}" text-anchor="end" font-size="10">{y1:.2g}</text>',
             f'<text x="{_PAD - 4}" y="{_H - _PAD}" text-anchor="end" font-size="10">{y0:.2g}</text>',
             f'<text x="{_PAD}" y="{_H - _PAD + 14}" font-size="10">step {x0}</text>',
             f'<text x="{_W - _PAD}" y="{_H - _PAD + 14}" text-anchor="end" font-size="10">{x1}</text>']
    for i, (label, pts) in enumerate(drawn):
        colour = _COLOURS[i % len(_COLOURS)]
        line = " ".join(xy(s, v) for s, v in pts)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'stroke-dasharray="{_DASHES[i % len(_DASHES)]}" points="{line}"/>')
        if len(pts) == 1:
            parts.append(f'<circle r="3" fill="{colour}" cx="{xy(*pts[0]).split(",")[0]}" '
                         f'cy="{xy(*pts[0]).split(",")[1]}"/>')
        rows_below = (len(drawn) - 1) // 3 - i // 3  # three labels a row: the reward's terms may take two
        parts.append(f'<text x="{_PAD + 4 + 110 * (i % 3)}" y="{_H - 6 - 12 * rows_below}" font-size="11" '
                     f'fill="{colour}">{html.escape(label)}</text>')
    return "".join(parts) + "</svg>"


def _findings_html(findings: list[Finding]) -> str:
    if not findings:
        return "<p>Nothing alarming: no check of <code>rlvr doctor</code> fired.</p>"
    items = []
    for f in findings:
        where = f" (steps {step_ranges(f.steps)})" if f.steps else ""
        hint = f"<br><small>try: {html.escape(f.hint)}</small>" if f.hint else ""
        items.append(f'<li class="{"problem" if f.severity == PROBLEM else "warning"}"><b>{html.escape(f.title)}'
                     f"</b>{where}: {html.escape(f.detail)}{hint}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _samples_html(samples: list[dict[str, Any]]) -> str:
    if not samples:
        return "<p>No samples logged (log.samples_per_eval is 0).</p>"
    last = max(s.get("step", 0) for s in samples)
    shown = [s for s in samples if s.get("step", 0) == last][:_SAMPLES_SHOWN]
    plain = {"step", "mode", "prompt", "completion", "answer", "reward", "correct", "finish_reason"}
    rows = []
    for s in shown:
        components = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in s.items() if k not in plain)
        cells = [s.get("mode", ""), s.get("prompt", ""), s.get("completion", ""), s.get("answer", ""),
                 s.get("reward", ""), s.get("correct", ""), components, s.get("finish_reason", "")]
        rows.append("<tr>" + "".join(f'<td{" class=completion" if i == 2 else ""}>{html.escape(str(c))}</td>'
                                     for i, c in enumerate(cells)) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("mode", "prompt", "completion", "answer", "reward", "correct",
                                            "components", "finish"))
    return f"<p>Held-out samples at step {last}.</p><table><tr>{head}</tr>{''.join(rows)}</table>"


def build_report(run_dir: str | Path) -> str:
    """The report's HTML for a run folder (raises ConfigError naming what is missing)."""
    run_dir = Path(run_dir)
    log = load_run(run_dir)
    try:
        samples = read_jsonl(run_dir / SAMPLES, missing_ok=True, growing=True)
    except ValueError as e:  # names the file and line
        raise ConfigError(str(e)) from None
    config = (run_dir / "config.yaml").read_text(encoding="utf-8") if (run_dir / "config.yaml").is_file() else ""
    panels = [svg_panel(title, [(label, _points(log, key)) for key, label in keys], UNIT if title in UNIT_PANELS
                        else None) for title, keys in PANELS.items()]
    if len(terms := reward_terms(log.metrics)) > 1:  # the reward's parts: one term climbing alone is hacking
        panels.insert(1, svg_panel("Reward by term (before weights)", [(label, _points(log, key))
                                                                         for key, label in terms]))
    panels_html = "".join(f'<div class="panel">{p}</div>' for p in panels if p)
    steps = max((row.get("step", 0) for row in log.metrics), default=0)
    title = html.escape(f"rlvr run report: {run_dir.name}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{MARKER}<title>{title}</title>
<script>window.onerror = function (message) {{
  var box = document.getElementById("page-errors") || document.documentElement;
  box.setAttribute("data-errors", (box.getAttribute("data-errors") || "") + message + ";");
}};</script>
<style>{_STYLE}</style></head>
<body><div id="page-errors"></div>
<h1>{title}</h1><p>{html.escape(str(run_dir))}: {steps} steps logged.</p>
<h2>Curves</h2><div class="panels">{panels_html or "<p>No training steps logged yet.</p>"}</div>
<h2>Doctor</h2>{_findings_html(diagnose(log))}
<h2>Sampled completions</h2>{_samples_html(samples)}
<h2>Config</h2><pre>{html.escape(config) or "(no config.yaml)"}</pre>
<script>document.body.setAttribute("data-loaded", {json.dumps(REPORT)});</script>
</body></html>
"""


def is_report(path: Path) -> bool:
    """An existing file whose head is that of a report of ours (older ones: the title, as MARKER is newer):
    `rlvr report --out` writes over nothing else."""
    try:
        with path.open("rb") as file:
            head = file.read(2048).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.startswith("<!DOCTYPE html>") and (MARKER in head or "<title>rlvr run report: " in head)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The report of `run_dir` written to the file `out` (default: report.html in the run folder; the CLI
    resolves a folder --out and refuses a file that `is_report` does not recognise); missing parent folders
    are made. Returns the file's path."""
    path = Path(out) if out else Path(run_dir) / REPORT
    text = build_report(run_dir)  # first: a folder that is not a run is refused before anything is made
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"--out: {str(path.parent)!r} is a file, not a folder") from None
    path.write_text(text, encoding="utf-8")
    return path
