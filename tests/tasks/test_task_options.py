"""Task options, checked once for every registered task: an unknown option names itself and the task's options,
a required one left out is named; math files name the file and line of a bad row."""

from __future__ import annotations

import inspect
import re

import pytest

from rlvr.cli import main
from rlvr.models import make_tiny_model_dir
from rlvr.tasks import TASKS, TaskOptionError, get_task
from rlvr.tasks.base import takes_tokenizer, task_options
from rlvr.tasks.data import record_place


@pytest.mark.parametrize("name", sorted(TASKS))
def test_an_unknown_option_is_named_with_the_options_of_every_task(name):
    names, required, is_open = task_options(TASKS[name])
    assert not is_open and "name" not in names and set(required) <= set(names)
    with pytest.raises(TaskOptionError, match=f"^{name} has no option 'bogus'; options: {', '.join(names)}$") as err:
        get_task(name, bogus=1, **{key: "x" for key in required})
    assert err.value.key == "bogus" and not err.value.missing


@pytest.mark.parametrize("name", [n for n in sorted(TASKS) if task_options(TASKS[n])[1]])
def test_a_required_option_left_out_is_named(name):
    required = task_options(TASKS[name])[1]
    with pytest.raises(TaskOptionError, match=f"^{required[0]} is required for {name}$") as err:
        get_task(name)
    assert err.value.missing and err.value.key == required[0]


def test_forwarded_options_are_the_class_options_and_all_are_taken(tmp_path):
    """math_file passes **options on to MathTask: each listed option reaches it (none is a TypeError)."""
    from rlvr.tasks.math_tasks import MathTask

    names = task_options(TASKS["math_file"])[0]
    assert set(names) == set(inspect.signature(MathTask).parameters) - {"name"}
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2", "answer": "4"}\n')
    task = get_task("math_file", path=str(data), eval_path=str(data), question_field="question",
                    answer_field="answer", answer_format="plain", template="plain", tokenizer=None,
                    strict_format=False, eval_fraction=0.5)
    assert [e.answer for e in task.eval_examples(0, 0)] in (["2", "4"], ["4", "2"])
    gsm = get_task("gsm8k", path=str(data), eval_path=str(data), answer_format="plain")  # no "multiple values"
    assert gsm.answer_format == "plain" and gsm.name == "gsm8k"


def test_subset_names_its_inner_tasks_option(tmp_path):
    with pytest.raises(ValueError, match="^subset: options: sort has no option 'lenght'") as err:
        get_task("subset", path=str(tmp_path / "kept.jsonl"), task="sort", options={"lenght": 3})
    assert not isinstance(err.value, TaskOptionError)  # not one of subset's own options


def test_math_rows_are_checked_when_the_task_is_built_naming_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "a", "answer": "\\\\boxed{1}"}\n\n  \n{"question": "b", "answer": "2"}\n')
    with pytest.raises(ValueError, match=rf"^{path}:4: answer_format 'boxed' but no \\boxed\{{\}} in '2'$"):
        get_task("math_file", path=str(path), answer_format="boxed")
    gsm = tmp_path / "g.json"
    gsm.write_text('[{"question": "a", "answer": "x #### 1"}, {"question": "b", "answer": "2"}]')
    with pytest.raises(ValueError, match=rf"^{gsm} record 2: not a GSM8K solution"):
        get_task("math_file", path=str(gsm), answer_format="gsm8k")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/e.jsonl: no rows$"):
        get_task("math_file", path=str(tmp_path / "e.jsonl"))
    good = tmp_path / "good.jsonl"
    good.write_text('{"question": "a", "answer": "1"}\n')
    with pytest.raises(ValueError, match=rf"^{path}:4: answer_format 'boxed'"):  # the training file of a
        get_task("math_file", path=str(path), eval_path=str(good), answer_format="boxed")  # run: read at once too
    assert record_place(path, 0) == f"{path}:1" and record_place(path, 1) == f"{path}:4"


GOOD_ROWS = '{"question": "1+1", "answer": "2"}\n{"question": "1+2", "answer": "3"}\n\n'


@pytest.mark.parametrize("row, words", [
    ('{"question": null, "answer": "2"}', "field 'question' must be a string, got null"),
    ('{"question": ["a", "b"], "answer": {"x": 1}}', 'field \'question\' must be a string, got ["a", "b"]'),
    ('{"question": 7, "answer": "2"}', "field 'question' must be a string, got 7"),
    ('{"question": "q", "answer": {"x": 1}}', 'field \'answer\' must be a string or a finite number, got {"x": 1}'),
    ('{"question": "q", "answer": null}', "field 'answer' must be a string or a finite number, got null"),
    ('{"question": "q", "answer": true}', "field 'answer' must be a string or a finite number, got true"),
    ('{"question": "q", "answer": [2]}', "field 'answer' must be a string or a finite number, got [2]"),
    ('{"question": "q", "answer": NaN}', "field 'answer' must be a string or a finite number, got NaN"),
])
def test_a_math_field_of_the_wrong_kind_names_file_and_line(tmp_path, row, words):
    """`"question": null` became the prompt "Question: None", `"answer": {"x": 1}` the answer "{'x': 1}"."""
    path = tmp_path / "d.jsonl"
    path.write_text(GOOD_ROWS + row + "\n")
    with pytest.raises(ValueError) as err:
        get_task("math_file", path=str(path), template="plain")
    assert str(err.value) == f"{path}:4: {words}"


def test_math_fields_are_named_as_the_file_spells_them_and_numeric_answers_are_text(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('[{"problem": "1+1", "solution": 2}, {"problem": "1/2", "solution": 0.5}, '
                    '{"problem": null, "solution": 1}]')
    with pytest.raises(ValueError, match=rf"^{path} record 3: field 'problem' must be a string, got null$"):
        get_task("math_file", path=str(path), question_field="problem", answer_field="solution")
    path.write_text('[{"problem": "1+1", "solution": 2}, {"problem": "1/2", "solution": 0.5}]')
    task = get_task("math_file", path=str(path), question_field="problem", answer_field="solution",
                    template="plain", eval_fraction=0.5)
    examples = task.train_examples(0, 0) + task.eval_examples(0, 0)
    assert sorted((e.fields["question"], e.answer) for e in examples) == [("1+1", "2"), ("1/2", "0.5")]
    assert task.is_correct("\\boxed{2}", next(e for e in examples if e.answer == "2"))


def test_rlvr_eval_refuses_a_wrong_kind_of_field_in_one_line_before_any_work(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model", preset="test")
    path = tmp_path / "f.jsonl"
    path.write_text(GOOD_ROWS + '{"question": null, "answer": "2"}\n')
    before = sorted(p.name for p in tmp_path.rglob("*"))
    argv = ["eval", "--model", str(model), "--task", "math_file", "--task-option", f"path={path}",
            "--task-option", "template=plain"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"rlvr eval: error: {path}:4: field 'question' must be a string, got null\n"
    assert captured.out == "" and sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("fields, words", [("5", "got 5"), ('"xy"', 'got "xy"'), ("[1]", "got [1]")])
def test_a_subset_row_whose_fields_are_not_an_object_names_file_and_line(tmp_path, fields, words):
    """`"fields": 5` was "'int' object is not iterable", `"fields": "xy"` a dict() error naming nothing."""
    path = tmp_path / "kept.jsonl"
    path.write_text('{"prompt": "p", "answer": "a", "fields": {"x": 1}}\n{"prompt": "p", "answer": "a", "fields": '
                    f'{fields}}}\n')
    with pytest.raises(ValueError) as err:
        get_task("subset", path=str(path), task="sort")
    assert str(err.value) == f"{path}:2: field 'fields' must be an object, {words}"


def test_held_out_note_says_why_the_share_is_small(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"question": "{i}", "answer": "{i}"}}\n' for i in range(4)))
    task = get_task("math_file", path=str(path))
    assert len(task.eval_examples(2, 0)) == 1
    assert task.held_out_note() == (f"eval_fraction=0.1 of the 4 rows of {path}; the rest is for training: "
                                    "raise eval_fraction or give eval_path=")
    assert get_task("math_file", eval_path=str(path), path=str(path)).held_out_note() == f"eval_path={path} has 4 rows"


@pytest.mark.parametrize("name, options, words", [
    ("sort", {"length": 5.0}, "sort option 'length' expects an integer, got 5.0"),
    ("sort", {"length": "abc"}, "sort option 'length' expects an integer, got 'abc'"),
    ("sort", {"length": True}, "expects an integer, got True"),
    ("arithmetic", {"digits": 2.5}, "arithmetic option 'digits' expects an integer, got 2.5"),
    ("arithmetic", {"ops": 5}, "arithmetic option 'ops' expects a string, got 5"),
    ("reasoning_gym", {"dataset": "leg_counting", "config": [1]}, "option 'config' expects a mapping"),
])
def test_an_option_of_the_wrong_kind_is_named_before_the_task_is_built(name, options, words):
    """`task.options.length=5.0` was an internal TypeError (exit 1) inside the task, `length=abc` a comparison
    error naming no option: each option is checked against the kind the task declares for it."""
    with pytest.raises(TaskOptionError, match=re.escape(words)) as err:
        get_task(name, **options)
    assert err.value.key in options


def test_a_number_where_a_float_is_declared_and_null_where_optional_are_accepted():
    assert get_task("countdown", format_score=1).format_score == 1
    assert get_task("gsm8k", path=None) is not None


def test_takes_tokenizer_is_whether_the_task_has_a_tokenizer_option():
    assert takes_tokenizer("gsm8k") and takes_tokenizer("math_file")  # MathTask's option, through **options
    assert not takes_tokenizer("sort") and not takes_tokenizer("no_such_task")
    assert all(takes_tokenizer(n) == ("tokenizer" in task_options(TASKS[n])[0]) for n in TASKS)
