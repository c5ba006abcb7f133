import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.tasks import get_task
from rlvr.tasks.arithmetic import ArithmeticTask, digit_credit, parse_int


def test_prompt_and_answer():
    task = ArithmeticTask(digits=2, ops="+")
    ex = task._example(37, "+", 85)
    assert (ex.prompt, ex.answer) == ("37+85=", "122")
    assert task._example(3, "-", 12).answer == "-9"
    assert ArithmeticTask(ops="*")._example(12, "*", 11).answer == "132"


def test_parse_int():
    assert parse_int(" 122 ") == "122"
    assert parse_int("007") is None
    assert parse_int("0") == "0"
    assert parse_int("-0") is None
    assert parse_int("-9") == "-9"
    assert parse_int("12 2") is None
    assert parse_int("") is None


def test_exact_and_digit_rewards_by_hand():
    ex = ArithmeticTask()._example(37, "+", 85).as_dict()
    exact, digits = ArithmeticTask().reward_fn(), ArithmeticTask(reward="digits").reward_fn()
    assert exact("", "122", ex).score == 1.0
    assert exact("", "123", ex).score == 0.0
    assert digits("", "123", ex).score == pytest.approx(2 / 3)
    assert digits("", "22", ex).score == pytest.approx(2 / 3)  # right-aligned: "_22" vs "122"
    assert digits("", "x", ex).score == 0.0


@settings(max_examples=80, deadline=None)
@given(st.integers(-999, 9999), st.integers(-999, 9999))
def test_digit_credit_is_one_exactly_for_the_answer(a, b):
    credit = digit_credit(str(a), str(b))
    assert 0.0 <= credit <= 1.0
    assert (credit == 1.0) == (a == b)


def test_is_correct_and_split():
    task = ArithmeticTask(digits=2, ops="+-")
    ex = task.eval_examples(1, seed=0)[0]
    assert task.is_correct(f" {ex.answer}", ex)
    assert not task.is_correct(ex.answer + "0", ex)
    held_out = {e.prompt for e in task.eval_examples(300, seed=0)}
    assert len(held_out) == 300
    assert not held_out & {e.prompt for e in task.train_examples(3000, seed=0)}
    assert {e.fields["op"] for e in task.train_examples(200, seed=0)} == {"+", "-"}


def test_registered_and_bad_options_rejected():
    assert isinstance(get_task("arithmetic", digits=3), ArithmeticTask)
    with pytest.raises(ValueError, match="unknown ops"):
        ArithmeticTask(ops="/")
    with pytest.raises(ValueError, match="unknown reward"):
        ArithmeticTask(reward="close")
    with pytest.raises(ValueError, match="digits"):
        ArithmeticTask(digits=0)
