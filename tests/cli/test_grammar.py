"""One grammar for every command that reads a config (`rlvr.commands.grammar`): CONFIG anywhere, `--set KEY=VALUE`
repeated, `--out`; old spellings accepted with one deprecation line. Parsed only: nothing trains here."""

import pytest

from rlvr.cli import build_parser, main
from rlvr.commands.experiments import DELTA_NAMES, PROMPT_SET_NAMES, REWARD_NAMES
from rlvr.commands.grammar import out_override, set_args, settle
from rlvr.config import ConfigError
from rlvr.pipelines.experiments.sort_rewards import PROMPT_SETS, SORT_REWARDS
from rlvr.pipelines.experiments.sort_toy import DELTAS


def parse(argv, capsys=None):
    args = build_parser().parse_args(argv)
    settle(args, f"rlvr {args.command}")
    return args


@pytest.mark.parametrize("argv", [
    ["train", "--set", "train.steps=3", "sort"],  # was: `sort` swallowed by --set, then "give a CONFIG file"
    ["train", "sort", "--set", "train.steps=3"],
    ["train", "--set", "train.steps=3", "sort", "--set", "optim.lr=1e-4"],
])
def test_config_may_stand_anywhere_and_set_takes_one_key(argv, capsys):
    args = parse(argv)
    assert args.config == "sort" and args.overrides[0] == "train.steps=3"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", ["train", "sft", "dpo", "reward-model", "rft", "compare", "recipe"])
def test_every_config_command_reads_the_same_grammar(command, capsys):
    args = parse([command, "--set", "a.b=1", "my.yaml", "--set", "c=2", "--out", "there"])
    assert (args.config, args.overrides, args.out) == ("my.yaml", ["a.b=1", "c=2"], "there")
    assert capsys.readouterr().err == ""


def test_several_keys_after_one_set_still_work_with_a_deprecation_line(capsys):
    args = parse(["train", "sort", "--set", "train.steps=3", "optim.lr=1e-4", "eval.every=0"])
    assert args.config == "sort" and args.overrides == ["train.steps=3", "optim.lr=1e-4", "eval.every=0"]
    assert capsys.readouterr().err.splitlines() == [
        f"rlvr train: deprecated: {item!r} without its own --set (one --set takes one KEY=VALUE); write --set {item}"
        for item in ("optim.lr=1e-4", "eval.every=0")]


def test_two_configs_or_out_twice_is_one_line(capsys, tmp_path):
    assert main(["train", "sort", "demo"]) == 2
    assert capsys.readouterr().err == ("rlvr train: error: one CONFIG expected, got 'sort', 'demo' (a KEY=VALUE goes "
                                       "after --set)\n")
    assert main(["train", "sort", "--out", str(tmp_path), "--set", f"out_dir={tmp_path}"]) == 2
    assert "--out and --set out_dir both name the output folder" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_out_is_the_out_dir_key():
    args = parse(["train", "sort", "--out", "runs/x", "--set", "train.steps=1"])
    assert out_override(args) == ["train.steps=1", "out_dir=runs/x"]
    assert set_args(["a=1", "b=2"]) == ["--set", "a=1", "--set", "b=2"]


def test_a_file_named_like_a_key_value_is_a_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=1.yaml").write_text("train: {steps: 1}\n")
    args = parse(["train", "lr=1.yaml"])
    assert args.config == "lr=1.yaml" and args.overrides == [] and capsys.readouterr().err == ""


def test_the_sort_toy_parser_names_the_experiments_own_tables():
    """The parser holds the names (the tables' modules import torch, which --help must not)."""
    assert DELTA_NAMES == tuple(DELTAS) and REWARD_NAMES == tuple(SORT_REWARDS)
    assert PROMPT_SET_NAMES == tuple(PROMPT_SETS)
