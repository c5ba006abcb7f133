"""What a resume may change, a run stopped before its first checkpoint, and models a failed start left."""

import json
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.tasks import get_task
from rlvr.train.loop import train
from rlvr.train.setup import BUILT_WITH, start_model
from rlvr.commands.grammar import set_args


def _weights(folder):
    return load_file(str(folder / "model.safetensors"))


def _built_here(tmp_path, name, **sections):
    """A config whose run builds its tiny model and warm start in its own folder (no model.path)."""
    cfg = {"seed": 0, "out_dir": str(tmp_path / name), "threads": 1, "model": {"tiny_preset": "test"},
           "task": {"name": "sort", "options": {"length": 4, "reward": "positional"}, "train_size": 500,
                    "eval_size": 16},
           "sft": {"steps": 5, "batch_size": 8, "lr": 3e-3}, "rollout": {"max_new_tokens": 10},
           "train": {"steps": 3, "batch_size": 16, "group_size": 4}, "eval": {"every": 2, "samples": 2},
           "checkpoint": {"every": 2}, "log": {"progress": False}, **sections}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("override, words", [
    ("seed=5", "seed 0 -> 5"),
    ("train.batch_size=32", "train.batch_size 16 -> 32"),
    ("optim.lr=0.05", "optim.lr 0.0003 -> 0.05"),
    ("task.options={length: 5, reward: positional}", "task.options.length 4 -> 5"),
    ("algorithm.advantage=rloo", "algorithm.advantage 'grpo' -> 'rloo'"),
    ("train.steps=1", "train.steps=1 is below the checkpoint's step 2"),
])
def test_a_resume_refuses_changes_to_the_run_and_keeps_its_config(config_factory, override, words, capsys):
    """`--resume --set seed=5` (or batch size, lr, task, algorithm) exited 0 and wrote the new value into
    config.yaml as if the whole run had used it; an algorithm change failed inside the optimizer."""
    path = config_factory("run", train={"steps": 2})
    cfg = load_config(path)
    train(cfg)
    saved = cfg.out_dir
    before = open(f"{saved}/config.yaml").read()
    capsys.readouterr()
    assert main(["train", "--resume", saved, "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert open(f"{saved}/config.yaml").read() == before


def test_a_resume_may_change_how_a_run_logs_evaluates_and_how_long_it_goes(config_factory, capsys):
    path = config_factory("run", train={"steps": 2})
    train(load_config(path))
    run_dir = load_config(path).out_dir
    assert main(["train", "--resume", run_dir, *set_args(["train.steps=3", "eval.every=3", "log.plots=false",
                                                          "checkpoint.keep=1", "threads=1"])]) == 0
    assert yaml.safe_load(open(f"{run_dir}/config.yaml"))["train"]["steps"] == 3


def test_resume_or_start_starts_again_a_run_stopped_before_its_first_checkpoint(tmp_path):
    """kill -9 before the first checkpoint left metrics and no checkpoint: --resume said "use
    --resume-or-start", which said "already holds a run; resume it with --resume" (and a plain run the same).
    Now --resume-or-start clears the run's logs and starts again, equal to a run never stopped; the warm
    start it built is reused (built from the same settings)."""
    train(load_config(_built_here(tmp_path, "full", checkpoint={"every": 0})))
    train(load_config(_built_here(tmp_path, "cut", checkpoint={"every": 0})))
    run_dir = tmp_path / "cut"
    for gone in ("checkpoints", "final_model"):  # as a kill -9 after step 2's record, before any checkpoint
        shutil.rmtree(run_dir / gone)
    warm = (run_dir / "sft_model" / "model.safetensors").stat().st_mtime_ns
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert main(["train", str(tmp_path / "cut.yaml"), "--resume-or-start"]) == 0
    assert (run_dir / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()
    a, b = _weights(run_dir / "final_model"), _weights(tmp_path / "full" / "final_model")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (run_dir / "sft_model" / "model.safetensors").stat().st_mtime_ns == warm


def test_resume_or_start_resumes_from_step_folders_when_latest_is_missing(tmp_path, caplog, capsys):
    """A crash between a checkpoint's rename and the write of `latest` (or a deleted pointer) left step folders
    and no `latest`: --resume-or-start said "stopped before its first checkpoint; started again" and trained the
    run over from step 0. Now it resumes from the newest intact step folder, warns once, and ends where the
    uninterrupted run ended."""
    train(load_config(_built_here(tmp_path, "run")))
    run_dir = tmp_path / "run"
    full = _weights(run_dir / "final_model")
    for gone in ("final_model", "checkpoints/step_000003", "checkpoints/latest"):  # a crash in step 3
        path = run_dir / gone
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    kept = (run_dir / "checkpoints" / "step_000002" / "state.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", str(tmp_path / "run.yaml"), "--resume-or-start"]) == 0
    assert "started again" not in capsys.readouterr().out
    warnings = [r.getMessage() for r in caplog.records if "is missing" in r.getMessage()]
    assert len(warnings) == 1 and "resuming from the newest complete checkpoint, step_000002" in warnings[0]
    assert (run_dir / "checkpoints" / "step_000002" / "state.pt").stat().st_mtime_ns == kept  # not trained again
    resumed = _weights(run_dir / "final_model")
    assert all(torch.equal(full[k], resumed[k]) for k in full)


def test_a_failed_starts_warm_start_is_rebuilt_when_the_settings_changed(tmp_path):
    """A start that failed after the SFT warm start left sft_model/; a re-run with other sft settings used
    it silently (config.yaml said sft.steps 1, the weights were the 5-step model's)."""
    path = _built_here(tmp_path, "run")
    run_dir = tmp_path / "run"
    start_model(load_config(path), run_dir, get_task("sort", length=4))  # what a start failing after it leaves
    five = _weights(run_dir / "sft_model")
    assert main(["train", str(path), "--set", "sft.steps=1", "--set", "train.steps=1"]) == 0
    assert json.loads((run_dir / "sft_model" / BUILT_WITH).read_text())["sft"]["steps"] == 1
    one = _weights(run_dir / "sft_model")
    assert any(not torch.equal(five[k], one[k]) for k in five)


def test_lora_target_modules_are_checked_before_any_work(tmp_path, capsys):
    path = _built_here(tmp_path, "run")
    assert main(["train", str(path), "--set", "model.lora.r=4",
                 "--set", "model.lora.target_modules=[nosuch, q_proj]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.lora.target_modules: ['nosuch']" in err and "q_proj" in err
    assert not (tmp_path / "run").exists()


def test_a_run_stopped_by_a_signal_draws_its_plots(tmp_path, sigint_at_step):
    """log.plots said "redrawn at every evaluation", but the plots were drawn only when a run finished: one
    stopped by Ctrl-C had none. They are drawn at the end and at a signal's stop (the help says so)."""
    from rlvr.train.guard import Interrupted

    sigint_at_step(2)
    cfg = load_config(_built_here(tmp_path, "run", sft={"steps": 0}, train={"steps": 4, "batch_size": 16,
                                                                            "group_size": 4},
                                  log={"progress": False, "plots": True, "report_to": []}))
    with pytest.raises(Interrupted):
        train(cfg)
    assert list((tmp_path / "run" / "plots").glob("*.png"))


def test_a_run_with_relative_paths_resumes_from_any_folder(tmp_path, warm_model, monkeypatch, capsys):
    """config.yaml kept model.path and out_dir as given: `rlvr train --resume /abs/RUN` from another folder
    read `runs/...` from there ("model.path: no Hugging Face model folder"). The saved config holds absolute
    paths; the resumed run equals one never stopped; the original relative config still resumes where it ran."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copytree(warm_model, work / "models" / "warm")
    monkeypatch.chdir(work)
    settings = yaml.safe_load(_built_here(tmp_path, "x").read_text())
    settings.pop("sft")
    relative = {**settings, "model": {"path": "models/warm"}, "out_dir": "runs/a", "train": {**settings["train"],
                                                                                               "steps": 2}}
    (work / "a.yaml").write_text(yaml.safe_dump(relative))
    assert main(["train", "a.yaml"]) == 0
    saved = yaml.safe_load((work / "runs/a/config.yaml").read_text())
    assert saved["model"]["path"] == str(work / "models/warm") and saved["out_dir"] == str(work / "runs/a")
    (work / "b.yaml").write_text(yaml.safe_dump({**relative, "out_dir": "runs/b", "train": {**relative["train"],
                                                                                             "steps": 3}}))
    assert main(["train", "b.yaml"]) == 0  # the same run, never stopped
    monkeypatch.chdir(elsewhere)
    assert main(["train", "--resume", str(work / "runs/a"), "--set", "train.steps=3"]) == 0, capsys.readouterr().err
    resumed, whole = _weights(work / "runs/a/final_model"), _weights(work / "runs/b/final_model")
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)
    monkeypatch.chdir(work)
    assert main(["train", "a.yaml", "--set", "train.steps=4", "--resume-or-start"]) == 0, capsys.readouterr().err
