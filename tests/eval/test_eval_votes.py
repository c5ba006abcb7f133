"""maj@k votes by equivalence (Minerva's maj@k): `vote_keys` groups one prompt's keys, the task says which are equal."""

import copy
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.eval import answer_votes, evaluate, maj_at_k, vote_keys
from rlvr.rewards.math_grader import plain_number
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.tasks import Example, get_task
from rlvr.tasks.subset import write_examples

# Forms of a few values; the grader finds equal exactly those of one value (checked by hand), so it is an equivalence.
FORMS = ["\\frac{1}{2}", "0.5", "1/2", "\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "3", "3.0",
         "x+1", "1 + x", "2\\sqrt{2}", "\\sqrt{8}", "4", None]
EX = Example(prompt="Q <think>", answer="\\frac{1}{2}")


@pytest.fixture(scope="module")
def task():
    return get_task("math500")


def said(form: str | None) -> str:
    return "no answer" if form is None else f" ok</think> <answer>{form}</answer>"


def groups(votes: list, items: list) -> set[frozenset]:
    """The partition the votes make of `items` (None: no vote, in no group)."""
    by_vote: dict = {}
    for vote, item in zip(votes, items):
        if vote is not None:
            by_vote.setdefault(vote, set()).add(item)
    return {frozenset(g) for g in by_vote.values()}


def test_vote_keys_by_hand():
    calls = []

    def same(pairs):
        calls.append(pairs)
        return [a.lower() == b.lower() for a, b in pairs]

    assert vote_keys(["a", "A", None, "b", "A"], ["a", "A", "x", "b", "A"], same) == ["a", "a", None, "b", "a"]
    assert calls == [[("A", "a")], [("b", "a")]]  # a key seen before is not compared again
    assert vote_keys(["a", "A"], ["a", "A"]) == ["a", "A"]  # without `same`: the keys


def test_equal_forms_of_one_half_are_one_winning_vote(task):
    texts = [said(f) for f in ["\\frac{1}{2}", "0.5", "1/2", "3"]]
    votes = answer_votes(task, texts, EX)
    assert votes == ["1/2", "1/2", "1/2", "3"]  # one group of 3 against 1
    assert maj_at_k(votes, task.correct_batch(texts, [EX] * 4), 4) == 1.0
    latex = [said(f) for f in ["3", "\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", "3.0", "\\frac{\\sqrt{2}}{2}"]]
    assert answer_votes(task, latex, EX) == ["3", "\\sqrt{2}/2", "\\sqrt{2}/2", "3", "\\sqrt{2}/2"]


def test_tasks_without_same_answers_vote_by_key():
    task = get_task("countdown")
    ex = task.eval_examples(1, seed=0)[0]
    a, b = ex.fields["numbers"][:2]
    texts = [f"</think> <answer>{a}+{b}</answer>", f"</think> <answer>{b}+{a}</answer>", "no answer"]
    keys = [task.answer_key(t, ex) for t in texts]
    assert keys == [str(a + b), str(a + b), None] and answer_votes(task, texts, ex) == keys


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(FORMS), min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_grouping_keeps_numbers_apart_and_ignores_order(task, forms, rng):
    texts = [said(f) for f in forms]
    votes = answer_votes(task, texts, EX)
    for f, g, u, v in [(f, g, u, v) for f, u in zip(forms, votes) for g, v in zip(forms, votes)]:
        a, b = (None if x is None else plain_number(x) for x in (f, g))
        if a is not None and b is not None and a != b:
            assert u != v  # two different numbers never merge
    order = list(range(len(forms)))
    rng.shuffle(order)
    shuffled = answer_votes(task, [texts[i] for i in order], EX)
    assert groups(shuffled, order) == groups(votes, list(range(len(forms))))  # the same groups, whatever the order
    assert sorted(Counter(v for v in shuffled if v is not None).values()) == sorted(
        Counter(v for v in votes if v is not None).values())
    first = {}
    for vote, text in zip(votes, texts):
        first.setdefault(vote, task.answer_key(text, EX))
    assert all(vote == key for vote, key in first.items())  # a group is named by its first answer


class ScriptEngine:
    def __init__(self, script):
        self.script = script

    def generate(self, prompts, n, sampling):
        return [Completion(p, [1], [0, 0], [0.0, 0.0], text, "stop") for p in prompts for text in self.script[p][:n]]

    def load_weights(self, named_tensors):
        pass


def test_the_task_holds_no_state_across_evaluations(task):
    examples = [Example(prompt="P1 <think>", answer="\\frac{\\sqrt{2}}{2}"), Example(prompt="P2 <think>", answer="7")]
    engine = ScriptEngine({
        "P1 <think>": [said(f) for f in ["7", "\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"]],
        "P2 <think>": [said(f) for f in ["\\frac{1}{\\sqrt{2}}", "7", "\\sqrt{2}/2", "7.0"]],
    })
    before = copy.deepcopy(vars(task))
    sampling = SamplingParams(max_new_tokens=2)
    first = evaluate(engine, task, examples, 4, sampling, (1, 2, 4))
    assert first["maj@4"] == pytest.approx((1 + 0) / 2)  # P1: 3 forms of the truth beat "7"; P2: a 2-2 tie, the
    # first answer seen (wrong) wins
    assert vars(task) == before
    assert evaluate(engine, task, examples, 4, sampling, (1, 2, 4)) == first
    assert evaluate(engine, task, examples[::-1], 4, sampling, (1, 2, 4)) == first


def test_a_subset_of_a_math_task_votes_and_grades_as_the_task(task, tmp_path):
    """Before, `subset` (the difficulty filter's kept prompts) forwarded only is_correct: maj@k voted on the raw text
    (three forms of 1/2 were three votes) and every completion was graded one at a time."""
    sub = get_task("subset", path=str(write_examples([EX], tmp_path / "kept.jsonl")), task="math500")
    texts = [said(f) for f in ["\\frac{1}{2}", "0.5", "1/2", "3"]]
    assert answer_votes(sub, texts, EX) == answer_votes(task, texts, EX) == ["1/2", "1/2", "1/2", "3"]
    assert sub.correct_batch(texts, [EX] * 4) == [True, True, True, False]
    assert not hasattr(sub, "no_such_method") and copy.deepcopy(sub).train_examples(1, 0) == [EX]
