"""`code`: write a program, see which tests fail, try again: up to `attempts` attempts, reward from the last.

    user: Write a Python function f(x) that returns 3 * x + 4. ...    assistant: ```python ...```
    user: 2 of 4 tests failed: assert f(1) == 7 ... Fix the program.    assistant: ```python ...```

Each attempt's program (the last ```python block of the message, `rlvr.rewards.code.extract_code`) runs
against the item's `tests` (or `test_cases`) in the sandbox exactly as the code reward runs it
(`rlvr.rewards.code.passed_tests`: bubblewrap, limits, the verdict made outside the sandbox). All passed: the
episode ends with reward 1. Otherwise the failing tests (`show_tests`) or their count go back to the model,
until the last attempt, whose pass fraction is the episode's reward; earlier attempts earn nothing.
"""

from __future__ import annotations

from typing import Any

from rlvr.environments.base import register_environment
from rlvr.rewards.code import check_example, extract_code, passed_tests
from rlvr.rollout.environment import Message, StepResult
from rlvr.sandbox import SandboxLimits, resolve_isolation


@register_environment("code")
class CodeEnv:
    def __init__(self, attempts: int = 3, show_tests: bool = True, isolation: str = "auto",
                 cpu_seconds: int = 2, wall_seconds: float = 5.0) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.attempts, self.show_tests = attempts, show_tests
        self.isolation = resolve_isolation(isolation)
        self.limits = SandboxLimits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds,
                                    test_timeout=min(wall_seconds, 5.0))

    def reset(self, item: Any) -> list[Message]:
        self.example, self.attempt = item.as_dict(), 0
        check_example(self.example)  # a wrong shape fails at reset (counted), not as a string of zero rewards
        return [{"role": "user", "content": item.fields.get("question", item.prompt)}]

    def step(self, message: Message) -> StepResult:
        self.attempt += 1
        passed = passed_tests(extract_code(message["content"]), self.example, self.limits, self.isolation)
        share, last = sum(passed) / len(passed), self.attempt >= self.attempts
        info = {"correct": all(passed), "passed": share, "attempt": self.attempt}
        if all(passed) or last:
            return StepResult([], share, True, info)
        return StepResult([{"role": "user", "content": self._feedback(passed)}], 0.0, False, info)

    def _feedback(self, passed: list[bool]) -> str:
        failed = [i for i, ok in enumerate(passed) if not ok]
        text = f"{len(failed)} of {len(passed)} tests failed"
        tests = self.example.get("tests")
        if self.show_tests and tests:
            text += ":\n" + "\n".join(tests[i] for i in failed)
        return f"{text}\nFix the program and answer with the whole function again."
