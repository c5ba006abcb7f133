"""Code verifier reward: the fraction of an example's tests that the completion's Python passes,
run in the sandbox of `rlvr.rewards.sandbox`.

An example gives either `tests`, Python statements run after the code in its namespace (MBPP /
HumanEval style `assert f(1) == 2`), or `test_cases`, `{"input": ..., "output": ...}` pairs fed on
stdin with stdout compared line by line, trailing whitespace ignored (APPS / CodeContests style).
The code is the last fenced ```python block of the completion, else the whole completion.
Each assert test runs in a fresh sandbox and is graded here (`rlvr.rewards.grade`); stdout is
compared here too. The sandbox never sees an expected value, so it cannot report a pass.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import logging
import os

from rlvr.rewards.base import BatchContext, RewardBatch, RewardConfigError, bounded
from rlvr.rewards.grade import split_test, verdict
from rlvr.rewards.safe import as_mapping
from rlvr.rewards.sandbox import SandboxError, SandboxLimits, describe_isolation, resolve_isolation, run_python

logger = logging.getLogger("rlvr.rewards")

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def _same_output(got: str, want: str) -> bool:
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").splitlines()]

    return norm(got) == norm(want)


def pass_fraction(code: str, example: Mapping[str, Any], limits: SandboxLimits = SandboxLimits(),
                  isolation: str = "auto") -> float:
    """Fraction of the example's tests passed by `code` (0.0 when it crashes, hangs or cheats)."""
    if example.get("tests"):
        splits = [split_test(t) for t in example["tests"]]
        passed = sum(verdict(s, run_python(code, exprs=list(s.exprs), limits=limits, isolation=isolation).values)
                     for s in splits)
        return passed / len(splits)
    cases = example.get("test_cases")
    if not cases:
        raise ValueError(f"a code example needs 'tests' or 'test_cases'; fields: {sorted(example)}")
    passed = 0
    for case in cases:
        result = run_python(code, stdin=str(case["input"]), limits=limits, isolation=isolation)
        passed += not result.timed_out and result.exit_code == 0 and _same_output(result.stdout, str(case["output"]))
    return passed / len(cases)


@bounded
class CodeReward:
    """Batched: sandboxes run concurrently, `max_workers` at a time (default: CPU count).
    `isolation`: "auto" (bubblewrap, else namespaces under root, else refuse), "bwrap",
    "namespaces" or "none" (only by name: untrusted code with no OS isolation)."""

    __name__ = "code"

    def __init__(self, limits: SandboxLimits = SandboxLimits(), max_workers: int | None = None,
                 isolation: str = "auto") -> None:
        try:
            self.isolation = resolve_isolation(isolation)
        except (SandboxError, ValueError) as e:
            raise RewardConfigError(str(e)) from None
        self.limits, self.max_workers = limits, max_workers
        logger.warning("code reward sandbox: %s", describe_isolation(self.isolation))

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> float:
        return pass_fraction(extract_code(completion), as_mapping(example), self.limits, self.isolation)

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        jobs = [(extract_code(c), as_mapping(e)) for c, e in zip(completions, examples)]
        with ThreadPoolExecutor(self.max_workers or os.cpu_count() or 1) as ex:
            scores = list(ex.map(lambda job: pass_fraction(job[0], job[1], self.limits, self.isolation), jobs))
        return RewardBatch(scores)
