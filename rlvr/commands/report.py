"""`rlvr doctor RUN_DIR` and `rlvr report RUN_DIR`: plain-words findings and a self-contained HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlvr.commands.outputs import resolve_out_file
from rlvr.logging.sinks import METRICS
from rlvr.report.doctor import PROBLEM, WARNING, diagnose, load_run
from rlvr.report.html import REPORT, is_report, write_report


def _doctor(args: argparse.Namespace) -> int:
    log = load_run(args.run_dir)
    steps = max((row.get("step", 0) for row in log.metrics), default=0)
    if not steps:  # a run that has just started: no training step to judge yet
        held = "is empty" if (Path(args.run_dir) / METRICS).is_file() else "does not exist yet"
        held = "holds only the evaluation before step 1" if log.metrics else held
        print(f"{args.run_dir}: no training step logged yet ({METRICS} {held}); nothing to diagnose, run "
              "`rlvr doctor` again once steps are logged")
        return 0
    findings = diagnose(log)
    print(f"{args.run_dir}: {steps} steps logged, {len(findings)} finding(s)")
    for finding in findings:
        print(finding.line())
    if not findings:
        print("nothing alarming: no check of `rlvr doctor` fired (docs/troubleshooting.md lists them)")
    return 1 if failing(findings, args.fail_on) else 0


FAIL_ON = {"never": (), "problem": (PROBLEM,), "warning": (PROBLEM, WARNING)}  # --fail-on LEVEL: that or worse


def failing(findings: list, fail_on: str) -> list:
    """The findings that make `rlvr doctor --fail-on fail_on` exit 1 (a CI job's gate)."""
    return [f for f in findings if f.severity in FAIL_ON[fail_on]]


def _report(args: argparse.Namespace) -> int:
    out = resolve_out_file(args.out, Path(args.run_dir) / REPORT, "--out", is_report,
                           "a report written by `rlvr report`")  # before any work, as `rlvr eval --out`
    print(f"wrote {write_report(args.run_dir, out)}")
    return 0


def add_parsers(subparsers: Any) -> None:
    doctor = subparsers.add_parser("doctor", help="say what went wrong in a run folder, with step ranges",
                                   description="Read RUN_DIR's metrics.jsonl and timings.jsonl and print "
                                   "findings in plain words (docs/troubleshooting.md).")
    doctor.add_argument("run_dir", metavar="RUN_DIR")
    doctor.add_argument("--fail-on", choices=list(FAIL_ON), default="never",
                        help="exit 1 when a finding of this severity or worse is found, so a CI job can gate on a "
                             "run: `problem`, or `warning` (warnings and problems); default never (exit 0)")
    doctor.set_defaults(func=_doctor)
    report = subparsers.add_parser("report", help="write a self-contained HTML report of a run folder",
                                   description="Curves, the doctor's findings, sampled completions and the "
                                   "config of RUN_DIR in one HTML file (default RUN_DIR/report.html).")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--out", default=None,
                        help=f"the HTML file, or a folder to write {REPORT} in (an existing one, or a path ending in "
                             f"'/': made if missing); an existing file is written over only if it is an earlier "
                             f"report (default: RUN_DIR/{REPORT}, replaced on each run)")
    report.set_defaults(func=_report)
