"""Math grading figures on the real data, and speed against plain math-verify.

    .venv/bin/python benchmarks/bench_math_grading.py [--no-reference]

For MATH-500 and GSM8K (test and train): the share of reference solutions whose extracted answer
`math_equal` accepts against the ground truth (must be >= 99.5% / 99.9%), and the share of answers
accepted against another problem's answer (must be <= 1%). "cross" pairs each answer with the next
problem whose reference answer is a different string; "cross, raw" pairs it with the next problem
whatever its answer, so identical references (genuinely equal) count as acceptances there.
The reference run grades the same pairs with math-verify's parse/verify called directly in this
process (its own signal timeouts), as a TRL reward function would.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from rlvr.rewards.extract import extract_answer
from rlvr.rewards.math_grader import MathGrader
from rlvr.tasks.data import gsm8k_answer, shared_file


def load(name: str) -> tuple[list[str], list[str]]:
    rows = [json.loads(line) for line in shared_file(name).open()]
    if name.startswith("math500"):
        return [r["solution"] for r in rows], [r["answer"] for r in rows]
    return [r["answer"] for r in rows], [gsm8k_answer(r["answer"]) for r in rows]


def cross_pairs(answers: list[str], distinct: bool) -> list[tuple[str, str]]:
    n, pairs = len(answers), []
    for i, a in enumerate(answers):
        j = next(k % n for k in range(i + 1, i + n) if not distinct or answers[k % n] != a)
        pairs.append((a, answers[j]))
    return pairs


def reference(pairs: list[tuple[str, str]]) -> list[bool]:
    from math_verify import parse, verify

    return [bool(verify(parse(f"${t}$"), parse(f"${p}$"))) if p else False for p, t in pairs]


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-reference", action="store_true", help="skip the plain math-verify reference run")
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    start = time.perf_counter()
    grader = MathGrader().start()
    grader.equal_batch([("x+1", "1+x")])  # pays the worker start-up once
    print(f"grader: {grader.n_workers} workers, warm after {time.perf_counter() - start:.1f} s\n")
    print("seconds / ref s: grading own + cross pairs with rlvr / with plain math-verify")
    print(f"{'data set':<14}{'pairs':>6} {'own':>8} {'cross':>7} {'cross, raw':>11} {'seconds':>8}"
          f" {'ref own':>8} {'ref cross':>9} {'ref s':>7} {'speed-up':>8}")
    for name, label in [("math500_test.jsonl", "MATH-500"), ("gsm8k_test.jsonl", "GSM8K test"),
                        ("gsm8k_train.jsonl", "GSM8K train")]:
        solutions, truths = load(name)
        own_pairs = [(extract_answer(s), t) for s, t in zip(solutions, truths)]
        cross, raw = cross_pairs(truths, True), cross_pairs(truths, False)
        (own_ok, cross_ok), secs = timed(lambda: (grader.equal_batch(own_pairs), grader.equal_batch(cross)))
        raw_ok = grader.equal_batch(raw)
        line = (f"{label:<14}{len(truths):>6} {sum(own_ok) / len(own_ok):>8.2%} {sum(cross_ok) / len(cross):>7.2%}"
                f" {sum(raw_ok) / len(raw):>11.2%} {secs:>8.2f}")
        if not args.no_reference and name != "gsm8k_train.jsonl":
            (ref_own, ref_cross), ref_secs = timed(lambda: (reference(own_pairs), reference(cross)))
            line += (f" {sum(ref_own) / len(ref_own):>8.2%} {sum(ref_cross) / len(cross):>9.2%}"
                     f" {ref_secs:>7.2f} {ref_secs / secs:>7.1f}x")
        print(line)
    solutions, truths = load("math500_test.jsonl")
    latex_only = grader.pool.map([(extract_answer(s), t) for s, t in zip(solutions, truths)])
    accepted = sum(status == "ok" and value for status, value in latex_only)
    print(f"\nMATH-500 own answers through math-verify alone (no fast path): {accepted / len(latex_only):.2%}")
    print(f"timeouts: {grader.timeouts}, errors: {grader.errors}; thresholds: own >= 99.5% (MATH-500), "
          f">= 99.9% (GSM8K); cross <= 1%")
    grader.close()


if __name__ == "__main__":
    main()
