"""Code verifier reward: the fraction of an example's tests that the completion's Python passes,
run in the sandbox of `rlvr.sandbox`.

An example gives either `tests`, Python assert statements run after the code in its namespace (MBPP /
HumanEval style `assert f(1) == 2`), or `test_cases`, `{"input": ..., "output": ...}` pairs fed on
stdin with stdout compared line by line, trailing whitespace ignored (APPS / CodeContests style).
The code is the last fenced ```python block of the completion, else the whole completion.
Each assert test runs in a fresh sandbox and is graded outside it (`rlvr.rewards.grade`, in a short-lived
process under the same CPU and memory limits); stdout is compared here. The sandbox never sees an expected
value, so it cannot report a pass.
Time: once a test of a completion runs out of time (the wall clock, RLIMIT_CPU, or an assert test's
`test_timeout`), its remaining tests are not run and count as failed, so a completion that hangs costs about
one `wall_seconds`, not one per test.
An example of the wrong shape (no `tests` nor `test_cases`, MBPP's `test_list`, a test that is not an assert
statement) raises `RewardConfigError`, which stops the run instead of training on zero rewards.
"""

from __future__ import annotations

import logging
import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from rlvr.rewards.base import BatchContext, RewardBatch, RewardConfigError, bounded
from rlvr.rewards.grade import SplitTest, split_test, verdicts
from rlvr.rewards.safe import as_mapping
from rlvr.sandbox import (SandboxError, SandboxLimits, SandboxResult, describe_isolation, resolve_isolation,
                          run_python)

logger = logging.getLogger("rlvr.rewards")

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)
_OUT_OF_CPU = (-signal.SIGXCPU, -signal.SIGKILL)  # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL at the hard
_OTHER_FIELDS = {  # fields of other data sets' tests, and what to do with them
    "test_list": "MBPP's field; rename it to tests",
    "test": "HumanEval's check(candidate) program; give its asserts, calling the function by name, as tests",
    "input_output": "APPS' JSON of inputs and outputs; give them as test_cases [{input, output}, ...]",
    "public_tests": "CodeContests' field; give its inputs and outputs as test_cases [{input, output}, ...]",
}


def extract_code(completion: str) -> str:
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def _same_output(got: str, want: str) -> bool:
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").splitlines()]

    return norm(got) == norm(want)


def check_example(example: Mapping[str, Any]) -> list[SplitTest]:
    """The example's assert tests, split for grading ([] for `test_cases`); RewardConfigError, naming the field,
    when its tests are not of a shape we grade."""
    tests, cases = example.get("tests"), example.get("test_cases")
    if tests:
        if isinstance(tests, (str, bytes)) or not all(isinstance(t, str) for t in tests):
            raise RewardConfigError(f"code example: tests must be a list of assert statements, got {tests!r:.200}")
        splits = []
        for test in tests:
            try:
                splits.append(split_test(test))
            except ValueError as e:
                hint = "; HumanEval's check(candidate) must become asserts" if "def check" in test else \
                    "; write it as an assert statement" if not test.lstrip().startswith("assert") else ""
                raise RewardConfigError(f"{str(e)[:300]}{hint}") from None
        return splits
    if cases:
        if isinstance(cases, (str, bytes)) or not all(isinstance(c, Mapping) and {"input", "output"} <= c.keys()
                                                     for c in cases):
            raise RewardConfigError(f"code example: test_cases must be [{{input, output}}, ...], got {cases!r:.200}")
    else:
        found = [f"{name}: {why}" for name, why in _OTHER_FIELDS.items() if name in example]
        raise RewardConfigError("a code example needs 'tests' (assert statements) or 'test_cases' "
                                f"([{{input, output}}, ...]); {'; '.join(found) or f'fields: {sorted(example)}'}")
    return []


def _out_of_time(result: SandboxResult) -> bool:
    """The run used up a time limit: the wall clock, RLIMIT_CPU, or (an assert test) the per-test timer."""
    return result.timed_out or result.exit_code in _OUT_OF_CPU or result.test_timed_out


def pass_fraction(code: str, example: Mapping[str, Any], limits: SandboxLimits = SandboxLimits(),
                  isolation: str = "auto") -> float:
    """Fraction of the example's tests passed by `code` (0.0 when it crashes, hangs or cheats); the tests
    after one that runs out of time fail unrun. Raises RewardConfigError for an example of the wrong shape."""
    passed = passed_tests(code, example, limits, isolation)
    return sum(passed) / len(passed)


def passed_tests(code: str, example: Mapping[str, Any], limits: SandboxLimits = SandboxLimits(),
                  isolation: str = "auto") -> list[bool]:
    """Whether `code` passes each of the example's tests (`tests` or `test_cases`, in order), as
    `pass_fraction` counts them: what the `code` environment tells the model it got wrong."""
    return _verdicts(code, example, check_example(example), limits, isolation)


def _verdicts(code: str, example: Mapping[str, Any], splits: list[SplitTest], limits: SandboxLimits,
              isolation: str) -> list[bool]:
    """`passed_tests` of an example `check_example` passed, given the tests it split."""
    if splits:
        tests = example["tests"]
        values: list[list[str | None] | None] = []
        for split in splits:
            result = run_python(code, exprs=list(split.exprs), limits=limits, isolation=isolation)
            values.append(result.values)
            if _out_of_time(result):
                break
        values += [None] * (len(tests) - len(values))
        return verdicts(tests, values, limits.cpu_seconds, limits.memory_mb, limits.wall_seconds)
    passed: list[bool] = []
    for case in example["test_cases"]:
        result = run_python(code, stdin=str(case["input"]), limits=limits, isolation=isolation)
        passed.append(not result.timed_out and result.exit_code == 0
                      and _same_output(result.stdout, str(case["output"])))
        if _out_of_time(result):
            break
    return passed + [False] * (len(example["test_cases"]) - len(passed))


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
        # every example checked before any sandbox starts: a wrong shape stops the run at once
        jobs = [(extract_code(c), e, check_example(e)) for c, e in zip(completions, map(as_mapping, examples))]
        with ThreadPoolExecutor(self.max_workers or os.cpu_count() or 1) as ex:
            passed = list(ex.map(lambda job: _verdicts(*job, self.limits, self.isolation), jobs))
        return RewardBatch([sum(p) / len(p) for p in passed])
