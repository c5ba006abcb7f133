"""`rlvr report RUN_DIR`: one self-contained HTML file (no network, no external files) with the run's curves
(matplotlib SVGs inline: axis titles, ticks, grid, legends with line samples; reward and accuracy on charts of
their own, the held-out evaluations overlaid on the training curves), the doctor's findings, the sampled
completions of every evaluation (one collapsible section per step; an environment's episodes turn by turn) and
the config (collapsed). A
`window.onerror` hook writes any script error into the page, so a headless browser's DOM dump shows whether the
page loaded cleanly.
"""

from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError
from rlvr.jsonl import read_jsonl
from rlvr.logging.plots import UNIT, chart, reward_terms, series_of
from rlvr.logging.sinks import SAMPLES
from rlvr.report.doctor import PROBLEM, Finding, RunLog, diagnose, load_run, step_ranges

REPORT = "report.html"
MARKER = '<meta name="generator" content="rlvr report">'  # in the head of every report: --out may overwrite it
HELD_OUT = [("eval/greedy_reward", "held-out greedy"), ("eval/sampled_reward", "held-out sampled")]
# (title, y label, [(metric key, legend label)], fixed y range, read from timings.jsonl)
CHARTS: list[tuple[str, str, list[tuple[str, str]], tuple[float, float] | None, bool]] = [
    ("Reward", "mean reward", [("reward", "train batch"), *HELD_OUT], None, False),
    ("Exact-match accuracy", "share correct", [("accuracy", "train batch"), ("eval/greedy_accuracy", "held-out greedy"),
                                               ("eval/sampled_accuracy", "held-out sampled")], UNIT, False),
    ("Completion length", "tokens", [("completion_length", "train batch"), ("eval/greedy_length", "held-out greedy")],
     None, False),
    ("KL per token", "KL estimate", [("kl", "to the reference"), ("approx_kl", "to the sampling policy")], None, False),
    ("Entropy per token", "nats", [("entropy", "train batch")], None, False),
    ("Clipping and truncation", "share of tokens / completions", [("clip_frac_low", "clipped low"),
                                                                   ("clip_frac_high", "clipped high"),
                                                                   ("truncated", "truncated completions")], None, False),
    ("Turns per episode", "model turns", [("episode/turns", "train batch"), ("episode/turns_solved", "train, solved"),
                                          ("eval/greedy_turns_solved", "held-out greedy, solved"),
                                          ("eval/sampled_turns_solved", "held-out sampled, solved")], None, False),
    ("Environment", "per episode (problems: count)", [("episode/masked_share", "share of tokens masked"),
                                                      ("episode/tool_calls", "tool calls"),
                                                      ("episode/tool_errors", "tool-call errors"),
                                                      ("episode/env_errors", "env errors"),
                                                      ("episode/env_timeouts", "env timeouts"),
                                                      ("episode/env_bad_output", "env bad output")], None, False),
    ("Gradient norm", "global L2 norm", [("grad_norm", "grad norm")], None, False),
    ("Time per step", "seconds", [("s_per_step", "step"), ("rollout_s", "rollout"), ("update_s", "update")], None,
     True),
]
SAMPLES_PER_STEP = 64  # rows shown per evaluation step
_STYLE = """body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.panels{display:flex;flex-wrap:wrap;gap:12px}.panel{border:1px solid #ddd;padding:4px}.panel svg{display:block}
.problem{color:#b00}.warning{color:#a60}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:4px;vertical-align:top;text-align:left}pre{background:#f6f6f6;padding:8px}
summary{cursor:pointer;margin:6px 0}.completion{font-family:monospace;white-space:pre-wrap;max-width:520px}
.episode{margin:0;padding-left:20px}.observation{color:#555;margin-left:12px}"""


def svg_chart(title: str, ylabel: str, series: list[tuple[str, list[int], list[float]]],
              ylim: tuple[float, float] | None = None) -> str:
    """The chart (`rlvr.logging.plots.chart`) as inline SVG; text stays text (svg.fonttype none: small, selectable),
    ids are seeded (svg.hashsalt) and the date left out, so that a report is the same bytes for the same logs."""
    import matplotlib

    if not series:
        return ""
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": title}):
        buffer = io.StringIO()
        chart(title, ylabel, series, ylim, size=(3.9, 2.8)).savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _finite(log_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with their NaN/inf values (written as strings by the sinks) left out, so the charts skip them."""
    return [{k: v for k, v in row.items() if not isinstance(v, (int, float)) or math.isfinite(v)} for row in log_rows]


def charts(log: RunLog) -> list[tuple[str, str]]:
    """(title, inline SVG) of every chart that has data; the reward's terms get one of their own when there are
    several (one term climbing alone is hacking)."""
    metrics, timings = _finite(log.metrics), _finite(log.timings)
    out = []
    for title, ylabel, keys, ylim, from_timings in CHARTS:
        out.append((title, svg_chart(title, ylabel, series_of(timings if from_timings else metrics, keys), ylim)))
        if title == "Reward" and len(terms := reward_terms(metrics)) > 1:
            title = "Reward by term (before weights)"
            out.append((title, svg_chart(title, "mean over the batch", series_of(metrics, terms))))
    return [(title, svg) for title, svg in out if svg]


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


_PLAIN = ("mode", "prompt", "completion", "answer", "reward", "correct", "finish_reason")


def episode_html(episode: dict[str, Any]) -> str:
    """An environment's episode turn by turn: each assistant message (its tokens, how its turn ended), the step's
    reward and tool calls, then the observations the environment answered with; and why the episode ended."""
    items = []
    for turn in episode.get("turns", []):
        info = turn.get("info", {})
        calls = f", {info['tool_calls']} tool calls, {info.get('tool_errors', 0)} failed" if "tool_calls" in info \
            else ""
        said = (f'<div class="turn"><b>assistant</b> <small>({turn.get("tokens", "?")} tokens, '
                f'{html.escape(str(turn.get("finish", "")))}; reward {turn.get("reward", 0):.3g}{calls})</small>'
                f'<div class="completion">{html.escape(str(turn.get("assistant", "")))}</div></div>')
        heard = "".join(f'<div class="observation"><b>{html.escape(str(m.get("role", "")))}</b>'
                        f'<div class="completion">{html.escape(str(m.get("content", "")))}</div></div>'
                        for m in turn.get("observations", []))
        items.append(f"<li>{said}{heard}</li>")
    return (f'<ol class="episode">{"".join(items)}</ol><small>ended: {html.escape(str(episode.get("end")))}, '
            f'reward {episode.get("reward", 0):.3g}</small>')


def _sample_rows(shown: list[dict[str, Any]]) -> str:
    rows = []
    for s in shown:
        components = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in s.items() if k not in {"step", "episode", *_PLAIN})
        cells = [html.escape(str(c)) for c in [*(s.get(k, "") for k in _PLAIN[:6]), components,
                                                s.get("finish_reason", "")]]
        if isinstance(s.get("episode"), dict):  # an environment's episode: turn by turn instead of one text
            cells[2] = episode_html(s["episode"])
        rows.append("<tr>" + "".join(f'<td{" class=completion" if i == 2 else ""}>{c}</td>'
                                     for i, c in enumerate(cells)) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("mode", "prompt", "completion", "answer", "reward", "correct",
                                            "components", "finish"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def samples_html(samples: list[dict[str, Any]]) -> str:
    """One collapsible section per evaluation step (the last one open), its held-out completions in a table."""
    if not samples:
        return "<p>No samples logged (log.samples_per_eval is 0).</p>"
    by_step: dict[int, list[dict[str, Any]]] = {}
    for sample in samples:
        by_step.setdefault(int(sample.get("step", 0)), []).append(sample)
    last, sections = max(by_step), []
    for step in sorted(by_step, reverse=True):
        rows = by_step[step]
        rewards = [r["reward"] for r in rows if isinstance(r.get("reward"), (int, float))]
        mean = f", mean reward {sum(rewards) / len(rewards):.3g}" if rewards else ""
        correct = sum(r.get("correct") is True for r in rows)
        more = f" (the first {SAMPLES_PER_STEP} shown)" if len(rows) > SAMPLES_PER_STEP else ""
        sections.append(f'<details{" open" if step == last else ""} data-step="{step}"><summary>step {step}: '
                        f"{len(rows)} samples{more}{mean}, {correct} correct</summary>"
                        f"{_sample_rows(rows[:SAMPLES_PER_STEP])}</details>")
    return "".join(sections)


def build_report(run_dir: str | Path) -> str:
    """The report's HTML for a run folder (raises ConfigError naming what is missing)."""
    run_dir = Path(run_dir)
    log = load_run(run_dir)
    try:
        samples = read_jsonl(run_dir / SAMPLES, missing_ok=True, growing=True)
    except ValueError as e:  # names the file and line
        raise ConfigError(str(e)) from None
    config = (run_dir / "config.yaml").read_text(encoding="utf-8") if (run_dir / "config.yaml").is_file() else ""
    panels_html = "".join(f'<div class="panel" data-chart="{html.escape(title)}">{svg}</div>'
                          for title, svg in charts(log))
    steps = max((row.get("step", 0) for row in log.metrics), default=0)
    title = html.escape(f"rlvr run report: {run_dir.name}")
    config_html = (f"<details><summary>config.yaml ({len(config.splitlines())} lines)</summary><pre>"
                   f"{html.escape(config)}</pre></details>") if config else "<p>(no config.yaml)</p>"
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
<h2>Sampled completions (held-out, per evaluation)</h2>{samples_html(samples)}
<h2>Config</h2>{config_html}
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
