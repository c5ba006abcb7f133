"""`rlvr eval` bad input: exit 2, one stderr line naming the flag, option or file:LINE, nothing written;
--out as a folder or with missing parents, never over a file eval did not write; a reward model folder; the
thinking budget's prompts checked against the context before any work; the note when a data file holds out
fewer problems than asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.models import load_model, load_tokenizer, make_tiny_model_dir, save_model
from rlvr.rewards.reward_model import reward_model_from_lm


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
    # a folder that is there but refuses new files (even as root): the greedy pass ran, then the write failed
    refused(capsys, ["--model", str(model), *QUICK, "--out", "/proc/x.jsonl"],
            "--out: cannot write '/proc/x.jsonl' (", model)


def test_an_empty_out_is_refused(model, tmp_path, capsys, monkeypatch):
    """`--out ''` wrote eval_sort.jsonl into the current folder."""
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["--model", str(model), *QUICK, "--out", ""], "--out: empty path", tmp_path, model)


@pytest.mark.parametrize("flags, needle", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--n", "2", "--k", "4"], "--k 4 needs at least that many samples per problem; --n is 2"),
    (["--n", "0", "--k", "2"], "--k 2: pass@k and maj@k need sampled mode; --n is 0 (greedy only)"),  # was ignored
], ids=["max-new-tokens", "temperature", "top-p", "k-above-n", "k-without-samples"])
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


@pytest.mark.parametrize("name, text", [
    ("metrics.jsonl", '{"step": 1, "reward": 0.5}\n'),
    ("config.yaml", "seed: 0\n"),
    ("samples.jsonl", '{"step": 4, "mode": "greedy", "prompt": "p", "completion": "c", "answer": "a", "reward": 1.0, '
                      '"correct": true, "finish_reason": "stop"}\n'),  # a run's samples: mode, but not eval's rows
    ("empty.jsonl", ""),
], ids=["metrics", "config", "run-samples", "empty"])
def test_out_never_writes_over_a_file_eval_did_not_write(model, tmp_path, capsys, name, text):
    """`--out RUN/metrics.jsonl` replaced the run's metrics with graded samples, exit 0."""
    (tmp_path / name).write_text(text)
    refused(capsys, ["--model", str(model), *QUICK, "--out", str(tmp_path / name)],
            f"--out: {str(tmp_path / name)!r} exists and is not a jsonl of graded samples written by `rlvr eval`; "
            "refusing to write over it (choose another file)", tmp_path, model)


def test_out_never_writes_over_the_models_weights(model, capsys):
    """`--out MODEL/model.safetensors` destroyed the model."""
    refused(capsys, ["--model", str(model), *QUICK, "--out", str(model / "model.safetensors")],
            "model.safetensors' exists and is not a jsonl of graded samples", model)


def test_out_writes_over_an_earlier_eval_and_says_so_in_help(model, tmp_path, capsys):
    for _ in range(2):  # the second run replaces the first's rows (not appended to them)
        assert main(["eval", "--model", str(model), *QUICK, "--out", str(tmp_path / "g.jsonl")]) == 0
        assert len((tmp_path / "g.jsonl").read_text().splitlines()) == 2
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "replaced on each run" in " ".join(capsys.readouterr().out.split())


def test_out_ending_in_a_slash_is_a_folder(model, tmp_path, capsys):
    """`--out evals/tb/` wrote a file named evals/tb."""
    assert main(["eval", "--model", str(model), *QUICK, "--out", f"{tmp_path / 'evals' / 'tb'}/"]) == 0
    assert len((tmp_path / "evals" / "tb" / "eval_sort.jsonl").read_text().splitlines()) == 2
    assert f"graded samples: {tmp_path / 'evals' / 'tb' / 'eval_sort.jsonl'}" in capsys.readouterr().out


def test_a_reward_model_folder_is_refused_in_one_line(model, tmp_path, capsys):
    """A `rlvr reward-model` folder (a sequence-classification head) was evaluated as a causal LM: a 7-line load
    report on stderr, exit 0."""
    rm = save_model(reward_model_from_lm(load_model(model), seed=3), load_tokenizer(model), tmp_path / "rm" / "model")
    refused(capsys, ["--model", str(rm), *QUICK],
            f"--model: {str(rm)!r} holds a reward model (Qwen2ForSequenceClassification: a sequence-classification "
            "head), not a causal LM", tmp_path)
    for argv in (["train", "sort", "--set", f"model.path={rm}", "--set", f"out_dir={tmp_path / 'run'}"],
                 ["rft", "--model", str(rm), "--out", str(tmp_path / "rft")],
                 ["dpo", "--model", str(rm), "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "dpo")]):
        assert main(argv) == 2  # every command that trains or samples a causal LM refuses it the same way
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds a reward model (Qwen2ForSequenceClassification" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rm"]


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> Path:
    """200 positions: a sort prompt (13 tokens) and 64 new tokens fit, the early-stop text (about 120) after
    budget 8 thinking leaves about 60."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("eval") / "short", preset="test", max_position_embeddings=200)


def test_thinking_budget_default_answer_fits_the_context(short_model, tmp_path, capsys):
    """The default new tokens were sized for the plain prompts: the sweep failed after the eval (exit 2, its
    table and jsonl written) as the budget prompts are longer."""
    assert main(["eval", "--model", str(short_model), "--task", "sort", "--num-examples", "2", "--n", "0",
                 "--thinking-budget", "4,8", "--out", str(tmp_path)]) == 0
    assert [json.loads(line)["budget"] for line in (tmp_path / "thinking_budget.jsonl").read_text().splitlines()] \
        == [4, 8]


@pytest.mark.parametrize("flags, needle", [
    (["--max-new-tokens", "100", "--thinking-budget", "8"],
     "--max-new-tokens 100: the longest prompt + 8 thinking + the early-stop text ("),
    (["--max-new-tokens", "4", "--answer-tokens", "100", "--thinking-budget", "8"],
     "--answer-tokens 100: the longest prompt + 8 thinking + the early-stop text ("),
    (["--max-new-tokens", "4", "--thinking-budget", "4,100"],
     "--thinking-budget 100: the longest prompt + 100 thinking + the early-stop text ("),
    (["--answer-tokens", "0", "--thinking-budget", "8"], "--answer-tokens must be >= 1, got 0"),
], ids=["max-new-tokens", "answer-tokens", "budget-fills-the-context", "answer-tokens-0"])
def test_thinking_budget_prompts_are_checked_before_any_work(short_model, tmp_path, capsys, flags, needle):
    refused(capsys, ["--model", str(short_model), "--task", "sort", "--num-examples", "2", "--n", "0", *flags,
                     "--out", str(tmp_path)], needle, tmp_path, short_model)


def test_max_new_tokens_beyond_the_context_keeps_the_earlier_eval(short_model, capsys):
    """It was refused by the engine after the earlier MODEL/eval_sort.jsonl had been deleted."""
    argv = ["--model", str(short_model), "--task", "sort", "--num-examples", "2", "--n", "0"]
    assert main(["eval", *argv, "--max-new-tokens", "4"]) == 0
    capsys.readouterr()
    refused(capsys, [*argv, "--max-new-tokens", "512"], "--max-new-tokens 512: the longest prompt (", short_model)
