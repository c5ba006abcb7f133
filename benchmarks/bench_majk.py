"""The cost of maj@8 voting by equivalence on MATH-500's ground-truth answers.

    .venv/bin/python benchmarks/bench_majk.py [--repeats 3]

Each problem gets 8 synthetic answers: the truth, the truth with spaces, a wrong number, the truth in another
form (`\\dfrac`, `N.0`, braces), a wrong non-number (`\\sqrt{N}`), and the truth, spaced and other forms again.
Times `rlvr.eval.answer_votes` (keys + grouping with the grader) against the keys alone and against grading the
same answers (`correct_batch`, for scale), with the grader's pool started beforehand, and says how often maj@8
picks the truth.
"""

from __future__ import annotations

import argparse
import json
import re
import time

from rlvr.eval import answer_votes, maj_at_k
from rlvr.rewards.math_grader import get_grader, plain_number
from rlvr.tasks import Example, get_task
from rlvr.tasks.data import shared_file


def variants(truth: str, i: int) -> list[str]:
    spaced = re.sub(r"([,+=}])", r"\1 ", truth).replace("\\frac", "\\frac ")
    value = plain_number(truth)
    if value is not None and value.denominator == 1:
        other = f"{truth}.0"
    elif "\\frac" in truth:
        other = truth.replace("\\frac", "\\dfrac")
    else:
        other = "{" + truth + "}"
    return [truth, spaced, str(1000 + i), other, f"\\sqrt{{{i + 2}}}", truth, spaced, other]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    task = get_task("math500")
    truths = [json.loads(line)["answer"] for line in shared_file("math500_test.jsonl").open()]
    items = [(Example(prompt=f"Q{i} <think>", answer=t), [f" ok</think> <answer>{v}</answer>" for v in variants(t, i)])
             for i, t in enumerate(truths)]
    get_grader().equal_batch([("1", "1"), ("\\sqrt{2}", "\\sqrt{2}")])  # start the pool outside the timing
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        correct = [task.correct_batch(texts, [ex] * 8) for ex, texts in items]
        best = min(best, time.perf_counter() - start)
    print(f"{'grading':16s} {best:7.3f} s for {len(items)} x 8 answers ({1e3 * best / len(items):6.2f} ms/problem)")
    for name, vote in [("keys only", lambda texts, ex: [task.answer_key(t, ex) for t in texts]),
                       ("keys + grouping", lambda texts, ex: answer_votes(task, texts, ex))]:
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            votes = [vote(texts, ex) for ex, texts in items]
            best = min(best, time.perf_counter() - start)
        right = sum(maj_at_k(v, ok, 8) for v, ok in zip(votes, correct))
        groups = sum(len(set(v) - {None}) for v in votes) / len(votes)
        print(f"{name:16s} {best:7.3f} s for {len(items)} x 8 answers ({1e3 * best / len(items):6.2f} ms/problem), "
              f"{groups:.2f} groups/problem, maj@8 right on {right:.0f}/{len(items)}")


if __name__ == "__main__":
    main()
