"""Countdown and reasoning-gym tasks."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.tasks import Task, TaskOptionError, get_task
from rlvr.tasks.countdown import make_problem
from rlvr.rewards.countdown import countdown_equal


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 6), st.integers(2, 200))
def test_countdown_problems_are_solvable(seed, n_numbers, max_number):
    numbers, target, solution = make_problem(random.Random(seed), n_numbers, max_number)
    assert len(numbers) == n_numbers and all(1 <= n <= max_number for n in numbers)
    assert 0 < target <= 1000 and countdown_equal(solution, numbers, target)


def test_countdown_task():
    task = get_task("countdown", n_numbers=3, max_number=20)
    assert isinstance(task, Task)
    train, held = task.train_examples(200, seed=0), task.eval_examples(30, seed=0)
    key = lambda e: (tuple(sorted(e.fields["numbers"])), e.fields["target"])  # noqa: E731
    assert not {key(e) for e in train} & {key(e) for e in held}
    ex = held[0]
    right = f"hmm</think> <answer>{ex.fields['solution']}</answer>"
    assert task.is_correct(right, ex) and task.reward_fn()(ex.prompt, right, ex.as_dict()) == 1.0
    assert not task.is_correct("</think> <answer>1 + 1</answer>", ex)
    assert task.answer_key(right, ex) == ex.answer
    with pytest.raises(ValueError):
        get_task("countdown", n_numbers=1)


def test_reasoning_gym_by_name_with_its_scorer():
    task = get_task("reasoning_gym", dataset="basic_arithmetic", template="plain")
    assert isinstance(task, Task)
    train, held = task.train_examples(5, seed=0), task.eval_examples(5, seed=0)
    assert [e.prompt for e in train] != [e.prompt for e in held]
    assert "<answer>" in train[0].prompt
    ex = train[0]
    reward = task.reward_fn()
    assert reward(ex.prompt, f"so <answer>{ex.answer}</answer>", ex.as_dict()).score == 1.0
    assert reward(ex.prompt, "so <answer>banana</answer>", ex.as_dict()).score == 0.0
    assert reward(ex.prompt, "no answer stated", ex.as_dict()).components == {"stated": 0.0}
    assert task.is_correct(f"The answer is {ex.answer}.", ex)
    with pytest.raises(ValueError, match="choose from"):
        get_task("reasoning_gym", dataset="not_a_dataset")


@pytest.mark.parametrize("config, named", [
    ({"bogus": 1}, "config.bogus"), ({"min_animals": "abc"}, "config.min_animals' expects an integer, got 'abc'"),
    ({"min_animals": 0}, "min_animals must be positive"), ({"seed": 3}, "config.seed' is set by rlvr")])
def test_reasoning_gym_config_is_checked_when_the_task_is_built(config, named):
    """Before, a bad `config` passed until `create_dataset`, an internal TypeError instead of an option error."""
    with pytest.raises(TaskOptionError, match=named):
        get_task("reasoning_gym", dataset="leg_counting", config=config)
    task = get_task("reasoning_gym", dataset="leg_counting", config={"min_animals": 4, "max_animals": 5})
    assert len(task.eval_examples(2, seed=0)) == 2


@pytest.mark.parametrize("dataset, config", [
    ("chain_sum", {"allow_negation": True}),                 # bool
    ("leg_counting", {"min_animals": 4}),                    # int
    ("number_filtering", {"min_value": -5}),                 # an int where a float is hinted
    ("manipulate_matrix", {"w_rotate": 0.5}),                # `w_rotate: float = 1`: the hint, not the default
    ("rearc", {"diff_ub": 0.3}),                             # `diff_ub: int = 0.2`: a hint its default breaks
    ("caesar_cipher", {"delimiter": ";"}),                   # str
    ("basic_arithmetic", {"format_style": "natural"}),       # Literal: checked as its default's str
    ("figlet_font", {"static_word": None}),                  # Optional[str]
    ("figlet_font", {"static_word": "HI"}),
    ("codeio", {"difficulty": 2})])                          # Optional[int]
def test_reasoning_gym_config_takes_values_of_the_hinted_kind(dataset, config):
    get_task("reasoning_gym", dataset=dataset, config=config, template="plain")


@pytest.mark.parametrize("dataset, config, named", [
    ("chain_sum", {"allow_negation": 1}, "expects true or false, got 1"),
    ("leg_counting", {"min_animals": True}, "expects an integer, got True"),      # a bool is no int here
    ("leg_counting", {"min_animals": 2.5}, "expects an integer, got 2.5"),
    ("number_filtering", {"min_value": "x"}, "expects a number, got 'x'"),
    ("caesar_cipher", {"delimiter": 3}, "expects a string, got 3"),
    ("basic_arithmetic", {"format_style": 3}, "expects a string, got 3"),
    ("figlet_font", {"static_word": 3}, "expects a string or null, got 3"),
    ("codeio", {"difficulty": "hard"}, "expects an integer or null, got 'hard'")])
def test_reasoning_gym_config_refuses_values_of_another_kind(dataset, config, named):
    with pytest.raises(TaskOptionError, match=named):
        get_task("reasoning_gym", dataset=dataset, config=config, template="plain")
