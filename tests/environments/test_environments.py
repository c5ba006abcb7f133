"""The built-in environments (guess, tools, code) step by step, and environments by name: registered, or
`module:Class` with its options checked before any episode."""

import random
import sys
import textwrap

import pytest

from rlvr.environments import ENVIRONMENTS, environment_factory, register_environment
from rlvr.environments.code_env import CodeEnv
from rlvr.environments.guess import GuessEnv
from rlvr.environments.tool_env import ToolEnv
from rlvr.tasks import Example, get_task


def assistant(text):
    return {"role": "assistant", "content": text}


def test_guess_by_hand():
    env = GuessEnv(turn_cost=0.1)
    item = get_task("guess", low=1, high=15).eval_examples(15, 0)[0]
    hidden = int(item.answer)
    assert env.reset(item) == [{"role": "user", "content": "guess 1-15:"}]
    low = env.step(assistant(str(hidden - 1) if hidden > 1 else "abc"))
    assert low.observations[0]["content"] == ("higher" if hidden > 1 else "invalid") and not low.done
    assert env.step(assistant("99")).observations == [{"role": "user", "content": "invalid"}]  # out of range
    hit = env.step(assistant(f" {hidden}\n"))
    assert hit.done and hit.reward == pytest.approx(0.8) and hit.info["correct"]  # solved at turn 3


def test_guess_items_cover_every_number_and_its_demonstrations_ignore_the_feedback():
    task = get_task("guess", low=3, high=9)
    assert sorted(int(e.answer) for e in task.eval_examples(14, 0)) == sorted(list(range(3, 10)) * 2)
    assert task.is_correct("7", Example("", "7")) and not task.is_correct("7 ", Example("", "8"))
    replies = GuessEnv().demonstration(task.train_examples(1, 0)[0], random.Random(0))
    assert all(3 <= int(r) <= 9 for r in replies) and len(set(replies)) > 1


class Sums:
    """A stand-in task: the answer is right when it names the item's answer."""

    def reward_fn(self):
        return lambda prompt, completion, example: float(completion.strip().endswith(example["answer"]))

    def is_correct(self, completion, example):
        return completion.strip().endswith(example.answer)


def test_tools_environment_runs_calls_then_scores_the_answer():
    env = ToolEnv(Sums(), tools=["calculator"])
    first = env.reset(Example("What is 12 * 7?", "84", {"question": "What is 12 * 7?"}))
    assert first[0]["role"] == "system" and "calculator" in first[0]["content"] and first[1]["content"] == \
        "What is 12 * 7?"
    call = env.step(assistant('<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
                              '<tool_call>{"name": "calc", "arguments": {}}</tool_call>'))
    assert [m["content"] for m in call.observations] == ["84", "error: unknown tool 'calc'; tools: calculator"]
    assert [m["role"] for m in call.observations] == ["tool", "tool"] and not call.done
    assert call.info == {"tool_calls": 2, "tool_errors": 1}
    answer = env.step(assistant("The answer is 84"))
    assert answer.done and answer.reward == 1.0 and answer.info["correct"]
    assert env.tools[0]["function"]["name"] == "calculator"  # for templates that render tool schemas


def test_code_environment_feeds_failures_back_and_rewards_the_last_attempt():
    env = CodeEnv(attempts=2)
    item = Example("Write f.", "", {"tests": ["assert f(1) == 2", "assert f(5) == 6", "assert f(0) == 1"]})
    env.reset(item)
    first = env.step(assistant("```python\ndef f(x):\n    return x * 2\n```"))
    assert not first.done and first.reward == 0.0 and first.info["passed"] == pytest.approx(1 / 3)
    assert first.observations[0]["content"].startswith("2 of 3 tests failed:\nassert f(5) == 6\nassert f(0) == 1")
    last = env.step(assistant("def f(x):\n    return x + 2"))  # wrong again, and the last attempt
    assert last.done and last.reward == 0.0 and not last.info["correct"]
    env.reset(item)
    solved = env.step(assistant("```python\ndef f(x):\n    return x + 1\n```"))
    assert solved.done and solved.reward == 1.0 and solved.info["correct"]


def test_code_environment_refuses_items_without_tests_at_reset():
    with pytest.raises(Exception, match="needs 'tests'"):
        CodeEnv().reset(Example("Write f.", "", {}))


USER_ENV = textwrap.dedent('''
    from rlvr.rollout.environment import StepResult

    class Countdown:
        """Say the numbers from `start` down to 1, one a turn."""

        def __init__(self, start: int = 3):
            self.start = start

        def reset(self, item):
            self.next = self.start
            return [{"role": "user", "content": f"count down from {self.start}"}]

        def step(self, message):
            ok = message["content"].strip() == str(self.next)
            self.next -= 1
            done = not ok or self.next == 0
            return StepResult([] if done else [{"role": "user", "content": "go on"}], float(ok), done,
                              {"correct": ok and self.next == 0})
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_envs.py").write_text(USER_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_envs"
    sys.modules.pop("my_envs", None)


def test_an_environment_by_module_and_class(user_module):
    make = environment_factory(f"{user_module}:Countdown", {"start": 2})
    env = make()
    assert env.reset(None)[0]["content"] == "count down from 2" and make() is not env  # one per episode
    assert env.step(assistant("2")).reward == 1.0 and env.step(assistant("1")).info["correct"]
    with pytest.raises(ValueError, match="has no option 'stop'; options: start"):
        environment_factory(f"{user_module}:Countdown", {"stop": 1})
    with pytest.raises(ValueError, match="module 'my_envs' has no 'Nope'"):
        environment_factory(f"{user_module}:Nope", {})
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        environment_factory("no_such_module:Env", {})
    with pytest.raises(ValueError, match="unknown environment 'countdown'"):
        environment_factory("countdown", {})


def test_a_registered_environment_and_bad_options():
    @register_environment("test_countdown")
    class Registered(GuessEnv):
        pass

    try:
        assert isinstance(environment_factory("test_countdown", {})(), Registered)
        with pytest.raises(ValueError, match="registered twice"):
            register_environment("test_countdown")(Registered)
    finally:
        ENVIRONMENTS.pop("test_countdown")
    with pytest.raises(ValueError, match="turn_cost must be in"):  # the constructor's own check, at build time
        environment_factory("guess", {"turn_cost": 2.0})
    with pytest.raises(ValueError, match="has no option 'task'"):  # the run's task is not an option
        environment_factory("guess", {"task": 1})
