"""`rlvr report`: one self-contained HTML file, checked in a real headless Chromium: the page loads
with no script error (a window.onerror hook writes errors into the DOM, read back with --dump-dom)
and its screenshot shows the curves."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image
from run_folders import healthy_rows, planted, write_run

from rlvr.cli import main
from rlvr.report.doctor import load_run
from rlvr.report.html import SAMPLES_PER_STEP, build_report, charts, svg_chart, write_report

CURVE_BLUE = (0x1F, 0x77, 0xB4)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Chromium is needed (apt-get install chromium; scripts/setup.sh installs it under root)"
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True,
                          timeout=180)


def dump_dom(tmp_path: Path, page: Path) -> str:
    out = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_a_chart_has_axis_titles_ticks_a_grid_and_a_legend_with_line_samples():
    """The curves had min/max labels only: no axis titles, no grid, a legend of coloured words."""
    svg = svg_chart("Accuracy", "share correct", [("train batch", [1, 2, 3], [0.1, 0.2, 0.4]),
                                                  ("held-out greedy", [0, 3], [0.0, 0.3])], (0.0, 1.0))
    assert svg.startswith("<svg") and "<?xml" not in svg
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert {"Accuracy", "RL step", "share correct", "train batch", "held-out greedy"} <= set(texts)
    assert {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"} <= set(texts)  # y ticks over the pinned 0..1
    assert "2.5" not in texts and {"0", "1", "2", "3"} <= set(texts)  # whole steps on the x axis
    assert svg.count('id="legend_1"') == 1 and re.search(r'id="line2d_\d+"', svg)  # legend with line samples
    assert len(re.findall(r'id="(?:x|y)tick_\d+"', svg)) >= 8 and 'id="patch_1"' in svg
    grid = re.findall(r'<path d="M [^"]*" clip-path="[^"]*" style="fill: none; stroke: #b0b0b0; stroke-opacity: 0\.3', svg)
    assert len(grid) >= 8  # a grid line at each tick
    assert svg_chart("empty", "y", []) == ""
    assert svg == svg_chart("Accuracy", "share correct", [("train batch", [1, 2, 3], [0.1, 0.2, 0.4]),
                                                          ("held-out greedy", [0, 3], [0.0, 0.3])], (0.0, 1.0))


def test_reward_and_accuracy_are_apart_the_held_out_curves_overlaid_and_the_reward_split_by_term(tmp_path):
    """Reward and accuracy shared one chart; the held-out evaluations were a chart apart; a term had no chart."""
    run = planted(tmp_path / "run", "hacking")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows[1:]:
        row.update({"reward/task": row["reward"], "reward/task/inclusion": 1.0, "reward/task/ordered_pairs": 0.1})
        if "eval/greedy_accuracy" in row:
            row["eval/greedy_reward"] = 0.05
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    svgs = dict(charts(load_run(run)))
    assert list(svgs)[:3] == ["Reward", "Reward by term (before weights)", "Exact-match accuracy"]
    legend = lambda title: re.findall(r"<text[^>]*>([^<]*)</text>", svgs[title])  # noqa: E731
    assert {"train batch", "held-out greedy"} <= set(legend("Reward")) and "accuracy" not in legend("Reward")
    assert {"train batch", "held-out greedy"} <= set(legend("Exact-match accuracy"))
    assert {"task", "task/inclusion", "task/ordered_pairs"} <= set(legend("Reward by term (before weights)"))
    assert "Time per step" in svgs  # from timings.jsonl


def test_report_is_self_contained_and_escapes_what_it_shows(tmp_path):
    run = planted(tmp_path / "run", "entropy")
    (run / "samples.jsonl").write_text('{"step": 20, "prompt": "<script>alert(1)</script>", "completion": "x", '
                                       '"reward": 0.5, "reward/format": 1.0}\n')
    page = build_report(run)
    assert "&lt;script&gt;alert(1)" in page and "<script>alert(1)" not in page
    assert "reward/format 1" in page and "entropy collapse" in page and "seed: 0" in page
    assert not re.search(r'(src|href|xlink:href)="(https?:)?//', page)  # nothing fetched from anywhere
    assert page.count("<svg") == 8


def test_the_config_is_collapsed_and_every_evaluation_is_a_section(tmp_path):
    """Half the page was the config dump; only the last evaluation's samples were shown."""
    samples = [{"step": s, "mode": m, "prompt": f"p{s}", "completion": "c", "answer": "a", "reward": r,
                "correct": r == 1.0, "finish_reason": "stop"} for s in (0, 10, 20) for m, r in
               (("greedy", 1.0), ("sampled", 0.0))]
    run = write_run(tmp_path / "run", healthy_rows(), samples=samples)
    page = build_report(run)
    assert re.search(r"<details><summary>config.yaml \(\d+ lines\)</summary><pre>", page)
    sections = re.findall(r'<details( open)? data-step="(\d+)"><summary>([^<]*)</summary>', page)
    assert [(opened, step) for opened, step, _ in sections] == [(" open", "20"), ("", "10"), ("", "0")]
    assert sections[0][2] == "step 20: 2 samples, mean reward 0.5, 1 correct"
    many = [{**samples[0], "step": 30}] * (SAMPLES_PER_STEP + 5)
    (run / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in many))
    page = build_report(run)
    assert f"{SAMPLES_PER_STEP + 5} samples (the first {SAMPLES_PER_STEP} shown)" in page
    assert page.count("<td class=completion>") == SAMPLES_PER_STEP


def test_the_hook_reports_script_errors(tmp_path):
    page = tmp_path / "broken.html"
    run = planted(tmp_path / "run", "flat")
    page.write_text(build_report(run).replace("</body>", "<script>undefinedFunction();</script></body>"))
    assert re.search(r'id="page-errors" data-errors="[^"]*undefinedFunction', dump_dom(tmp_path, page))


@pytest.mark.slow
def test_report_of_a_real_run_in_chromium(tmp_path, tiny_run, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_run), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    dom = dump_dom(tmp_path, out)
    assert 'data-loaded="report.html"' in dom and '<div id="page-errors"></div>' in dom
    assert dom.count("<svg") >= 8 and dom.count('id="legend_1"') >= 4 and dom.count(">RL step</text>") >= 8
    assert re.search(r'<details open="" data-step="8">', dom) and '<details data-step="0">' in dom
    shot = tmp_path / "shot.png"
    result = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", out.as_uri())
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # not a blank page
    blue = sum(n for n, rgb in colours if all(abs(a - b) < 40 for a, b in zip(rgb, CURVE_BLUE)))
    assert blue > 500  # the curves are drawn
    grid = sum(n for n, rgb in colours if all(abs(c - 0xE7) < 4 for c in rgb))  # grid: #b0b0b0 at 0.3 on white
    assert grid > 500


def test_report_refuses_a_non_run(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists()
    assert write_report(planted(tmp_path / "ok", "flat")).name == "report.html"


def test_out_may_be_a_folder_or_a_path_whose_folders_do_not_exist_yet(tmp_path, capsys):
    """--out of an existing folder was an internal IsADirectoryError; a path under missing folders was
    refused after the report was built."""
    run = planted(tmp_path / "run", "flat")
    (tmp_path / "reports").mkdir()
    assert main(["report", str(run), "--out", str(tmp_path / "reports")]) == 0
    assert (tmp_path / "reports" / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(run), "--out", str(tmp_path / "new" / "deeper" / "r.html")]) == 0
    assert (tmp_path / "new" / "deeper" / "r.html").is_file()
    (tmp_path / "a_file").write_text("x")
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "a_file" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == f"rlvr report: error: --out: {str(tmp_path / 'a_file')!r} is a file, not a folder\n"
    assert (tmp_path / "a_file").read_text() == "x"


def test_out_that_cannot_be_written_or_is_empty_is_refused_before_the_report(tmp_path, capsys, monkeypatch):
    """`--out /proc/r.html` failed after the report was built, with an error that did not name --out;
    `--out ''` wrote report.html into the current folder."""
    run = planted(tmp_path / "run", "flat")
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    outs = [("", "--out: empty path; give a file, or a folder to write report.html in")]
    if Path("/proc/self").is_dir():  # not writable even as root
        outs.append(("/proc/r.html", "--out: cannot write '/proc/r.html' ("))
    for out, needle in outs:
        assert main(["report", str(run), "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rlvr report: error: {needle}") and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.yaml", "notes.html"])
def test_out_never_writes_over_a_file_that_is_not_a_report(tmp_path, capsys, name):
    """`--out RUN/metrics.jsonl` replaced the run's metrics with HTML, exit 0."""
    run = planted(tmp_path / "run", "flat")
    (run / "notes.html").write_text("<!DOCTYPE html><p>mine</p>")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main(["report", str(run), "--out", str(run / name)]) == 2
    err = capsys.readouterr().err
    assert err == (f"rlvr report: error: --out: {str(run / name)!r} exists and is not a report written by "
                   "`rlvr report`; refusing to write over it (choose another file)\n")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_out_writes_over_an_earlier_report(tmp_path, capsys):
    run = planted(tmp_path / "run", "flat")
    for out in (run, run / "report.html", tmp_path / "r.html", tmp_path / "r.html"):
        assert main(["report", str(run), "--out", str(out)]) == 0
    old = build_report(run).replace('<meta name="generator" content="rlvr report">', "")  # before the marker
    (tmp_path / "r.html").write_text(old)
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    assert '<meta name="generator" content="rlvr report">' in (tmp_path / "r.html").read_text()
    capsys.readouterr()


def test_out_ending_in_a_slash_is_a_folder_made_if_missing(tmp_path, capsys):
    """`--out reps/new/` wrote a file named reps/new (no .html); the help says what --out may be."""
    run = planted(tmp_path / "run", "flat")
    assert main(["report", str(run), "--out", f"{tmp_path / 'reps' / 'new'}/"]) == 0
    assert (tmp_path / "reps" / "new" / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {tmp_path / 'reps' / 'new' / 'report.html'}" in capsys.readouterr().out
    (tmp_path / "held" / "report.html").mkdir(parents=True)  # a folder where the file would go
    assert main(["report", str(run), "--out", str(tmp_path / "held")]) == 2
    assert capsys.readouterr().err == (f"rlvr report: error: --out: {str(tmp_path / 'held' / 'report.html')!r} is a "
                                       "folder; the results are written there as a file\n")
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "a path ending in '/'" in " ".join(capsys.readouterr().out.split())


def test_an_environments_episodes_are_shown_turn_by_turn(tmp_path):
    episode = {"turns": [{"assistant": "<tool_call>x</tool_call>", "tokens": 7, "finish": "stop", "reward": 0.0,
                          "info": {"tool_calls": 1, "tool_errors": 1},
                          "observations": [{"role": "tool", "content": "error: unknown tool 'x'"}]},
                         {"assistant": "8", "tokens": 2, "finish": "stop", "reward": 1.0, "info": {"correct": True}}],
               "reward": 1.0, "correct": True, "end": "done", "cut_observations": 0}
    samples = [{"step": 20, "mode": "greedy", "prompt": "q", "completion": "8", "answer": "8", "reward": 1.0,
                "correct": True, "finish_reason": "stop", "episode": episode}]
    rows = [dict(r, **{"episode/turns": 2.0, "episode/turns_solved": 2.0, "episode/tool_errors": 0.5})
            if r["step"] else r for r in healthy_rows()]
    page = build_report(write_run(tmp_path / "run", rows, samples=samples))
    turns = re.findall(r'<div class="turn"><b>assistant</b> <small>\(([^)]*)\)</small><div class="completion">'
                       r'([^<]*)</div>', page)
    assert turns == [("7 tokens, stop; reward 0, 1 tool calls, 1 failed", "&lt;tool_call&gt;x&lt;/tool_call&gt;"),
                     ("2 tokens, stop; reward 1", "8")]
    assert "<b>tool</b><div class=\"completion\">error: unknown tool &#x27;x&#x27;</div>" in page
    assert "ended: done, reward 1" in page and "episode {" not in page  # not dumped among the components
    assert {"Turns per episode", "Environment"} <= {title for title, _ in charts(load_run(tmp_path / "run"))}
