"""Countdown verifier: syntax-tree evaluation, each number at most once, exact arithmetic."""

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from rlvr.rewards.countdown import CountdownReward, countdown_equal, evaluate_countdown
from rlvr.tasks.base import Example
from rlvr.tasks.countdown import CountdownTask


def test_by_hand():
    assert evaluate_countdown("(25 - 5) * 4 + 3", [25, 5, 4, 3, 7]) == 83
    assert evaluate_countdown("8 / 3", [8, 3]) == Fraction(8, 3)
    assert countdown_equal("(6 / (1 - 3/4))", [6, 1, 3, 4], 24)
    assert countdown_equal("3 * 4 + 1 = 13", [3, 4, 1], 13)  # trailing "= target" allowed


def test_rejections():
    nums = [3, 4, 5]
    assert evaluate_countdown("3 * 3", nums) is None  # 3 used twice
    assert evaluate_countdown("3 ** 4", nums) is None  # power is not allowed
    assert evaluate_countdown("-3 + 4", nums) is None  # no unary minus
    assert evaluate_countdown("3.0 + 4", nums) is None  # integers only
    assert evaluate_countdown("__import__('os').system('x')", nums) is None
    assert evaluate_countdown("5 / (4 - 4)", [5, 4, 4]) is None  # division by zero
    assert evaluate_countdown("3 +", nums) is None
    assert evaluate_countdown("(" * 150 + "3" + ")" * 150, nums) is None  # too long
    assert not countdown_equal(None, nums, 7)


def test_reward_reads_stated_answer():
    reward = CountdownReward(format_score=0.1)
    example = {"numbers": [3, 4, 5], "target": 17}
    assert reward("p", "<answer>3 * 4 + 5</answer>", example) == 1.0
    assert reward("p", "<answer>3 + 4 + 5</answer>", example) == 0.1
    assert reward("p", "no idea", example) == 0.0


@given(st.lists(st.integers(1, 100), min_size=2, max_size=6), st.data())
def test_sum_and_product_of_any_subset(numbers, data):
    subset = data.draw(st.lists(st.sampled_from(range(len(numbers))), min_size=1, unique=True))
    chosen = [numbers[i] for i in subset]
    assert evaluate_countdown(" + ".join(map(str, chosen)), numbers) == sum(chosen)
    product = 1
    for n in chosen:
        product *= n
    assert evaluate_countdown(" * ".join(map(str, chosen)), numbers) == product
    assert evaluate_countdown(" + ".join(map(str, chosen + [max(numbers) + 1])), numbers) is None


def test_a_boxed_expression_in_the_reasoning_does_not_override_the_answer_block():
    """Before, countdown read the last `\\boxed{}` anywhere, so a box inside `<think>` beat the final `<answer>`."""
    fields = {"numbers": [3, 4, 5], "target": 17}
    ex = Example("Q <think>", "17", fields)
    task, reward = CountdownTask(template="plain"), CountdownReward()
    boxed_wrong = r" try \boxed{3 + 4 + 5}</think> <answer>3 * 4 + 5</answer>"
    boxed_right = r" try \boxed{3 * 4 + 5}</think> <answer>3 + 4 + 5</answer>"
    assert reward(ex.prompt, boxed_wrong, fields) == 1.0 and task.is_correct(boxed_wrong, ex)
    assert reward(ex.prompt, boxed_right, fields) == 0.0 and not task.is_correct(boxed_right, ex)
    assert task.answer_key(boxed_wrong, ex) == "17" and task.answer_key(boxed_right, ex) == "12"
    assert reward("p", r"so \boxed{3 * 4 + 5}", fields) == 1.0  # no <answer> block: the box is the answer
