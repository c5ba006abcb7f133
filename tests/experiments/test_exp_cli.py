import argparse
import json
from pathlib import Path

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
    metrics = tmp_path / "sort_toy_normalized_all_repeated.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {r["reward_fn"] for r in rows} == {"exact", "position", "inclusion"}
    assert all("exact_match" in r for r in rows)


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


def _refused(capsys, argv, needle, folder):
    before = sorted(str(p) for p in folder.rglob("*"))
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("rlvr experiment: error: "), captured.err
    assert needle in captured.err, captured.err
    assert captured.out == ""  # refused before the first run, not after it with the results lost
    assert sorted(str(p) for p in folder.rglob("*")) == before


def test_sort_toy_bad_out_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    quick = ["sort-toy", "--epochs", "1", "--inner-steps", "1"]
    _refused(capsys, [*quick, "--out", str(tmp_path / "afile")],
             f"--out: '{tmp_path / 'afile'}' is an existing file, not a folder", tmp_path)
    _refused(capsys, [*quick, "--out", str(tmp_path / "afile" / "sub")], "--out: ", tmp_path)
    (tmp_path / "o" / "sort_toy_raw.jsonl").mkdir(parents=True)
    _refused(capsys, [*quick, "--delta", "raw", "--out", str(tmp_path / "o")],
             "sort_toy_raw.jsonl' is a folder", tmp_path)
    if Path("/proc/self").is_dir():
        _refused(capsys, [*quick, "--out", "/proc/rlvr_no_such"], "--out: cannot make the folder", tmp_path)


def test_sort_toy_out_with_missing_parents_is_made(tmp_path, capsys):
    out = tmp_path / "a" / "b"
    assert main(["sort-toy", "--delta", "raw", "--epochs", "1", "--inner-steps", "1", "--out", str(out)]) == 0
    assert (out / "sort_toy_raw.jsonl").is_file() and (out / "sort_toy_raw.png").is_file()
    capsys.readouterr()


@pytest.mark.parametrize("delta", ["all", "normalized"])
def test_one_response_with_the_normalized_delta_names_the_flags(tmp_path, capsys, delta):
    _refused(capsys, ["sort-toy", "--delta", delta, "--responses", "1", "--out", str(tmp_path / "o")],
             f"--responses 1: --delta {delta} runs the normalized delta, which needs at least 2 responses", tmp_path)
    assert not (tmp_path / "o").exists()


def test_lecture17_bad_out_or_runs_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    _refused(capsys, ["lecture17", "--quick", "--out", str(tmp_path / "afile"), "--runs", str(tmp_path / "r")],
             "--out: ", tmp_path)
    _refused(capsys, ["lecture17", "--quick", "--out", str(tmp_path / "o"), "--runs", str(tmp_path / "afile")],
             "--runs: ", tmp_path)
