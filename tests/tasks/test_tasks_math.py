"""GSM8K, MATH-500 and user files: splits, field mapping, templates, verification."""

import json
import sys

import pytest

from rlvr.models import build_char_tokenizer
from rlvr.eval import answer_votes, maj_at_k
from rlvr.tasks import Example, Task, get_task
from rlvr.tasks.data import gsm8k_answer, map_fields, read_records
from rlvr.tasks.templates import R1_ZERO, render_prompt, set_up_template


def test_gsm8k_from_shared_data():
    task = get_task("gsm8k")
    assert isinstance(task, Task)
    train, held = task.train_examples(50, seed=1), task.eval_examples(50, seed=0)
    assert len(train) == len(held) == 50
    assert not {e.fields["question"] for e in train} & {e.fields["question"] for e in held}
    assert task.eval_examples(50, seed=0) == held  # fixed by the seed
    assert task.train_examples(50, seed=2) != train
    assert len(task.eval_examples(0, seed=0)) == 1319  # n <= 0: everything
    assert all(e.prompt.endswith("Assistant: <think>") and e.answer.lstrip("-").replace(".", "").isdigit()
               for e in held)


def test_gsm8k_verifier_and_format():
    task = get_task("gsm8k")
    ex = task.eval_examples(1, seed=0)[0]
    right = f"work</think> <answer>{ex.answer}</answer>"
    wrong = f"work</think> <answer>{int(ex.answer) + 1}</answer>"
    assert task.correct_batch([right, wrong, "no answer"], [ex] * 3) == [True, False, False]
    assert task.is_correct(right, ex) and task.format_ok(right, ex) and not task.format_ok("no tags", ex)
    scores = task.reward_fn().score_batch([ex.prompt] * 2, [right, f"The answer is {ex.answer}"], [ex] * 2)
    assert scores.scores == [1.0, 0.0]  # R1-Zero: a right answer out of format scores 0
    assert task.answer_key(right, ex) == task.answer_key(f"x</think><answer>{ex.answer}.0</answer>", ex)


def test_math500_is_an_eval_set_with_latex_answers():
    task = get_task("math500", template="plain")
    held = task.eval_examples(0, seed=0)
    assert len(held) == 500 and held[0].prompt.startswith("Question: ")
    assert "\\boxed{}" in held[0].prompt
    with pytest.raises(ValueError, match="evaluation set"):
        task.train_examples(10, seed=0)
    ex = next(e for e in held if e.answer == "\\frac{14}{3}")
    assert task.is_correct("so $f = \\boxed{\\dfrac{14}{3}}$", ex)
    assert task.reward_fn()(ex.prompt, "\\boxed{4\\frac{2}{3}}", ex.as_dict()).score == 1.0


def test_user_jsonl_with_field_mapping_and_boxed_answers(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"problem": f"What is {i} + {i}?", "solution": f"It is \\boxed{{{2 * i}}}."} for i in range(40)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = get_task("math_file", path=str(path), question_field="problem", answer_field="solution",
                    answer_format="boxed", eval_fraction=0.25)
    train, held = task.train_examples(0, seed=3), task.eval_examples(0, seed=9)
    assert len(train) == 30 and len(held) == 10
    assert not {e.answer for e in train} & {e.answer for e in held}  # a fixed split, whatever the seed
    assert {e.answer for e in task.eval_examples(0, seed=1)} == {e.answer for e in held}
    assert all(e.answer == str(2 * int(e.fields["question"].split()[2])) for e in train)


def test_bad_files_and_options(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_records(bad)
    with pytest.raises(FileNotFoundError):
        read_records(tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="unsupported"):
        read_records(tmp_path / "x.csv")
    rows = tmp_path / "d.jsonl"
    rows.write_text('{"problem": 0}\n\n{"q": 1}\n')  # a blank line: the second row is on line 3
    with pytest.raises(ValueError, match=r"d.jsonl:3: missing field\(s\) \['problem'\]; it has \['q'\]"):
        map_fields(read_records(rows), {"question": "problem"}, rows)
    with pytest.raises(ValueError, match="d.json record 1: expected an object with fields, got list"):
        map_fields([[1, 2]], {"question": "problem"}, "d.json")
    with pytest.raises(FileNotFoundError, match="is a folder"):
        read_records(tmp_path)
    (tmp_path / "torn.json").write_text('[{"question": "q",\n "answer": ]')
    with pytest.raises(ValueError, match=r"torn.json:2: not valid JSON"):
        read_records(tmp_path / "torn.json")
    with pytest.raises(ValueError, match="answer_format"):
        get_task("math_file", path=str(bad), answer_format="latex")
    with pytest.raises(ValueError, match="####"):
        gsm8k_answer("no marker")


def test_parquet_rows_are_read_with_pyarrow(tmp_path):
    """The `parquet` extra (installed by scripts/setup.sh, so CI runs this): rows as the other formats give them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"question": ["1+1?", "2+3?"], "answer": ["2", "5"]}), path)
    assert read_records(path) == [{"question": "1+1?", "answer": "2"}, {"question": "2+3?", "answer": "5"}]
    task = get_task("math_file", path=str(path), eval_fraction=0.5)
    examples = task.train_examples(0, seed=0) + task.eval_examples(0, seed=0)
    assert sorted(e.answer for e in examples) == ["2", "5"]


def test_parquet_without_pyarrow_is_one_line_naming_the_install(tmp_path, monkeypatch):
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an import of it now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        read_records(path)


def test_templates():
    assert render_prompt("r1_zero", " 2+2? ") == R1_ZERO.format(question="2+2?")
    assert render_prompt("Q: {question}\nA:", "2+2?") == "Q: 2+2?\nA:"
    tok = build_char_tokenizer()
    chat = render_prompt("chat", "2+2?", tok)
    assert chat.startswith("<bos>2+2?") and "\\boxed{}" in chat
    with pytest.raises(ValueError, match="tokenizer"):
        render_prompt("chat", "2+2?")
    with pytest.raises(ValueError, match="unknown template"):
        get_task("gsm8k", template="fancy")
    task = get_task("gsm8k", template="chat", tokenizer=tok)
    assert task.eval_examples(1, 0)[0].prompt.startswith("<bos>")


@pytest.mark.parametrize("answer, fmt", [('""', "plain"), ('"   "', "plain"), (r'"\\boxed{}"', "boxed"),
                                         (r'"so \\boxed{ }"', "boxed"), ('"#### "', "gsm8k")])
def test_empty_ground_truth_is_refused_at_its_line(tmp_path, answer, fmt):
    """Before, an empty answer was accepted silently and made a row that no completion could ever get right."""
    rows = tmp_path / "rows.jsonl"
    good = {"plain": "1", "boxed": "\\\\boxed{1}", "gsm8k": "#### 1"}[fmt]
    rows.write_text('{"question": "q0", "answer": "' + good + '"}\n{"question": "q1", "answer": ' + answer + "}\n")
    with pytest.raises(ValueError, match="rows.jsonl:2: empty answer"):
        get_task("math_file", path=str(rows), answer_format=fmt)


def test_maj_at_k_counts_equivalent_answers_as_one_vote():
    """Before, `\\frac{\\sqrt{2}}{2}`, `\\sqrt{2}/2` and `\\frac{1}{\\sqrt{2}}` were three votes and lost to two "7"."""
    task = get_task("math500")
    ex = Example(prompt="Q <think>", answer=r"\frac{\sqrt{2}}{2}")
    forms = [r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2", r"\frac{1}{\sqrt{2}}", "7", "7"]
    completions = [f" ok</think> <answer>{f}</answer>" for f in forms]
    assert [task.answer_key(c, ex) for c in completions] == [r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2",
                                                             r"\frac{1}{\sqrt{2}}", "7", "7"]  # pure keys
    assert task.same_answers([(completions[1], completions[2]), (completions[3], completions[0])], ex) == [True, False]
    votes = answer_votes(task, completions, ex)
    assert votes == [r"\frac{\sqrt{2}}{2}"] * 3 + ["7"] * 2
    assert maj_at_k(votes, task.correct_batch(completions, [ex] * 5), 5) == 1.0
    other = Example(prompt="Q2 <think>", answer="7")  # groups are per prompt: "7" first seen here is its own key
    assert answer_votes(task, [completions[3], completions[1]], other) == ["7", r"\sqrt{2}/2"]
    # ties: the first answer seen wins, and distinct values stay apart
    tie = [" ok</think> <answer>8</answer>", " ok</think> <answer>7.0</answer>",
           " ok</think> <answer>\\frac{16}{2}</answer>", " ok</think> <answer>14/2</answer>"]
    ex7 = Example(prompt="Q3 <think>", answer="7")
    tie_votes = answer_votes(task, tie, ex7)
    assert tie_votes == ["8", "7", "8", "7"] and maj_at_k(tie_votes, task.correct_batch(tie, [ex7] * 4), 4) == 0.0


def test_same_answers_extracts_each_completions_answer_once(monkeypatch):
    """k completions compared pairwise: k extractions, not two per pair."""
    task = get_task("math500")
    ex = Example(prompt="Q <think>", answer="7")
    texts = [f" ok</think> <answer>{f}</answer>" for f in ("7", "7.0", "14/2", "8")]
    seen, original = [], task.predicted
    monkeypatch.setattr(task, "predicted", lambda text, example: seen.append(text) or original(text, example))
    pairs = [(a, b) for i, a in enumerate(texts) for b in texts[i + 1:]]  # 6 pairs of 4 completions
    assert task.same_answers(pairs, ex) == [True, True, False, True, False, False]
    assert sorted(seen) == sorted(texts)


def test_set_up_template_loads_the_tokenizer_resolves_auto_and_checks():
    assert set_up_template("auto", None) == ("r1_zero", None)  # no tokenizer: a base model's R1-Zero
    template, tokenizer = set_up_template("auto", "char")  # the tiny model's tokenizer, by name
    assert tokenizer is not None and template == ("chat" if tokenizer.chat_template else "r1_zero")
    assert set_up_template("Q: {question} A:", None)[0] == "Q: {question} A:"
    with pytest.raises(ValueError, match="template 'chat' needs tokenizer"):
        set_up_template("chat", None)
    with pytest.raises(ValueError, match="unknown template"):
        set_up_template("no_such_template", None)
