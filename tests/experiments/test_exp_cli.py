import argparse
import json

import pytest

from rlvr.cli import main as rlvr_main
from rlvr.commands.experiments import add_parser


def main(argv):
    return rlvr_main(["experiment", *argv])


def parse(argv):
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_sort_toy_all_writes_plot_and_metrics(tmp_path, capsys):
    assert main(["sort-toy", "--delta", "all", "--epochs", "2", "--inner-steps", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for delta in ("raw", "centered", "normalized", "max_only"):
        assert delta in out
    assert (tmp_path / "sort_toy_all.png").stat().st_size > 0
    rows = [json.loads(line) for line in (tmp_path / "sort_toy_all.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2 * 2 and {r["delta"] for r in rows} == {"raw", "centered", "normalized", "max_only"}


def test_sort_toy_reward_designs_on_repeated_prompts(tmp_path, capsys):
    argv = ["sort-toy", "--delta", "normalized", "--reward", "all", "--prompts", "repeated", "--epochs", "2",
            "--inner-steps", "1", "--seeds", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "exact match" in out and all(name in out for name in ("exact", "position", "inclusion"))
    assert (tmp_path / "sort_toy_normalized_all_repeated.png").stat().st_size > 0
    rows = [json.loads(line) for line in (tmp_path / "sort_toy_normalized_all_repeated.jsonl").read_text().splitlines()]
    assert {r["reward_fn"] for r in rows} == {"exact", "position", "inclusion"} and all("exact_match" in r for r in rows)


def test_two_state_prints_exact_numbers(capsys):
    assert main(["two-state"]) == 0
    out = capsys.readouterr().out
    assert "(1/4, -1/4, -1/4, 1/4)" in out and "51/2" in out and "variance ratio: 102" in out


def test_parser_defaults_and_errors():
    args = parse(["experiment", "sort-toy"])
    assert (args.delta, args.epochs, args.inner_steps, args.responses, args.lr, args.seed) == (
        "all", 100, 10, 10, 1e-3, 5)
    assert (args.reward, args.prompts) == ("inclusion", "lecture")
    for bad in (["--delta", "median"], ["--epochs", "0"], ["--lr", "-1"], ["--reward", "bleu"]):
        with pytest.raises(SystemExit) as e:
            parse(["experiment", "sort-toy", *bad])
        assert e.value.code == 2
