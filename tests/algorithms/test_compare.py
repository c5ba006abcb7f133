"""`rlvr compare`: variant parsing, the shared-seed run, the figure and the summary table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from rlvr.config import load_config
from rlvr.pipelines.compare import (Variant, _flatten, check_variants, parse_variant, plot_comparison, run_comparison,
                                   summarize)
from rlvr.cli import main
from rlvr.commands.grammar import set_args
from variant_helpers import TINY


def test_parse_variant_forms(tmp_path):
    preset = parse_variant("dr_grpo")
    assert preset.label == "dr_grpo" and "algorithm.preset=dr_grpo" in preset.overrides
    inline = parse_variant("seqmean:algorithm.aggregation=seq_mean_token_mean, algorithm.beta=0")
    assert inline == Variant("seqmean", ["algorithm.aggregation=seq_mean_token_mean", "algorithm.beta=0"])
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"advantage": "rloo"}, "task": {"options": {"length": 5}}}))
    assert parse_variant(str(path)) == Variant("mine", ["algorithm.advantage=rloo", 'task.options={"length": 5}'])
    for bad in ["nopreset", "a b:x=1", "lbl:novalue", str(tmp_path / "missing.yaml")]:
        with pytest.raises(ValueError):
            parse_variant(bad)


def test_flatten_writes_sections_and_json_values():
    assert _flatten({"seed": 3, "algorithm": {"loss_constant": None, "dynamic_sampling": True},
                     "task": {"rewards": [{"name": "format"}]}}) == [
        "seed=3", "algorithm.loss_constant=null", "algorithm.dynamic_sampling=true",
        'task.rewards=[{"name": "format"}]']


def _fake_train(lengths):
    """A stand-in for the loop: writes a metrics.jsonl whose length curve depends on the variant."""

    def train(cfg):
        slope = lengths[cfg.algorithm.aggregation]
        rows = [{"step": 0, "eval/greedy_accuracy": 0.1}]
        rows += [{"step": s, "reward": 0.1 * s, "completion_length": 5 + slope * s} for s in range(1, 11)]
        rows[-1]["eval/greedy_accuracy"] = 0.5
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    return train


def test_run_comparison_shares_the_seed_and_summarises(tmp_path):
    variants = [parse_variant("a:algorithm.aggregation=seq_mean_token_mean"),
                parse_variant("b:algorithm.aggregation=seq_sum_constant")]
    histories = run_comparison(None, variants, tmp_path, ["seed=5"],
                               train=_fake_train({"seq_mean_token_mean": 1.0, "seq_sum_constant": 0.0}))
    assert list(histories) == ["a", "b"]
    table = summarize(histories)
    # first five steps: lengths 6..10 (mean 8) / last five: 11..15 (mean 13); rewards 0.3 -> 0.8
    assert "| a | 0.100 -> 0.500 | 0.300 -> 0.800 | 8.0 -> 13.0 |" in table
    assert "| b | 0.100 -> 0.500 | 0.300 -> 0.800 | 5.0 -> 5.0 |" in table
    png = plot_comparison(histories, tmp_path / "cmp.png", title="t")
    assert png.stat().st_size > 10_000


def test_run_comparison_rejects_bad_variant_sets(tmp_path):
    one = parse_variant("a:seed=1")
    with pytest.raises(ValueError, match="at least two"):
        run_comparison(None, [one], tmp_path, train=_fake_train({}))
    with pytest.raises(ValueError, match="unique"):
        run_comparison(None, [one, one], tmp_path, train=_fake_train({}))
    with pytest.raises(ValueError, match="share one seed"):
        run_comparison(None, [one, parse_variant("b:seed=2")], tmp_path, train=_fake_train({}))


def test_compare_command_end_to_end(tmp_path, capsys):
    code = main(["compare", "--variants", "grpo", "dr_grpo", "--out", str(tmp_path), *set_args(TINY)])
    out = capsys.readouterr().out
    assert code == 0 and "| grpo |" in out and "| dr_grpo |" in out
    assert (tmp_path / "comparison.png").is_file() and (tmp_path / "summary.md").is_file()
    for label in ("grpo", "dr_grpo"):
        saved = yaml.safe_load((tmp_path / label / "config.yaml").read_text())
        assert saved["seed"] == 0 and saved["algorithm"]["preset"] == label


@pytest.mark.parametrize("argv, line", [
    # a --set replaced the key that tells the variants apart: both runs had 1 step
    (["a:train.steps=1", "b:train.steps=2", "--set", "train.steps=1"],
     "--set train.steps: variant a sets train.steps, and a --set would replace it in every variant"),
    (["a:task.options={length: 3}", "b:seed=0", "--set", "task.options.length=5"],
     "--set task.options.length: variant a sets task.options"),
    (["grpo", "dr_grpo", "--set", "algorithm.preset=ppo"], "--set algorithm.preset: variant grpo sets "
     "algorithm.preset"),
    (["a:algorithm.beta=0.1,algorithm.beta=0.2", "b:seed=0"], "variant 'a:algorithm.beta=0.1,algorithm.beta=0.2' "
     "sets algorithm.beta twice"),
    (["a:out_dir=/tmp/x", "b:seed=0"], "variant 'a:out_dir=/tmp/x': out_dir is set by compare"),
    (["a:seed=0", "b:seed=0", "--set", "out_dir=/tmp/x"], "--set out_dir: compare's --out names the run folders"),
])
def test_compare_refuses_sets_that_would_be_replaced_or_ignored(tmp_path, capsys, argv, line):
    assert main(["compare", "--variants", *argv[:2], "--out", str(tmp_path / "out"), *argv[2:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err
    assert not (tmp_path / "out").exists()


def test_a_set_goes_over_the_keys_of_preset_variants_as_in_rlvr_train():
    """A preset variant names only its preset: `--set algorithm.beta=0` turns the KL term off in every preset
    compared (as `rlvr train --set algorithm.preset=grpo --set algorithm.beta=0` does), not refused."""
    variants = [parse_variant("grpo"), parse_variant("dr_grpo")]
    check_variants(variants, ["algorithm.beta=0"])
    configs = [load_config(None, [*v.overrides, "algorithm.beta=0"]) for v in variants]
    assert [c.algorithm.beta for c in configs] == [0, 0]
    assert [c.algorithm.preset for c in configs] == ["grpo", "dr_grpo"]


def test_a_variant_file_setting_out_dir_is_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"out_dir": "/tmp/x", "seed": 0}))
    with pytest.raises(ValueError, match="out_dir is set by compare"):
        parse_variant(str(path))


def test_compare_command_bad_variant_exits_2(tmp_path, capsys):
    assert main(["compare", "--variants", "grpo", "bogus", "--out", str(tmp_path)]) == 2
    assert "bogus" in capsys.readouterr().err


def test_a_variant_folder_holding_a_run_is_refused_before_any_variant_trains(tmp_path):
    """The check ran per variant as it started, so `a` trained in full before `b`'s folder was refused."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.jsonl").write_text('{"step": 0}\n')
    trained = []
    fake = _fake_train({"seq_mean_token_mean": 1.0})
    variants = [parse_variant("a:seed=0"), parse_variant("b:seed=0")]
    with pytest.raises(ValueError, match=r"already holds the run\(s\) of b; choose another --out"):
        run_comparison(None, variants, tmp_path, train=lambda cfg: trained.append(cfg) or fake(cfg))
    assert trained == [] and not (tmp_path / "a").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["signal", "kill", "signal-twice"])
def test_an_interrupted_comparison_continues_with_resume_as_if_never_stopped(tmp_path, capsys, monkeypatch, stop):
    """Variant b stops at step 2: by SIGINT (checkpoint written; resumed from it) or by a crash before its
    first checkpoint (started again), or by a second SIGINT at once (nothing saved; its line names the compare
    command, not the run's `rlvr train --resume`). A plain re-run is refused naming --resume; with --resume the
    finished variant a is kept and b's metrics and weights equal those of a comparison never stopped."""
    import os
    import signal

    import rlvr.train.loop as loop_module
    from variant_helpers import weights

    argv = ["compare", "--variants", "grpo", "dr_grpo", *set_args([*TINY, "train.steps=4", "checkpoint.every=2"])]
    assert main([*argv, "--out", str(tmp_path / "full")]) == 0
    real_save = loop_module.save_checkpoint

    def stop_b_at_step_2(run_dir, step, *args, **kwargs):
        if Path(run_dir).name == "dr_grpo" and step == 2:
            if stop == "kill":
                raise KeyboardInterrupt  # nothing saved: no checkpoint yet
            os.kill(os.getpid(), signal.SIGINT)  # the guard saves this step's checkpoint, then stops
            if stop == "signal-twice":
                os.kill(os.getpid(), signal.SIGINT)  # stop now: nothing saved
        return real_save(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(loop_module, "save_checkpoint", stop_b_at_step_2)
    cut = tmp_path / "cut"
    capsys.readouterr()
    assert main([*argv, "--out", str(cut)]) == (128 + signal.SIGINT if stop == "signal" else 130)
    err = capsys.readouterr().err
    if stop == "signal":
        assert "SIGINT at step 2" in err and "the same `rlvr compare` command and --resume" in err
    if stop == "signal-twice":  # the compare's command, not the run's `rlvr train --resume`
        assert err == ("rlvr compare: interrupted: SIGINT again: stopped at once, mid-step. Continue with the same "
                       "`rlvr compare` command and --resume\n")
    monkeypatch.setattr(loop_module, "save_checkpoint", real_save)
    assert (cut / "grpo" / "final_model").is_dir() and not (cut / "dr_grpo" / "final_model").exists()
    a_before = (cut / "grpo" / "metrics.jsonl").read_text()

    assert main([*argv, "--out", str(cut)]) == 2
    assert "add --resume" in capsys.readouterr().err
    assert main([*argv, "--out", str(cut), "--resume"]) == 0
    for label in ("grpo", "dr_grpo"):
        assert (cut / label / "metrics.jsonl").read_text() == (tmp_path / "full" / label / "metrics.jsonl").read_text()
        a, b = weights(cut / label / "final_model"), weights(tmp_path / "full" / label / "final_model")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (cut / "grpo" / "metrics.jsonl").read_text() == a_before  # the finished variant was not trained again
    assert (cut / "summary.md").read_text() == (tmp_path / "full" / "summary.md").read_text()
