import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.tasks import get_task
from rlvr.tasks.sorting import SortTask, inclusion_reward, parse_digits, positional_reward, sparse_reward

digit_lists = st.lists(st.integers(0, 9), min_size=2, max_size=6)


def score(design: str, completion: str, digits: list[int]) -> float:
    return SortTask(length=len(digits), reward=design).reward_fn()("", completion, {"digits": digits}).score


def test_prompt_and_answer_format():
    ex = SortTask(length=4).train_examples(1, seed=0)[0]
    digits = ex.fields["digits"]
    assert ex.prompt == "sort " + " ".join(map(str, digits)) + "="
    assert ex.answer == " ".join(map(str, sorted(digits)))


def test_parse_digits():
    assert parse_digits(" 1 3 4 9") == [1, 3, 4, 9]
    assert parse_digits("1 3 49") is None
    assert parse_digits("1 x") is None
    assert parse_digits("") == []


def test_sparse_reward_by_hand():
    assert score("sparse", "1 3 4 9", [3, 9, 1, 4]) == 1.0
    assert score("sparse", "1 3 9 4", [3, 9, 1, 4]) == 0.0
    assert score("sparse", "1 3 4", [3, 9, 1, 4]) == 0.0


def test_positional_reward_by_hand():
    # target 1 3 4 9: positions 0 and 1 right of 4
    assert score("positional", "1 3 9 4", [3, 9, 1, 4]) == 0.5
    # one extra digit: 4 right out of max(5, 4) = 5 positions
    assert score("positional", "1 3 4 9 9", [3, 9, 1, 4]) == 0.8
    assert score("positional", "a b", [3, 9, 1, 4]) == 0.0


def test_inclusion_reward_by_hand():
    # all 4 distinct digits present (0.5), 2 of 3 adjacent pairs ordered (0.5 * 2/3)
    out = inclusion_reward([1, 3, 9, 4], [3, 9, 1, 4])
    assert out.score == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert out.components == {"inclusion": 1.0, "ordered_pairs": pytest.approx(2 / 3)}
    assert inclusion_reward(None, [1, 2]).score == 0.0


def test_inclusion_reward_can_be_gamed_and_exact_match_shows_it():
    task = SortTask(length=3, reward="inclusion")
    example = task._example([3, 3, 1])
    # Dropping the duplicate earns full reward but is wrong: the gap the exact-match metric exposes.
    assert task.reward_fn()("", "1 3", example.as_dict()).score == 1.0
    assert not task.is_correct("1 3", example)
    assert task.is_correct(" 1 3 3 ", example)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.integers(1, 9), st.integers(0, 2**31))
def test_inclusion_gives_every_digit_in_order_full_marks_on_any_prompt(length, max_digit, seed):
    """The blind spot the docstring names: "0 1 ... max_digit" covers every prompt digit and is in order, so
    `inclusion` scores it 1 whatever the prompt; `positional` counts the extra digits, exact match refuses it."""
    task = SortTask(length=length, max_digit=max_digit, reward="inclusion")
    every = " ".join(map(str, range(max_digit + 1)))
    for example in task.train_examples(5, seed):
        assert task.reward_fn()("", every, example.as_dict()).score == 1.0
        assert not task.is_correct(every, example) or sorted(example.fields["digits"]) == list(range(max_digit + 1))
        assert score("positional", every, example.fields["digits"]) < 1.0 or task.is_correct(every, example)


@settings(max_examples=60, deadline=None)
@given(digit_lists)
def test_sorted_answer_is_optimal_for_every_design(digits):
    answer = " ".join(map(str, sorted(digits)))
    for design in ("sparse", "positional", "inclusion"):
        assert score(design, answer, digits) == 1.0


@settings(max_examples=60, deadline=None)
@given(digit_lists, st.lists(st.integers(0, 9), max_size=7))
def test_rewards_lie_in_unit_interval_and_positional_one_only_when_exact(digits, answer):
    parsed = answer
    for fn in (sparse_reward, positional_reward, inclusion_reward):
        assert 0.0 <= fn(parsed, digits).score <= 1.0
    assert (positional_reward(parsed, digits).score == 1.0) == (parsed == sorted(digits))


def test_held_out_split_is_disjoint_distinct_and_seeded():
    task = SortTask(length=4)
    train = {e.prompt for e in task.train_examples(2000, seed=1)}
    held_out = [e.prompt for e in task.eval_examples(200, seed=0)]
    assert len(set(held_out)) == 200
    assert not train & set(held_out)
    assert held_out == [e.prompt for e in task.eval_examples(200, seed=0)]
    assert held_out != [e.prompt for e in task.eval_examples(200, seed=1)]


def test_registered_and_bad_options_rejected():
    assert isinstance(get_task("sort", length=5), SortTask)
    with pytest.raises(ValueError, match="unknown reward"):
        SortTask(reward="dense")
    with pytest.raises(ValueError, match="length"):
        SortTask(length=1)
    with pytest.raises(ValueError, match="could not draw"):
        SortTask(length=2, max_digit=1).eval_examples(50, seed=0)
