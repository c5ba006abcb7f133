"""`rlvr eval` end to end on a tiny model built here (nothing downloaded), with the real HFEngine."""

import argparse
import json

from rlvr.commands.eval import add_parser, run_eval
from rlvr.models import make_tiny_model_dir


def test_eval_command_on_tiny_model(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", num_layers=1, hidden_size=32, num_heads=2,
                                intermediate_size=64)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "graded.jsonl"
    args = parser.parse_args(["eval", "--model", str(model), "--task", "countdown", "--task-option", "template=plain",
                              "--task-option", "n_numbers=3", "--num-examples", "3", "--n", "2",
                              "--max-new-tokens", "6", "--out", str(out)])
    results = run_eval(args)
    greedy, sampled = results["greedy"], results["sampled (n=2, T=1)"]
    assert greedy["prompts"] == sampled["prompts"] == 3
    assert sampled["mean_length"] <= 6
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["mode"] for r in rows] == ["greedy"] * 3 + ["sampled"] * 6
    for mode, metrics in (("greedy", greedy), ("sampled", sampled)):  # the table agrees with the jsonl
        mine = [r for r in rows if r["mode"] == mode]
        assert metrics["accuracy"] == sum(r["correct"] for r in mine) / len(mine)
        assert metrics["truncation_rate"] == sum(r["finish_reason"] == "length" for r in mine) / len(mine)
        assert metrics["mean_length"] == sum(r["length"] for r in mine) / len(mine)
    assert "pass@2" in capsys.readouterr().out


def test_eval_thinking_budget_sweep_writes_table_and_plot(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", num_layers=1, hidden_size=32, num_heads=2,
                                intermediate_size=64)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "graded.jsonl"
    args = parser.parse_args(["eval", "--model", str(model), "--task", "countdown", "--task-option",
                              "template=plain", "--num-examples", "2", "--n", "0", "--max-new-tokens", "4", "--answer-tokens", "3",
                              "--thinking-budget", "2,5", "--out", str(out)])
    run_eval(args)
    rows = [json.loads(line) for line in (tmp_path / "thinking_budget.jsonl").read_text().splitlines()]
    assert [r["budget"] for r in rows] == [2, 5]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)
    assert (tmp_path / "thinking_budget.png").stat().st_size > 1000
    assert "budget" in capsys.readouterr().out


def test_eval_rejects_a_bad_thinking_budget(capsys):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    import pytest

    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--model", "m", "--task", "gsm8k", "--thinking-budget", "0,x"])
    assert "thinking budget" in capsys.readouterr().err
