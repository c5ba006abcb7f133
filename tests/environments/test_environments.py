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
    assert call.info == {"tool_calls": 2, "tool_errors": 1, "tool_calls_correct": 1}  # 84 is the answer
    answer = env.step(assistant("The answer is 84"))
    assert answer.done and answer.reward == 1.0 and answer.info["correct"]
    assert env.tools[0]["function"]["name"] == "calculator"  # for templates that render tool schemas


def test_tools_demonstration_calls_the_calculator_then_answers():
    env = ToolEnv(Sums(), answer_format="so \\boxed{{answer}}")
    item = Example("", "56", {"question": "What is 99 take away 43?", "expression": "99 - 43"})
    assert env.demonstration(item, random.Random(0)) == [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "99 - 43"}}</tool_call>', "so \\boxed{56}"]
    for fields in ({}, {"expression": "99 + 43"}, {"expression": "99 -"}):  # no, a wrong, an unreadable expression
        assert env.demonstration(Example("", "56", fields), random.Random(0)) == ["so \\boxed{56}"]
    assert ToolEnv(Sums(), tools=["python"]).demonstration(item, random.Random(0)) == ["The answer is \\boxed{56}."]
    with pytest.raises(ValueError, match="answer_format must contain"):
        ToolEnv(Sums(), answer_format="\\boxed{N}")


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


def test_tools_demonstrations_render_as_episodes_whose_call_runs_to_the_answer():
    """The SFT warm start's rows of `environments/tools` (word problems, the calculator): each episode's first model
    turn is a call that parses and evaluates to the item's answer, the tool's output comes back masked, and the last
    model turn is the answer the task's verifier counts."""
    from rlvr.environments.tools import get_tools, parse_tool_calls, run_tool_call
    from rlvr.models import build_char_tokenizer
    from rlvr.rollout.episode import EpisodeLimits, demonstration_episodes

    tok = build_char_tokenizer()  # one token a character: the masks can be read against the text
    task = get_task("word_problems", difficulty="hard", answer_extraction="marker", tokenizer=tok)
    items = task.train_examples(6, seed=0)
    rows = demonstration_episodes(tok, lambda: ToolEnv(task, system="calc", instruction="boxed"), items,
                                  EpisodeLimits(max_turns=3, max_tokens=512), seed=0)
    assert len(rows) == len(items)
    for item, (_, ids, mask) in zip(items, rows):
        model = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
        env = tok.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=True)
        call, answer = model.split("</tool_call>")
        [parsed] = parse_tool_calls(call + "</tool_call>", get_tools(["calculator"]))
        assert parsed.arguments == {"expression": item.fields["expression"]}
        assert run_tool_call(parsed, get_tools(["calculator"])) == (item.answer, True)
        assert env == item.answer  # the tool's output, the environment's only tokens (the template adds none)
        assert answer == f"The answer is \\boxed{{{item.answer}}}." and task.is_correct(answer, item)
        assert mask == [1] * len(call + "</tool_call>") + [1] + [0] * len(item.answer) + [1] * (len(answer) + 1)
