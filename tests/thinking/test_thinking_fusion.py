import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.thinking.fusion import (
    build_fusion_data,
    no_thinking_completion,
    split_thinking,
    thinking_completion,
    write_fusion_jsonl,
)


def test_formats_by_hand():
    assert thinking_completion("  2 + 2 is 4 ", "4") == "<think>\n2 + 2 is 4\n</think>\n\n4"
    assert no_thinking_completion("4") == "<think>\n\n</think>\n\n4"  # Qwen3: empty thinking block kept
    assert split_thinking("<think>\nr\n</think>\n\nA") == ("r", "A")
    assert split_thinking("<think>\n\n</think>\n\nA") == ("", "A")
    assert split_thinking("<think>unfinished") == ("unfinished", "")
    assert split_thinking(" plain answer ") == ("", "plain answer")


@settings(deadline=None)
@given(st.text(st.characters(blacklist_characters="<>"), min_size=1).filter(str.strip),
       st.text(st.characters(blacklist_characters="<>")))
def test_split_inverts_the_formats(thinking, answer):
    assert split_thinking(thinking_completion(thinking, answer)) == (thinking.strip(), answer.strip())
    assert split_thinking(no_thinking_completion(answer)) == ("", answer.strip())


def test_build_pairs_and_write(tmp_path):
    records = [{"prompt": "What is 2+2?", "thinking": "2+2=4", "answer": "4"},
               {"prompt": "Sort 3 1", "thinking": "1 < 3", "answer": "1 3", "direct": "1 3"}]
    rows = build_fusion_data(records)
    assert [(r["mode"], r["source_index"]) for r in rows] == [("think", 0), ("no_think", 0), ("think", 1),
                                                              ("no_think", 1)]
    assert rows[0]["prompt"] == "What is 2+2? /think" and rows[1]["prompt"] == "What is 2+2? /no_think"
    assert rows[0]["completion"] == "<think>\n2+2=4\n</think>\n\n4"
    assert rows[1]["completion"] == "<think>\n\n</think>\n\n4"
    assert rows[1]["messages"] == [{"role": "user", "content": "What is 2+2? /no_think"},
                                   {"role": "assistant", "content": "<think>\n\n</think>\n\n4"}]
    path = write_fusion_jsonl(rows, tmp_path / "fusion.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows


def test_from_completions_and_unflagged_share():
    records = [{"q": f"q{i}", "c": f"<think>r{i}</think>a{i}"} for i in range(400)]
    rows = build_fusion_data(records, prompt_key="q", completion_key="c", unflagged_think=0.25, seed=1)
    think = [r for r in rows if r["mode"] == "think"]
    assert think[0]["completion"] == "<think>\nr0\n</think>\n\na0"
    unflagged = sum(not r["prompt"].endswith("/think") for r in think) / len(think)
    assert abs(unflagged - 0.25) < 4 * (0.25 * 0.75 / 400) ** 0.5
    assert all(r["prompt"].endswith("/no_think") for r in rows if r["mode"] == "no_think")


def test_bad_records():
    with pytest.raises(ValueError, match="^record 0: missing string field 'thinking'; .* --completion-key$"):
        build_fusion_data([{"prompt": "p", "answer": "a"}])
    with pytest.raises(ValueError, match="^record 1: field 'answer' is an int, not a string$"):
        build_fusion_data([{"prompt": "p", "thinking": "t", "answer": "a"}, {"prompt": "p", "thinking": "t",
                                                                               "answer": 4}])
    with pytest.raises(ValueError, match="^record 0: field 'prompt' is null, not a string$"):
        build_fusion_data([{"prompt": None, "thinking": "t", "answer": "a"}])
    with pytest.raises(ValueError, match="^record 0: expected a JSON object, got a list$"):
        build_fusion_data([["p"]])
    with pytest.raises(ValueError, match="empty reasoning"):
        build_fusion_data([{"prompt": "p", "thinking": " ", "answer": "a"}])
    with pytest.raises(ValueError, match="field 'c' opens '<think>' but never closes it"):  # no '</think>' to cite
        build_fusion_data([{"prompt": "p", "c": "<think>r"}], completion_key="c")
    with pytest.raises(ValueError, match="unflagged_think"):
        build_fusion_data([], unflagged_think=2)


def test_errors_name_the_source_given_in_where():
    records = [{"prompt": "p", "thinking": "t", "answer": "a"}, {"prompt": "q", "thinking": "t"}]
    with pytest.raises(ValueError, match="^t.jsonl:3: missing string field 'answer'$"):
        build_fusion_data(records, where=["t.jsonl:1", "t.jsonl:3"])
    with pytest.raises(ValueError, match="where names 1 records, but there are 2"):
        build_fusion_data(records, where=["t.jsonl:1"])


@pytest.mark.parametrize("completion, message", [
    ("<think>a</think><think>b</think>c", "has 2 '<think>' and 2 '</think>' tags; expected exactly one"),
    ("<think>a</think>b</think>c", "has 1 '<think>' and 2 '</think>' tags"),
    ("preamble <think>x</think> ans", "has text before '<think>'; the thinking block must open the completion"),
    ("<think>abc", "opens '<think>' but never closes it with '</think>'"),
    ("r</think>b</think>a", "has 2 '</think>' tags and no '<think>'; expected one <think>...</think> block"),
    ("just an answer", "has no <think>...</think> block"),
    ("<think>r</think>  ", "has no answer after '</think>'"),
])
def test_malformed_completions_are_refused(completion, message):
    with pytest.raises(ValueError, match=f"^t.jsonl:2: field 'c' {re.escape(message)}"):
        build_fusion_data([{"p": "ok", "c": "<think>r</think>a"}, {"p": "q", "c": completion}], prompt_key="p",
                          completion_key="c", where=["t.jsonl:1", "t.jsonl:2"])


def test_leading_whitespace_before_the_block_is_fine():
    rows = build_fusion_data([{"prompt": "p", "c": " \n<think>r</think>a"}], completion_key="c")
    assert rows[0]["completion"] == "<think>\nr\n</think>\n\na" and rows[1]["completion"] == "<think>\n\n</think>\n\na"


def test_a_block_opened_by_the_chat_template_is_read():
    """Qwen3's template puts `<think>` in the prompt, so sampled completions start with the thinking itself."""
    assert build_fusion_data([{"prompt": "p", "c": "r</think>a"}], completion_key="c") == \
        build_fusion_data([{"prompt": "p", "c": "<think>r</think>a"}], completion_key="c")


@pytest.mark.parametrize("record, message", [
    ({"prompt": "", "thinking": "t", "answer": "a"}, "field 'prompt' is empty; a sample needs a prompt"),
    ({"prompt": "  ", "thinking": "t", "answer": "a"}, "field 'prompt' is empty"),
    ({"prompt": "p", "thinking": "<think>t", "answer": "a"}, "field 'thinking' contains '<think>'"),
    ({"prompt": "p", "thinking": "t</think>", "answer": "a"}, "field 'thinking' contains '</think>'"),
    ({"prompt": "p", "thinking": "t", "answer": "<think>x</think>a"}, "field 'answer' contains '<think>'"),
    ({"prompt": "p", "thinking": "t", "answer": "a", "d": "</think>a"}, "field 'd' contains '</think>'"),
])
def test_separate_fields_refuse_empty_prompts_and_tags(record, message):
    with pytest.raises(ValueError, match=f"^record 0: {re.escape(message)}"):
        build_fusion_data([record], no_think_answer_key="d" if "d" in record else None)
    if record["prompt"] == "":
        with pytest.raises(ValueError, match="^record 0: field 'prompt' is empty"):
            build_fusion_data([{"prompt": "", "c": "<think>x</think>y"}], completion_key="c")


@pytest.mark.parametrize("bad", [
    {"prompt": "two", "completion": "<think>a</think><think>b</think>c"},
    {"prompt": "pre", "completion": "preamble <think>x</think> ans"},
    {"prompt": "", "completion": "<think>x</think>y"},
    {"prompt": "unclosed", "completion": "<think>abc"},
])
def test_cli_refuses_a_malformed_row_at_its_line(tmp_path, capsys, bad):
    from rlvr.cli import main

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"prompt": "ok", "completion": "<think>r</think>a"}) + "\n" + json.dumps(bad) + "\n")
    assert main(["data", "fusion", str(src), "--completion-key", "completion", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2: field " in err and "has no answer after" not in err
    assert not out.exists()


@pytest.mark.parametrize("prompt, flag", [("What is 2+2? /no_think", "/no_think"), ("/think\nWhat is 2+2?", "/think")])
def test_a_prompt_that_already_carries_a_mode_flag_is_refused_at_its_line(tmp_path, capsys, prompt, flag):
    """A prompt ending in /no_think was kept, and its thinking row became "What is 2+2? /no_think /think"."""
    from rlvr.cli import main

    with pytest.raises(ValueError, match=f"^record 0: field 'prompt' already carries the mode flag '{flag}'"):
        build_fusion_data([{"prompt": prompt, "thinking": "t", "answer": "4"}])
    assert build_fusion_data([{"prompt": "Explain /thinking", "thinking": "t", "answer": "a"}])[0]["prompt"] == (
        "Explain /thinking /think")  # a word that merely starts with a flag is text
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"prompt": "ok", "thinking": "t", "answer": "a"}) + "\n"
                   + json.dumps({"prompt": prompt, "thinking": "t", "answer": "4"}) + "\n")
    assert main(["data", "fusion", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2: field 'prompt' already carries the mode flag {flag!r}" in err and err.count("\n") == 1
    assert not out.exists()
