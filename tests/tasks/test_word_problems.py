"""word_problems: generated arithmetic word problems in families of phrasings, with held-out numbers and held-out
families; prompting through the model's chat template; graded by the math verifier, the answer counted only in
the marker the prompt asked for."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.models import build_char_tokenizer
from rlvr.tasks import TooFewExamples, get_task
from rlvr.tasks.templates import R1_ZERO, render_prompt, resolve_template
from rlvr.tasks.word_problems import DIFFICULTIES, FAMILIES, HELD_OUT_GROUP, held_out_pair

TOK = build_char_tokenizer()  # has a chat template: '<bos>' + the user turn


def _parse(example) -> tuple[str, int, int]:
    """(op, a, b) of a question, read back through the phrasing it was made from."""
    family = FAMILIES[example.fields["family"]]
    for op, templates in family.items():
        for template in templates:
            pattern = re.escape(template).replace(r"\{a\}", r"(?P<a>\d+)").replace(r"\{b\}", r"(?P<b>\d+)")
            pattern = pattern.replace(r"\{name\}", r"\w+").replace(r"\{items\}", r"\w+")
            found = re.fullmatch(pattern, example.fields["question"])
            if found:
                return op, int(found["a"]), int(found["b"])
    raise AssertionError(f"no phrasing of {example.fields['family']} makes {example.fields['question']!r}")


@pytest.mark.parametrize("difficulty", list(DIFFICULTIES))
def test_every_answer_is_the_questions_sum_or_difference_in_range(difficulty):
    ops, lo, hi = DIFFICULTIES[difficulty]
    task = get_task("word_problems", difficulty=difficulty, tokenizer=TOK)
    for example in task.train_examples(200, seed=1) + task.eval_examples(50, seed=0):
        op, a, b = _parse(example)
        assert op in ops and lo <= a <= hi and lo <= b <= hi
        assert example.answer == str(a + b if op == "+" else a - b) and int(example.answer) >= 0
        assert example.fields["expression"] == f"{a} {op} {b}"  # the question's own operands, read back


def test_hand_checked_questions():
    task = get_task("word_problems", families=["direct"], tokenizer=TOK)
    example = task.train_examples(1, seed=0)[0]
    _, a, b = _parse(example)
    assert example.fields["question"] in {f"What is {a} + {b}?", f"Compute {a} + {b}.", f"Calculate {a} plus {b}."}
    assert example.answer == str(a + b) and example.prompt == f"<bos>{example.fields['question']}\n\n" + \
        "Please reason step by step, and put your final answer within \\boxed{}."
    assert held_out_pair("+", 3, 4) == held_out_pair("+", 3, 4)  # a fixed partition: no seed in it
    assert example.fields["expression"] == f"{a} + {b}"


def test_expression_by_hand():
    """The `expression` field of questions read by eye: the calculator call that answers the question."""
    task = get_task("word_problems", difficulty="hard", tokenizer=TOK)
    got = [(e.fields["question"], e.fields["expression"], e.answer) for e in task.train_examples(3, seed=3)]
    assert got == [("What is 99 take away 43?", "99 - 43", "56"),
                   ("A rope is 96 meters long. Tom cuts off 75 meters. How many meters of rope are left?", "96 - 75",
                    "21"),
                   ("Mia has 89 shells. Mia gives 33 shells to a friend. How many shells does Mia have left?",
                    "89 - 33", "56")]
    from rlvr.environments.tools import calculator
    assert all(calculator(e.fields["expression"]) == e.answer for e in task.eval_examples(30, seed=0))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), held=st.sampled_from(list(FAMILIES)))
def test_training_never_sees_held_out_numbers_or_families(seed, held):
    task = get_task("word_problems", difficulty="medium", held_out_templates=[held], tokenizer=TOK)
    for example in task.train_examples(40, seed):
        assert example.fields["family"] != held and not held_out_pair(*_parse(example))
        assert "eval_group" not in example.fields
    held_out = task.eval_examples(10, seed)
    seen, unseen = held_out[:10], held_out[10:]
    assert len(unseen) == 10 and all(e.fields["family"] == held and e.fields["eval_group"] == HELD_OUT_GROUP
                                     for e in unseen)
    assert all(e.fields["family"] != held and "eval_group" not in e.fields for e in seen)
    for example in held_out:
        assert held_out_pair(*_parse(example))
    assert len({e.prompt for e in held_out}) == 20


def test_about_one_pair_in_five_is_held_out():
    pairs = [("+", a, b) for a in range(1, 100) for b in range(1, 100)]
    share = sum(held_out_pair(*p) for p in pairs) / len(pairs)
    assert 0.18 < share < 0.22


def test_a_held_out_set_larger_than_the_space_is_refused():
    task = get_task("word_problems", families=["direct"], tokenizer=TOK)  # 3 phrasings x ~80 held-out sums
    with pytest.raises(TooFewExamples, match="could not draw 1000 distinct held-out questions"):
        task.eval_examples(1000, seed=0)


@pytest.mark.parametrize("options, message", [
    ({"difficulty": "insane"}, "difficulty must be one of ['easy', 'medium', 'hard']"),
    ({"held_out_templates": ["poems"]}, "held_out_templates ['poems'] are not families"),
    ({"families": ["direct"], "held_out_templates": ["direct"]}, "leave no family to train on"),
    ({"answer_style": "box"}, "answer_style must be one of ['boxed', 'tags']"),
])
def test_bad_options_are_one_line(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_task("word_problems", tokenizer=TOK, **options)


def test_the_template_follows_the_model_and_takes_a_system_prompt():
    assert resolve_template("auto", TOK) == "chat" and resolve_template("auto", None) == "r1_zero"
    assert get_task("word_problems").template == "r1_zero"  # no tokenizer: a base model's prompt
    prompt = get_task("word_problems").train_examples(1, 0)[0].prompt
    assert prompt.startswith(R1_ZERO.split("{question}")[0])
    task = get_task("word_problems", tokenizer=TOK, system_prompt="Be brief.", answer_style="tags")
    prompt = task.train_examples(1, 0)[0].prompt
    assert prompt.startswith("<bos>Be brief.\n") and prompt.endswith("inside <answer> </answer> tags.")
    assert render_prompt("plain", "2+2?", system="Be brief.") == \
        "Be brief.\nQuestion: 2+2?\nPlease reason step by step, and put your final answer within \\boxed{}.\nAnswer:"


def test_answer_extraction_says_which_answer_counts_and_format_is_told_apart_from_value():
    example = get_task("word_problems", tokenizer=TOK).eval_examples(1, seed=0)[0]
    truth, wrong = example.answer, str(int(example.answer) + 1)
    boxed, said, equation, tags = f"so \\boxed{{{truth}}}", f"The answer is {truth}.", f"2 + 3 = {truth}", \
        f"<answer>{truth}</answer>"
    cases = {  # extraction -> {completion: (score, correct as graded)}; format is always "boxed as asked"
        "marker": {boxed: 1.0, said: 0.0, equation: 0.0, tags: 0.0, f"\\boxed{{{wrong}}}": 0.0},
        "stated": {boxed: 1.0, said: 1.0, equation: 0.0, tags: 1.0, f"\\boxed{{{wrong}}} or {truth}": 0.0},
        "last_number": {boxed: 1.0, said: 1.0, equation: 1.0, f"{truth} apples and 3 more": 0.0,
                        f"\\boxed{{{wrong}}} or {truth}": 0.0},  # a stated answer wins over the last number
    }
    for extraction, texts in cases.items():
        task = get_task("word_problems", tokenizer=TOK, answer_extraction=extraction)
        reward = task.reward_fn()
        for text, score in texts.items():
            assert reward("", text, example.as_dict()).score == score, (extraction, text)
            assert task.is_correct(text, example) == bool(score), (extraction, text)
            assert task.format_ok(text, example) == ("boxed" in text), (extraction, text)
    assert get_task("word_problems", tokenizer=TOK).answer_extraction == "last_number"
    gated = get_task("word_problems", tokenizer=TOK, answer_extraction="marker").reward_fn()("", said, example.as_dict())
    assert gated.components == {"format": 0.0, "correct": 1.0}  # right, but not where it was asked for
    tags_task = get_task("word_problems", tokenizer=TOK, answer_style="tags", answer_extraction="marker")
    assert tags_task.is_correct(tags, example) and not tags_task.is_correct(boxed, example)
    with pytest.raises(ValueError, match=re.escape("answer_extraction must be one of ['marker', 'stated', 'last_")):
        get_task("word_problems", tokenizer=TOK, answer_extraction="first_number")


def test_reward_and_accuracy_read_the_same_answer_when_a_completion_states_two():
    """An `<answer>` block wins over a `\\boxed{}` before it (final_answer's rule), and under `marker` the boxed
    answer counts, for the reward and the accuracy alike (they once read different answers in both cases)."""
    example = get_task("word_problems", tokenizer=TOK).eval_examples(1, seed=0)[0]
    truth, wrong = example.answer, str(int(example.answer) + 1)
    for text, right in ((f"\\boxed{{{wrong}}}. <answer>{truth}</answer>", True),
                        (f"\\boxed{{{truth}}}. <answer>{wrong}</answer>", False)):
        for extraction in ("stated", "last_number"):
            task = get_task("word_problems", tokenizer=TOK, answer_extraction=extraction)
            assert task.reward_fn()(example.prompt, text, example.as_dict()).score == float(right), (extraction, text)
            assert task.is_correct(text, example) == right, (extraction, text)
        marker = get_task("word_problems", tokenizer=TOK, answer_extraction="marker")
        assert marker.reward_fn()(example.prompt, text, example.as_dict()).score == float(not right), text
        assert marker.is_correct(text, example) == (not right), text


PIECES = st.sampled_from(["\\boxed{{{t}}}", "\\boxed{{{w}}}", "<answer>{t}</answer>", "<answer>{w}</answer>",
                          "The answer is {t}.", "The answer is {w}.", "#### {w}", "{t} + 1 = {w}", "{w}", "{t}",
                          "so", " ", "<think>", "</think>"])


@settings(max_examples=60, deadline=None)
@given(st.lists(PIECES, max_size=5), st.sampled_from(["marker", "stated", "last_number"]))
def test_the_reward_pays_exactly_the_completions_the_accuracy_counts(pieces, extraction):
    example = get_task("word_problems", tokenizer=TOK).eval_examples(1, seed=0)[0]
    text = " ".join(pieces).format(t=example.answer, w=int(example.answer) + 1)
    task = get_task("word_problems", tokenizer=TOK, answer_extraction=extraction)
    paid = task.reward_fn()(example.prompt, text, example.as_dict()).score == 1.0
    # the accuracy counts the answer the reward reads; a marker gate pays it only in the marker
    assert paid == (task.is_correct(text, example) and (extraction != "marker" or task.format_ok(text, example)))
