import pytest
from hypothesis import given, settings, strategies as st

from rlvr.data.text import get_text, ngrams, normalize_text, words
from rlvr.jsonl import read_jsonl, write_jsonl
from rlvr.tasks.base import Example


def test_normalize_by_hand():
    assert normalize_text("  What's 2+2?\n\tANSWER:  4 ") == "what s 2 2 answer 4"
    assert normalize_text("Ｈｅｌｌｏ,world") == "hello world"  # NFKC folds full-width letters
    assert words("A  b_c") == ("a", "b", "c")


@settings(deadline=None)
@given(st.text())
def test_normalize_is_idempotent_and_case_insensitive(text):
    once = normalize_text(text)
    assert normalize_text(once) == once
    assert normalize_text(text.upper()) == normalize_text(text.lower()) or not text.isascii()
    assert "  " not in once and once == once.strip()


@settings(deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=12), st.integers(1, 5))
def test_ngrams_count_and_content(seq, n):
    grams = list(ngrams(seq, n))
    assert len(grams) == max(0, len(seq) - n + 1)
    assert all(list(g) == seq[i : i + n] for i, g in enumerate(grams))


def test_get_text_from_dict_example_callable_and_errors():
    assert get_text({"question": "q"}, "question") == "q"
    assert get_text(Example(prompt="p", answer="a"), "prompt") == "p"
    assert get_text({"x": {"y": "deep"}}, lambda r: r["x"]["y"]) == "deep"
    with pytest.raises(ValueError, match="no field 'prompt'"):
        get_text({"question": "q"}, "prompt")
    with pytest.raises(ValueError, match="must be a string"):
        get_text({"prompt": 3}, "prompt")
    with pytest.raises(ValueError, match="string to normalise"):
        normalize_text(None)
    with pytest.raises(ValueError, match=">= 1"):
        list(ngrams(["a"], 0))


def test_jsonl_round_trip_and_bad_line(tmp_path):
    rows = [{"a": 1}, {"b": "é"}]
    path = write_jsonl(tmp_path / "x" / "r.jsonl", rows)
    assert read_jsonl(path) == rows
    path.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: not valid JSON"):
        read_jsonl(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_jsonl(tmp_path / "missing.jsonl")
