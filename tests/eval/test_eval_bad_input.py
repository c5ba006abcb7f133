"""`rlvr eval` bad input: exit 2, one stderr line naming the flag, option or file:LINE, nothing written;
--out as a folder or with missing parents; the note when a data file holds out fewer problems than asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("eval") / "tiny", preset="test")


def _tree(path: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_size) for p in path.rglob("*"))


def refused(capsys, argv: list[str], needle: str, *folders: Path) -> None:
    before = [_tree(f) for f in folders]
    assert main(["eval", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("rlvr eval: error: ") and "Traceback" not in err, err
    assert needle in err, err
    assert captured.out == ""  # no table: refused before any sampling
    assert [_tree(f) for f in folders] == before  # nothing written


QUICK = ["--task", "sort", "--num-examples", "2", "--n", "0", "--max-new-tokens", "4"]


def test_out_folder_gets_the_jsonl_inside_and_missing_parents_are_made(model, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert main(["eval", "--model", str(model), *QUICK, "--out", str(tmp_path / "d")]) == 0
    assert len((tmp_path / "d" / "eval_sort.jsonl").read_text().splitlines()) == 2
    assert main(["eval", "--model", str(model), *QUICK, "--out", str(tmp_path / "new" / "sub" / "g.jsonl")]) == 0
    assert len((tmp_path / "new" / "sub" / "g.jsonl").read_text().splitlines()) == 2
    assert "2 problems" in " ".join(capsys.readouterr().out.split())


def test_out_below_a_file_is_refused_before_any_work(model, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    refused(capsys, ["--model", str(model), *QUICK, "--out", str(tmp_path / "afile" / "g.jsonl")],
            "--out: ", tmp_path, model)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_out_where_no_folder_can_be_made_is_refused_before_any_work(model, tmp_path, capsys):
    refused(capsys, ["--model", str(model), *QUICK, "--out", "/proc/rlvr_no_such/g.jsonl"],
            "--out: cannot make the folder '/proc/rlvr_no_such'", model)


@pytest.mark.parametrize("flags, needle", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--n", "2", "--k", "4"], "--k 4 needs at least that many samples per problem; --n is 2"),
], ids=["max-new-tokens", "temperature", "top-p", "k-above-n"])
def test_bad_sampling_flags_name_the_flag(model, tmp_path, capsys, flags, needle):
    refused(capsys, ["--model", str(model), "--task", "sort", "--num-examples", "2", *flags,
                     "--out", str(tmp_path / "g.jsonl")], needle, tmp_path, model)


def test_math_file_errors_name_the_file_and_line(model, tmp_path, capsys):
    (tmp_path / "nobox.jsonl").write_text('{"question":"Q1","answer":"no box here"}\n{"question":"Q2","answer":"x"}\n')
    (tmp_path / "late.jsonl").write_text('{"question":"Q1","answer":"\\\\boxed{1}"}\n\n'
                                         '{"question":"Q2","answer":"x"}\n')
    (tmp_path / "empty.jsonl").write_text("")
    base = ["--model", str(model), "--task", "math_file", "--n", "0", "--max-new-tokens", "4"]
    boxed = ["--task-option", "answer_format=boxed"]
    refused(capsys, [*base, "--task-option", f"path={tmp_path}/nobox.jsonl", *boxed],
            f"{tmp_path}/nobox.jsonl:1: answer_format 'boxed' but no \\boxed{{}} in 'no box here'", tmp_path, model)
    refused(capsys, [*base, "--task-option", f"path={tmp_path}/late.jsonl", *boxed],  # blank lines count
            f"{tmp_path}/late.jsonl:3: answer_format 'boxed'", tmp_path, model)
    refused(capsys, [*base, "--task-option", f"path={tmp_path}/empty.jsonl"], f"{tmp_path}/empty.jsonl: no rows",
            tmp_path, model)


def test_task_options_are_named(model, tmp_path, capsys):
    (tmp_path / "four.jsonl").write_text("".join(f'{{"question":"{i}+{i}","answer":"{2 * i}"}}\n' for i in range(4)))
    base = ["--model", str(model), "--task", "math_file", "--n", "0"]
    refused(capsys, [*base, "--task-option", f"path={tmp_path}/four.jsonl", "--task-option", "foo=1"],
            "--task-option foo: math_file has no option 'foo'; options: path, eval_path, question_field",
            tmp_path, model)
    refused(capsys, base, "--task-option path is required for math_file", tmp_path, model)
    refused(capsys, ["--model", str(model), "--task", "sort", "--task-option", "template=chat"],
            "--task-option template: sort has no option 'template'; options: length, max_digit, reward", model)


def test_a_smaller_held_out_share_than_asked_is_said_in_one_line(model, tmp_path, capsys):
    (tmp_path / "four.jsonl").write_text("".join(f'{{"question":"{i}+{i}","answer":"{2 * i}"}}\n' for i in range(4)))
    assert main(["eval", "--model", str(model), "--task", "math_file", "--task-option", f"path={tmp_path}/four.jsonl",
                 "--num-examples", "2", "--n", "0", "--max-new-tokens", "4", "--out", str(tmp_path / "g.jsonl")]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert ("--num-examples 2: evaluating the 1 problem math_file holds out (eval_fraction=0.1 of the 4 rows of "
            in captured.err and "raise eval_fraction or give eval_path=" in captured.err), captured.err
    title = " ".join(captured.out.split())  # rich wraps the title to the table's width
    assert "1 problem" in title and "1 problems" not in title
