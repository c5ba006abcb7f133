"""The code reward stays bounded and loud: a value the program returns cannot hang or exhaust the trainer
through a test's check, a hanging completion costs one time limit and not one per test, and an example
whose tests are of another shape stops the run instead of scoring 0."""

import json
import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.rewards import code as code_module
from rlvr.rewards.base import RewardConfigError
from rlvr.rewards.code import pass_fraction
from rlvr.rewards.combine import CombinedReward
from rlvr.rewards.registry import reward_from_name
from rlvr.sandbox.python import SandboxLimits, run_python

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=3, test_timeout=1)
# Where the per-test timer is what is tested, a run's wall-clock limit that a busy machine's start cannot reach
# (with a 3 s one, the hanging test of one of them scored otherwise at load 16)
ROOMY = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=20, test_timeout=1)
OUTER_TIMEOUT = 60  # a regression that hangs fails the test instead of hanging CI
HUGE = "```python\ndef f(n):\n    return 10**15\n```"
BOMBS = ["assert sum(range(f(3))) == 3", "assert [0] * f(3) == [0]", "assert 2 ** f(3) == 8",
         "assert 'a' * f(3) == 'aaa'", "assert math.factorial(f(3)) == 6"]

# Scored in a child process under a timeout: the hang this guards against is in the scoring process itself.
_SCORE = textwrap.dedent("""
    import json, sys
    from rlvr.rewards.combine import CombinedReward
    from rlvr.rewards.registry import reward_from_name
    completions, examples = json.loads(sys.stdin.read())
    reward = CombinedReward([(reward_from_name("code", cpu_seconds=1, memory_mb=256, wall_seconds=3), 1.0, "code")])
    batch = reward.score_batch(["p"] * len(completions), completions, examples)
    print(json.dumps([batch.scores, batch.errors]))
""")


def _score_in_child(completions: list[str], examples: list[dict]) -> tuple[list[float], int]:
    try:
        out = subprocess.run([sys.executable, "-c", _SCORE], input=json.dumps([completions, examples]),
                             capture_output=True, text=True, timeout=OUTER_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scoring did not end within {OUTER_TIMEOUT} s")
    assert out.returncode == 0, out.stderr[-3000:]
    scores, errors = json.loads(out.stdout.splitlines()[-1])
    return scores, errors


def test_a_huge_value_cannot_hang_the_check():
    good = "```python\ndef f(n):\n    return n\n```"
    examples = [{"tests": [bomb]} for bomb in BOMBS] + [{"tests": ["assert sum(range(f(3))) == 3"]}]
    start = time.monotonic()
    scores, errors = _score_in_child([HUGE] * len(BOMBS) + [good], examples)
    assert scores == [0.0] * len(BOMBS) + [1.0] and errors == 0
    assert time.monotonic() - start < OUTER_TIMEOUT


def test_the_checks_before_a_limit_hit_still_count():
    tests = ["assert f(1) == 10**15", "assert sum(range(f(2))) == 1", "assert f(3) == 10**15"]
    scores, errors = _score_in_child([HUGE], [{"tests": tests}])
    assert scores == [pytest.approx(1 / 3)] and errors == 0  # the check after the limit hit fails unchecked


@pytest.fixture
def runs(monkeypatch):
    """The sandbox runs of the test, counted."""
    count = []
    real = code_module.run_python

    def counted(*args, **kwargs):
        count.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(code_module, "run_python", counted)
    return count


TESTS = {"tests": ["assert f(1) == 2", "assert f(2) == 3", "assert f(3) == 4", "assert f(4) == 5"]}


@pytest.mark.parametrize("code", ["import time\ntime.sleep(1000)\n", "while True:\n    pass\n",
                                  "def f(x):\n    import time\n    time.sleep(1000)\n",
                                  "def f(x):\n    while True:\n        pass\n"],
                         ids=["sleep at the top", "loop at the top", "sleep in f", "loop in f"])
def test_a_hanging_completion_runs_one_test(runs, code):
    start = time.monotonic()
    assert pass_fraction(code, TESTS, LIMITS) == 0.0
    assert len(runs) == 1
    assert time.monotonic() - start < LIMITS.wall_seconds + 30  # a hang alone never ends; 30 s: a busy machine


def test_the_tests_before_a_timeout_count_and_a_crash_does_not_stop(runs):
    hangs_on_3 = "def f(x):\n    while x == 3:\n        pass\n    return x + 1\n"
    assert pass_fraction(hangs_on_3, TESTS, ROOMY) == 0.5 and len(runs) == 3
    runs.clear()
    raises_on_2 = "def f(x):\n    if x == 2:\n        raise ValueError\n    return x + 1\n"
    assert pass_fraction(raises_on_2, TESTS, ROOMY) == 0.75 and len(runs) == 4


def test_a_raise_after_a_slow_start_is_not_a_timeout(runs):
    """The launcher says which expression ran past the per-test timer: a run longer than the timer whose test
    raised (here a 1.3 s start at the top, not under the timer) does not stop the tests after it."""
    slow_then_raises_on_2 = ("import time\ntime.sleep(1.3)\n"
                             "def f(x):\n    if x == 2:\n        raise ValueError\n    return x + 1\n")
    assert pass_fraction(slow_then_raises_on_2, TESTS, ROOMY) == 0.75 and len(runs) == 4


def test_the_launcher_marks_the_expression_that_ran_out_of_time():
    slow_f = "import time\ndef f(x):\n    if x == 2:\n        time.sleep(1000)\n    return x\n"
    result = run_python(slow_f, exprs=["f(1)", "f(2)", "f(3)"], limits=ROOMY, isolation="none")
    assert result.values == ["1", None, "3"] and result.test_timed_out and not result.timed_out
    raises = run_python("def f(x):\n    raise ValueError\n", exprs=["f(1)"], limits=LIMITS, isolation="none")
    assert raises.values == [None] and not raises.test_timed_out


def test_stdin_cases_stop_at_the_first_timeout(runs):
    cases = {"test_cases": [{"input": "1", "output": "1"}] * 4}
    assert pass_fraction("import time\ntime.sleep(1000)\n", cases, LIMITS) == 0.0 and len(runs) == 1


@pytest.mark.parametrize("example, match", [
    ({"tests": ["def check(candidate):\n    assert candidate(1, 2) == 3"]}, "HumanEval"),
    ({"tests": ["add(1, 2) == 3"]}, "assert statement"),
    ({"test_list": ["assert add(1, 2) == 3"]}, "test_list: MBPP's field; rename it to tests"),
    ({"test": "def check(candidate): ..."}, "HumanEval"),
    ({"input_output": "{}"}, "test_cases"),
    ({"answer": "3"}, r"fields: \['answer'\]"),
    ({"tests": "assert add(1, 2) == 3"}, "list of assert statements"),
    ({"test_cases": [{"stdin": "1", "stdout": "1"}]}, "input, output"),
])
def test_a_wrongly_shaped_example_stops_the_run(runs, example, match):
    reward = CombinedReward([(reward_from_name("code", isolation="none"), 1.0, "code")])
    good = {"tests": ["assert add(1, 2) == 3"]}
    with pytest.raises(RewardConfigError, match=match):
        reward.score_batch(["p", "p"], ["def add(a, b):\n    return a + b\n"] * 2, [good, example])
    assert runs == []  # checked before any sandbox starts
