"""Runs protect themselves: NaN/inf updates are skipped and counted, too many in a row stop the run,
a failed write says where, collapse is warned about live, and SIGINT/SIGTERM checkpoint then exit."""

from __future__ import annotations

import errno
import json
import math
import signal
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.algorithms.optim import clip_gradients
from rlvr.train.guard import REWARN_GAP, SKIPPED, RunGuard, RunStopped, StoppedAtOnce, continue_hint, finite_step
from rlvr.train.loop import train
from rlvr.train.preflight import check_checkpoint
from rlvr.train.setup import prepare_run

TINY = ["model.tiny_preset=test", "task.options={length: 3}", "task.train_size=64", "task.eval_size=4",
        "train.steps=3", "train.batch_size=8", "train.group_size=4", "rollout.max_new_tokens=6",
        "eval.samples=0", "eval.every=0", "log.progress=false", "log.report_to=[]", "log.plots=false",
        "checkpoint.every=1", "checkpoint.keep=3", "threads=1", "train.mini_batch_size=4",
        "train.zero_advantage_rows=train"]  # the poisoned loss runs on every row, also those of advantage 0


def tiny(tmp_path, *sets):
    return load_config(None, [*TINY, *sets, f"out_dir={tmp_path / 'run'}"])


def _params(*grads):
    params = [torch.nn.Parameter(torch.zeros(len(g))) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g, dtype=torch.float32)
    return params


def test_grad_norm_and_finite_step_by_hand():
    assert clip_gradients(_params([3.0], [4.0]), 0.0).item() == pytest.approx(5.0)
    clipped = _params([3.0], [4.0])
    assert clip_gradients(clipped, 1.0).item() == pytest.approx(5.0)  # the norm before clipping
    assert clipped[0].grad.item() == pytest.approx(0.6, rel=1e-5)
    assert finite_step([torch.tensor(1.0)], torch.tensor(5.0))
    assert not finite_step([torch.tensor(1.0), torch.tensor(math.nan)], torch.tensor(5.0))
    assert not finite_step([torch.tensor(1.0)], clip_gradients(_params([1.0, math.inf]), 0.0))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=6), st.integers(0, 5),
       st.sampled_from([math.nan, math.inf, -math.inf]))
def test_one_nonfinite_gradient_entry_blocks_the_step(values, where, bad):
    assert finite_step([torch.tensor(0.0)], clip_gradients(_params(values), 0.0))
    values = list(values)
    values[where % len(values)] = bad
    assert not finite_step([torch.tensor(0.0)], clip_gradients(_params(values), 0.0))


def _poison_loss(run, steps):
    """The objective's loss is NaN at the given RL steps (by the batch the Learner is given)."""
    loss, current = run.learner.objective.loss, {"step": 0}
    update = run.learner.update

    def poisoned(*args, **kwargs):
        value, metrics = loss(*args, **kwargs)
        return (value * math.nan if current["step"] in steps else value), metrics

    def tracked(batch):
        current["step"] = batch.step
        return update(batch)

    run.learner.objective.loss = poisoned
    run.learner.update = tracked


def test_nonfinite_update_is_skipped_and_counted(tmp_path):
    run = prepare_run(tiny(tmp_path, "train.steps=2"))
    _poison_loss(run, {2})
    steps_before = run.learner.scheduler.last_epoch
    train(run.cfg, run=run)
    rows = [r for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    records = {json.loads(r)["step"]: json.loads(r) for r in rows}
    assert records[1][SKIPPED] == 0 and records[2][SKIPPED] == 2  # two minibatches of 4, both skipped
    assert run.learner.scheduler.last_epoch == steps_before + 2  # step 1 only: 2 optimizer steps
    after = run.learner.policy.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    adam_steps = {int(state["step"]) for state in run.learner.optimizer.state.values()}
    assert adam_steps == {2}  # the NaN step left the optimizer's moments alone too
    step1 = load_file(str(tmp_path / "run/checkpoints/step_000001/model/model.safetensors"))
    step2 = load_file(str(tmp_path / "run/checkpoints/step_000002/model/model.safetensors"))
    assert all(torch.equal(step1[k], step2[k]) for k in step1)  # step 2 applied nothing


def test_nonfinite_steps_in_a_row_stop_the_run_keeping_the_last_checkpoint(tmp_path):
    run = prepare_run(tiny(tmp_path, "train.steps=6", "train.max_nonfinite_steps=2"))
    _poison_loss(run, {3, 4, 5, 6})
    with pytest.raises(RunStopped, match="NaN/inf in 2 updates in a row"):
        train(run.cfg, run=run)
    assert latest_checkpoint(tmp_path / "run").name == "step_000003"
    check_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert not (tmp_path / "run" / "final_model").exists()


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos "
                                                "64 vs 0: PytorchStreamWriter failed writing file: file write failed")])
def test_disk_full_at_a_checkpoint_stops_with_one_line_and_keeps_the_last(tmp_path, monkeypatch, error):
    cfg = tiny(tmp_path)
    real_save, calls = torch.save, []

    def full_disk(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise error
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr("rlvr.train.checkpoint.torch.save", full_disk)
    with pytest.raises(RunStopped) as stopped:
        train(cfg)
    message = str(stopped.value)
    assert message.startswith("no space left on device while writing ") and "--resume" in message
    assert latest_checkpoint(tmp_path / "run").name == "step_000001"
    check_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert not list((tmp_path / "run" / "checkpoints").glob(".step_*"))  # no half-written debris


def test_other_write_errors_name_the_path(tmp_path):
    guard = RunGuard(tmp_path, 3)
    with pytest.raises(RunStopped, match=r"write error \(.*Read-only.*\) while writing /x/metrics.jsonl"):
        with guard.writing(tmp_path / "ignored"):
            raise OSError(errno.EROFS, "Read-only file system", "/x/metrics.jsonl")


def test_collapse_guard_warns_once_a_finding_held_two_steps():
    guard = RunGuard("run", 3)
    entropy = [2.0, 2.1, 1.9, 2.0, 2.0, 0.05, 0.04, 1.9]
    warned = {step: guard.collapse_warnings(step, {"entropy": e, "accuracy": 0.2})
              for step, e in enumerate(entropy, 1)}
    assert [s for s, lines in warned.items() if lines] == [7]  # held at steps 6 and 7
    assert "entropy collapse" in warned[7][0]
    kl = RunGuard("run", 3)
    lines = [kl.collapse_warnings(s, {"kl": v}) for s, v in enumerate([0.01, 0.01, 0.012, 0.01, 0.9, 0.01, 0.8, 0.9], 1)]
    assert [s for s, w in enumerate(lines, 1) if w] == [8]  # the lone spike at step 5 is left to `rlvr doctor`
    assert "kl spikes" in lines[-1][0]
    again = RunGuard("run", 3)  # a collapse that stays: one warning; back after REWARN_GAP quiet steps: another
    entropy = [2.0] * 20 + [0.05] * 5 + [1.9] * REWARN_GAP + [0.05, 0.05]
    warned = [s for s, e in enumerate(entropy, 1) if again.collapse_warnings(s, {"entropy": e, "accuracy": 0.2})]
    assert warned == [22, len(entropy)]


def test_rl_rollout_metrics_include_the_flat_group_share(tmp_path):
    train(tiny(tmp_path, "train.steps=1"))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0.0 <= row["flat_group_share"] <= 1.0 and row[SKIPPED] == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_writes_a_checkpoint_at_the_step_boundary(tmp_path, rlvr, signum, code):
    from rlvr.config import save_config

    cfg = tiny(tmp_path, "train.steps=500", "checkpoint.every=1000")
    save_config(cfg, tmp_path / "c.yaml")
    proc = rlvr.spawn("train", str(tmp_path / "c.yaml"))
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while (not metrics.exists() or metrics.read_text().count("\n") < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signum)
    assert proc.wait(timeout=240) == code  # a guard against a hang, not a bound on speed (a busy machine)
    step = int(latest_checkpoint(tmp_path / "run").name.split("_")[1])
    assert 2 <= step < 500
    check_checkpoint(latest_checkpoint(tmp_path / "run"))
    resumed = rlvr("train", "--resume", str(tmp_path / "run"), "--set", f"train.steps={step + 1}")
    assert resumed.returncode == 0, resumed.stderr
    assert latest_checkpoint(tmp_path / "run").name == f"step_{step + 1:06d}"


@pytest.mark.parametrize("every, hint", [
    (1, "Resume it from its last checkpoint: rlvr train --resume {run}"),
    (0, "It has no checkpoint yet: start it again with --resume-or-start ({run})")], ids=["checkpointed", "none-yet"])
def test_a_second_ctrl_c_stops_at_once_and_says_how_to_continue(tmp_path, capsys, monkeypatch, every, hint):
    """The second SIGINT stopped the run mid-step with a bare `rlvr train: interrupted`: no run folder, no way
    on. Its one line names the run and the command that continues it, which then finishes the run."""
    import os

    from rlvr.cli import main
    from rlvr.config import save_config

    real_after_update = RunGuard.after_update

    def ctrl_c_twice_in_step_2(guard, step, metrics):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the guard: checkpoint at the end of this step
            os.kill(os.getpid(), signal.SIGINT)  # the user: stop now
        return real_after_update(guard, step, metrics)

    monkeypatch.setattr(RunGuard, "after_update", ctrl_c_twice_in_step_2)
    save_config(tiny(tmp_path, f"checkpoint.every={every}"), tmp_path / "c.yaml")
    capsys.readouterr()
    assert main(["train", str(tmp_path / "c.yaml")]) == 130
    run = tmp_path / "run"
    expected = f"rlvr train: interrupted: SIGINT again: stopped at once, mid-step. {hint.format(run=run)}\n"
    assert capsys.readouterr().err == expected
    assert latest_checkpoint(run) == (run / "checkpoints" / "step_000001" if every else None)
    monkeypatch.setattr(RunGuard, "after_update", real_after_update)
    assert main(["train", "--resume", str(run), *["--resume-or-start"] * (not every)]) == 0
    assert (run / "final_model").is_dir() and latest_checkpoint(run).name == "step_000003"


def test_a_pipeline_names_its_own_command_after_a_second_ctrl_c(tmp_path):
    err = StoppedAtOnce("SIGINT again: stopped at once, mid-step", continue_hint(tmp_path, failed=False))
    assert str(err).endswith(f"start it again with --resume-or-start ({tmp_path})")
    assert isinstance(err, KeyboardInterrupt)
    assert str(err.continued_with("the same `rlvr compare` command and --resume")) == (
        "SIGINT again: stopped at once, mid-step. Continue with the same `rlvr compare` command and --resume")


def test_samples_jsonl_rows_carry_the_reward_components(tmp_path):
    train(tiny(tmp_path, "train.steps=1", "task.options={length: 3, reward: inclusion}"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert rows and all({"task/inclusion", "task/ordered_pairs"} <= set(r) for r in rows)
    assert all(0.0 <= r["task/inclusion"] <= 1.0 for r in rows)
    assert all(r["reward"] == pytest.approx(0.5 * r["task/inclusion"] + 0.5 * r["task/ordered_pairs"]) for r in rows)


def test_run_warnings_are_one_unwrapped_line_or_a_log_record(caplog):
    import io

    from rlvr.logging.progress import TrainProgress

    stream, message = io.StringIO(), "step 6: warning: entropy collapse: " + "x" * 200
    with TrainProgress(10, stream=stream) as progress:
        progress.warn(message)
    assert stream.getvalue().count(message) == 1  # not hard-wrapped at the console's width, said once
    with TrainProgress(10, enabled=False) as progress:
        progress.warn(message)
    assert caplog.records[-1].getMessage() == message
