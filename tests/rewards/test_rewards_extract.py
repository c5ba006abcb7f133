"""Answer extraction: preference order, nesting, and what counts as a stated answer."""

from hypothesis import given
from hypothesis import strategies as st

from rlvr.rewards.extract import extract_answer, extract_choice, extract_last_number, last_boxed


def test_boxed_nested_braces_last_wins():
    text = r"first \boxed{1} then \boxed{\frac{a^{2}}{\sqrt{b}}} done"
    assert extract_answer(text) == r"\frac{a^{2}}{\sqrt{b}}"


def test_preference_order_boxed_answer_hashes_says():
    boxed, tag, hashes, says = r"\boxed{1}", "<answer>2</answer>", "#### 3", "The answer is 4."
    assert extract_answer(" ".join([says, hashes, tag, boxed])) == "1"
    assert extract_answer(" ".join([says, hashes, tag])) == "2"
    assert extract_answer(" ".join([says, hashes])) == "3"
    assert extract_answer(says) == "4"


def test_unbalanced_box_falls_back_and_none_when_nothing_stated():
    assert last_boxed(r"\boxed{\frac{1}{2}") is None
    assert extract_answer(r"The answer is 5. \boxed{\frac{1}{2}") == "5"
    assert extract_answer("I do not know") is None
    assert extract_answer(r"\fbox{7}") == "7"
    assert extract_answer(r"so \boxed 9$") == "9"


def test_answer_is_keeps_decimals_and_strips_dollars():
    assert extract_answer("So the answer is 3.75.") == "3.75"
    assert extract_answer(r"The final answer is $\frac{1}{2}$.") == r"\frac{1}{2}"


def test_gsm8k_reference_solution():
    assert extract_answer("He sprints 3*3=<<3*3=9>>9 times\n#### 540") == "540"


def test_last_number():
    assert extract_last_number("costs $1,234.50 then -3 then 2/3") == "2/3"
    assert extract_last_number("1,000,000 people") == "1000000"
    assert extract_last_number("x = -0.25") == "-0.25"
    assert extract_last_number("none here") is None


def test_choice_only_when_stated():
    assert extract_choice("The answer is (C).") == "C"
    assert extract_choice("Answer: B) 42") == "B"
    assert extract_choice(r"\boxed{\text{(D)}}") == "D"
    assert extract_choice("<answer>A</answer>") == "A"
    assert extract_choice("The correct option is B") == "B"
    assert extract_choice("The answer is A prime number") is None  # 'A' is an article here
    assert extract_choice("I think B is wrong, maybe C") is None
    assert extract_choice("The answer is E.") is None  # only 4 options
    assert extract_choice("The answer is E.", n_options=5) == "E"


@given(st.integers(-10**9, 10**9))
def test_boxed_integer_roundtrip(n):
    assert extract_answer(f"reasoning... \\boxed{{{n}}}") == str(n)
    assert extract_last_number(f"value {n:,}") == str(n)


@given(st.text(alphabet=st.characters(blacklist_characters="{}\\", blacklist_categories=("Cs",)), max_size=40),
       st.text(alphabet="abc .#:0123456789", max_size=30))
def test_boxed_content_is_a_substring_and_wins_over_any_prefix(s, prefix):
    boxed = "\\boxed{" + s + "}"
    got = extract_answer(boxed)
    assert got is None or got in s
    assert extract_answer(prefix + " The answer is 9. " + boxed) == got


def test_boxed_with_spaces_before_the_brace_is_still_a_braced_box():
    assert last_boxed(r"so \boxed {5}") == "5" and last_boxed(r"\boxed  {\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed 5 apples") == "5"  # unbraced: one token
