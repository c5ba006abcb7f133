"""`rlvr doctor RUN_DIR` and `rlvr report RUN_DIR`: plain-words findings and a self-contained HTML report."""

from __future__ import annotations

import argparse
from typing import Any

from rlvr.report.doctor import diagnose, load_run
from rlvr.report.html import write_report


def _doctor(args: argparse.Namespace) -> int:
    log = load_run(args.run_dir)
    findings = diagnose(log)
    steps = [row.get("step", 0) for row in log.metrics]
    print(f"{args.run_dir}: {max(steps, default=0)} steps logged, {len(findings)} finding(s)")
    for finding in findings:
        print(finding.line())
    if not findings:
        print("nothing alarming: no check of `rlvr doctor` fired (docs/troubleshooting.md lists them)")
    return 0


def _report(args: argparse.Namespace) -> int:
    print(f"wrote {write_report(args.run_dir, args.out)}")
    return 0


def add_parsers(subparsers: Any) -> None:
    doctor = subparsers.add_parser("doctor", help="say what went wrong in a run folder, with step ranges",
                                   description="Read RUN_DIR's metrics.jsonl and timings.jsonl and print "
                                   "findings in plain words (docs/troubleshooting.md).")
    doctor.add_argument("run_dir", metavar="RUN_DIR")
    doctor.set_defaults(func=_doctor)
    report = subparsers.add_parser("report", help="write a self-contained HTML report of a run folder",
                                   description="Curves, the doctor's findings, sampled completions and the "
                                   "config of RUN_DIR in one HTML file (default RUN_DIR/report.html).")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--out", default=None, help="where to write the HTML file")
    report.set_defaults(func=_report)
