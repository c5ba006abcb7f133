import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.data.decontaminate import decontaminate
from rlvr.data.text import words
from rlvr.jsonl import read_jsonl

from data_helpers import data_dir

WORDS = [f"w{i}" for i in range(30)]


def brute_force_contaminated(train: list[str], evals: list[str], n: int, min_words: int) -> set[int]:
    """The definition, pair by pair: a shared run of m = min(n, |T|, |E|) >= min_words words, or equal text."""
    out = set()
    for i, t in enumerate(train):
        tw = words(t)
        for e in evals:
            ew = words(e)
            m = min(n, len(tw), len(ew))
            if tw and tw == ew:
                out.add(i)
            elif m >= min_words:
                tg = {tw[k : k + m] for k in range(len(tw) - m + 1)}
                if any(ew[k : k + m] in tg for k in range(len(ew) - m + 1)):
                    out.add(i)
    return out


def test_by_hand_overlap_short_eval_and_exact_copy():
    evals = {"bench": ["the quick brown fox jumps over the lazy dog today", "tiny q"]}
    train = [
        "Prefix words. The QUICK brown fox, jumps over the lazy dog today! suffix",  # all of eval 0 (10 words)
        "the quick brown fox jumps over the lazy dog",  # 9 of eval 0's 10 words: m = 9, a leak
        "the quick brown fox sleeps",  # only 4 words in common, m = 5
        "Tiny Q",  # exact copy of a short eval item, below min_words
        "nothing in common here at all",
    ]
    res = decontaminate(train, evals, text=lambda s: s, n=13, min_words=4)
    assert res.kept_indices == [2, 4]
    first = res.removed[0]
    assert (first.index, first.reason) == (0, "eval_overlap")
    assert first.detail["eval_set"] == "bench" and first.detail["eval_index"] == 0
    assert first.detail["ngram"] == "the quick brown fox jumps over the lazy dog today"
    assert res.removed[1].detail["ngram"] == "the quick brown fox jumps over the lazy dog"
    assert res.removed[2].detail == {"eval_set": "bench", "eval_index": 1, "ngram": "tiny q", "n_hits": 1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=14), min_size=1, max_size=6),
       st.lists(st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=14), min_size=1, max_size=6),
       st.integers(2, 6), st.integers(1, 4))
def test_matches_brute_force_definition(train, evals, n, min_words):
    min_words = min(min_words, n)  # above n is refused (test_min_words_above_n_is_refused)
    train_t, eval_t = [" ".join(t) for t in train], [" ".join(e) for e in evals]
    res = decontaminate(train_t, {"e": eval_t}, text=lambda s: s, n=n, min_words=min_words)
    assert {r.index for r in res.removed} == brute_force_contaminated(train_t, eval_t, n, min_words)
    assert len(res.kept) + len(res.removed) == len(train_t)


def test_bad_input():
    with pytest.raises(ValueError, match="at least one eval set"):
        decontaminate(["a"], {})
    with pytest.raises(ValueError, match="n and min_words"):
        decontaminate(["a"], {"e": ["a"]}, text=lambda s: s, n=0)


GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"  # 12 words


def test_smaller_n_is_stricter_by_hand():
    # eval: 15 words holding all 12 of GREEK; train 0 is GREEK, train 1 shares only its first 5 words
    evals = {"e": ["xx yy " + GREEK + " zz"]}
    train = [GREEK, "alpha beta gamma delta epsilon one two three four five six seven eight nine"]
    at13 = decontaminate(train, evals, text=lambda s: s, n=13)  # m = min(13, 12, 15) = 12 >= 8; 14 words: m = 13
    assert at13.kept_indices == [1] and at13.removed[0].detail["ngram"] == GREEK
    assert at13.stats["min_words"] == 8
    at5 = decontaminate(train, evals, text=lambda s: s, n=5)  # min_words defaults to min(8, 5) = 5
    assert at5.kept_indices == [] and at5.stats["min_words"] == 5
    # train 0 has 12 - 5 + 1 = 8 five-grams, all in the eval item; train 1 has one: its first five words
    assert [r.detail["n_hits"] for r in at5.removed] == [8, 1]
    assert [r.detail["ngram"] for r in at5.removed] == ["alpha beta gamma delta epsilon"] * 2


def test_min_words_above_n_is_refused():
    with pytest.raises(ValueError, match=r"min_words \(6\) must be <= n \(5\)"):
        decontaminate([GREEK], {"e": [GREEK]}, text=lambda s: s, n=5, min_words=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=12), min_size=1, max_size=6),
       st.lists(st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=12), min_size=1, max_size=6),
       st.integers(1, 10), st.integers(1, 10))
def test_smaller_n_never_removes_less(train, evals, n, smaller):
    smaller = min(smaller, n)
    train_t, eval_t = [" ".join(t) for t in train], [" ".join(e) for e in evals]
    removed = {n_: {r.index for r in decontaminate(train_t, {"e": eval_t}, text=lambda s: s, n=n_).removed}
               for n_ in (n, smaller)}
    assert removed[n] <= removed[smaller]


def test_gsm8k_train_against_test_with_planted_copy(tmp_path):
    train = read_jsonl(data_dir() / "gsm8k_train.jsonl")
    test = read_jsonl(data_dir() / "gsm8k_test.jsonl")
    base = decontaminate(train, {"gsm8k_test": test}, text="question", n=13)
    # Every reported overlap is real: the 13-gram occurs in both questions.
    for r in base.removed:
        assert r.detail["ngram"] in " ".join(words(train[r.index]["question"]))
        assert r.detail["ngram"] in " ".join(words(test[r.detail["eval_index"]]["question"]))
    # Plant a reformatted copy of a test question (case, spacing, punctuation changed) at a random spot.
    victim = random.Random(0).randrange(len(test))
    planted = {"question": "  " + test[victim]["question"].upper().replace(".", " ;"), "answer": "x"}
    spot = len(train) // 2
    res = decontaminate(train[:spot] + [planted] + train[spot:], {"gsm8k_test": test}, text="question", n=13,
                        report_dir=tmp_path)
    hit = next(r for r in res.removed if r.index == spot)
    assert hit.detail["eval_index"] == victim
    assert len(res.removed) == len(base.removed) + 1
    print(f"GSM8K train items overlapping test at n=13: {len(base.removed)} of {len(train)}")
    lines = (tmp_path / "decontaminate.removed.jsonl").read_text().splitlines()
    assert len(lines) == len(res.removed) and json.loads(lines[0])["reason"] == "eval_overlap"
    assert "eval_overlap" in (tmp_path / "decontaminate.md").read_text()
