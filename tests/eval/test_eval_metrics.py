"""pass@k (Chen et al. 2021 closed form), maj@k, and the summary on a fake engine."""

import argparse
import json
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.eval import default_ks, evaluate, maj_at_k, majority_correct, pass_at_k
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.tasks import get_task


def test_pass_at_k_by_hand():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 0, 3) == 0.0 and pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k: every draw of 2 holds a correct one
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_closed_form(nck):
    n, c, k = nck
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12  # more tries never hurt


def test_default_ks_by_hand():
    assert default_ks(1) == [1] and default_ks(4) == [1, 2, 4] and default_ks(6) == [1, 2, 4, 6]
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(9) == [1, 2, 4, 8, 9]
    with pytest.raises(ValueError, match="n >= 1"):
        default_ks(0)


@given(st.integers(1, 10_000))
def test_default_ks_are_one_the_powers_of_two_below_n_and_n(n):
    ks = default_ks(n)
    assert ks[0] == 1 and ks[-1] == n and ks == sorted(set(ks))
    assert all(k == n or (k & (k - 1)) == 0 for k in ks) and len(ks) == n.bit_length() + (n & (n - 1) != 0)


def test_majority_by_hand():
    assert majority_correct(["a", "b", "a", None], [True, False, True, False])
    assert not majority_correct(["b", "a"], [False, True])  # tie: the first stated answer wins
    assert not majority_correct([None, None], [True, True])  # nothing stated: no vote
    assert maj_at_k(["a", "b", "b", "b"], [True, False, False, False], 2) == 0.5  # blocks [a,b], [b,b]
    with pytest.raises(ValueError):
        maj_at_k(["a"], [True], 2)


@given(st.lists(st.tuples(st.sampled_from(["1", "2", "3", None]), st.booleans()), min_size=1, max_size=16))
def test_maj_at_1_is_accuracy_of_stated_answers(samples):
    keys = [k for k, _ in samples]
    correct = [ok and k is not None for k, ok in samples]
    assert maj_at_k(keys, correct, 1) == pytest.approx(sum(correct) / len(correct))


class FakeEngine:
    """Replays scripted completions: a RolloutEngine without a model."""

    def __init__(self, script):
        self.script = script  # prompt -> list of (text, n_tokens, finish_reason)

    def generate(self, prompts, n, sampling):
        out = []
        for p in prompts:
            for text, length, reason in self.script[p][:n]:
                out.append(Completion(p, [1], [0] * length, [0.0] * length, text, reason))
        return out

    def load_weights(self, named_tensors):
        pass


def test_evaluate_on_fake_engine(tmp_path):
    task = get_task("gsm8k")
    ex = task.eval_examples(2, seed=0)
    right = [f"ok</think> <answer>{e.answer}</answer>" for e in ex]
    engine = FakeEngine({
        ex[0].prompt: [(right[0], 10, "stop"), ("ok</think> <answer>-1</answer>", 20, "stop"),
                       (right[0], 30, "stop"), ("rambling", 40, "length")],
        ex[1].prompt: [("no format " + ex[1].answer, 10, "stop"), ("ok</think> <answer>-1</answer>", 10, "stop"),
                       ("ok</think> <answer>-1</answer>", 10, "stop"), (right[1], 10, "stop")],
    })
    out = tmp_path / "graded.jsonl"
    m = evaluate(engine, task, ex, 4, SamplingParams(max_new_tokens=40), (1, 2, 4), out=out)
    # prompt 0: 2 of 4 correct; prompt 1: the "no format" sample states no answer -> 1 of 4
    assert m["accuracy"] == pytest.approx(3 / 8)
    assert m["pass@1"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert m["pass@2"] == pytest.approx(((1 - comb(2, 2) / comb(4, 2)) + (1 - comb(3, 2) / comb(4, 2))) / 2)
    assert m["pass@4"] == 1.0
    assert m["maj@4"] == pytest.approx((1 + 0) / 2)  # prompt 1's majority is the wrong "-1"
    assert m["mean_length"] == pytest.approx((10 + 20 + 30 + 40 + 40) / 8)
    assert m["truncation_rate"] == pytest.approx(1 / 8)
    assert m["format_error_rate"] == pytest.approx(2 / 8)
    assert m["formatted_wrong_rate"] == pytest.approx(3 / 8)  # the three well-formatted "-1"
    assert m["reward"] == pytest.approx(3 / 8)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and rows[0]["mode"] == "sampled" and rows[0]["correct"] is True
    with pytest.raises(ValueError, match="k_list"):
        evaluate(engine, task, ex, 2, SamplingParams(), (4,))


def test_eval_parser_options():
    from rlvr.commands.eval import add_parser

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_parser(sub)
    args = parser.parse_args(["eval", "--model", "m", "--task", "gsm8k", "--k", "1,4", "--task-option", "template=plain"])
    assert args.k == [1, 4] and args.task_option == ["template=plain"] and args.func.__name__ == "run"
    assert parser.parse_args(["eval", "--model", "m", "--task", "t", "--k", "4,1,1"]).k == [1, 4]
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--model", "m", "--task", "t", "--k", "0"])
