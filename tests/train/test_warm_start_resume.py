"""The SFT warm start checkpoints and resumes like the RL stage: a signal during it writes a checkpoint
(RUN/sft/checkpoints/step_NNNNNN, the RL layout) and `--resume` goes on inside the warm start, ending with the same
weights, bit for bit, as a run never stopped, and the same RL run after it. Before, SIGINT there said
"interrupted", wrote nothing, and `--resume` found nothing to resume."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config, save_config
from rlvr.train.checkpoint import WARM_START, latest_checkpoint, load_state
from rlvr.train.guard import Interrupted
from rlvr.train.loop import train
from rlvr.train.setup import prepare_run

TINY = ["model.tiny_preset=test", "task.options={length: 3}", "task.train_size=64", "task.eval_size=4",
        "sft.steps=12", "sft.batch_size=8", "train.steps=2", "train.batch_size=8", "train.group_size=4",
        "rollout.max_new_tokens=6", "eval.samples=0", "eval.every=0", "log.progress=false", "log.report_to=[]",
        "log.plots=false", "checkpoint.every=5", "checkpoint.keep=2", "threads=1"]


def _config(run_dir, *sets):
    return load_config(None, [*TINY, *sets, f"out_dir={run_dir}"])


def _weights(folder):
    return load_file(str(folder / "model.safetensors"))


def _same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _sigint_at_sft_step(at: int):
    """An on_sft callback: SIGINT during SFT step `at` (after its loss, before its end), as a Ctrl-C there."""
    def on_sft(step: int, loss: float) -> None:
        if step == at:
            os.kill(os.getpid(), signal.SIGINT)

    return on_sft


def test_sigint_mid_sft_writes_a_checkpoint_and_the_resume_is_exact(tmp_path, capsys):
    full = train(_config(tmp_path / "full")).run_dir
    run = tmp_path / "cut"
    with pytest.raises(Interrupted) as stopped:
        prepare_run(_config(run), on_sft=_sigint_at_sft_step(7))
    assert str(stopped.value) == (f"SIGINT at SFT step 7: checkpoint written in {run}; continue with "
                                  f"`rlvr train --resume {run}`") and stopped.value.exit_code == 130
    checkpoint = latest_checkpoint(run / WARM_START)
    assert checkpoint.name == "step_000007" and (checkpoint / "model" / "model.safetensors").is_file()
    assert load_state(checkpoint)["trainer"]["step"] == 7
    assert sorted(p.name for p in (run / WARM_START / "checkpoints").glob("step_*")) == ["step_000005", "step_000007"]
    assert not (run / "sft_model").exists() and not (run / "metrics.jsonl").exists()
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    assert _same_weights(_weights(run / "sft_model"), _weights(full / "sft_model"))
    assert _same_weights(_weights(run / "final_model"), _weights(full / "final_model"))
    assert (run / "metrics.jsonl").read_text() == (full / "metrics.jsonl").read_text()
    assert not (run / WARM_START).exists()  # the warm start is its model now


def test_a_sigint_in_the_warm_starts_last_step_checkpoints_it_and_the_resume_goes_on_to_rl(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(Interrupted, match="^SIGINT at SFT step 12: checkpoint written"):
        prepare_run(_config(run), on_sft=_sigint_at_sft_step(12))
    assert latest_checkpoint(run / WARM_START).name == "step_000012" and not (run / "sft_model").exists()
    assert main(["train", "--resume", str(run)]) == 0 and (run / "final_model").is_dir()


def test_a_warm_start_of_other_settings_is_not_resumed(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(Interrupted):
        prepare_run(_config(run), on_sft=_sigint_at_sft_step(6))
    assert main(["train", "--resume", str(run), "--set", "sft.lr=0.01"]) == 2  # a resume changes nothing of the run
    assert latest_checkpoint(run / WARM_START).name == "step_000006"
    seen = []
    prepare_run(_config(run, "sft.lr=0.01", "train.steps=1"), on_sft=lambda step, loss: seen.append(step))
    assert seen[0] == 1 and not (run / WARM_START).exists()  # a start again with other settings: SFT from step 1


@pytest.mark.slow
def test_ctrl_c_during_the_warm_start_of_rlvr_train_is_one_line_and_exit_130(tmp_path, rlvr):
    """The real command, a real SIGINT once the warm start has checkpointed: exit code 130, one line naming the
    command that continues, and that command finishes the run."""
    save_config(_config(tmp_path / "run", "sft.steps=100000", "checkpoint.every=2"), tmp_path / "c.yaml")
    with open(tmp_path / "err", "w") as err:
        proc = rlvr.spawn("train", str(tmp_path / "c.yaml"), stderr=err)
        pointer, deadline = tmp_path / "run" / WARM_START / "checkpoints" / "latest", time.monotonic() + 240
        while not pointer.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    line = (tmp_path / "err").read_text().strip().splitlines()[-1]
    assert line.startswith("rlvr train: stopped: SIGINT at SFT step ") and line.endswith(
        f"continue with `rlvr train --resume {tmp_path / 'run'}`")
    step = int(latest_checkpoint(tmp_path / "run" / WARM_START).name.split("_")[1])
    assert 2 <= step < 100000
    resumed = rlvr("train", "--resume", str(tmp_path / "run"), "--set", f"sft.steps={step + 2}")
    assert resumed.returncode == 2 and "sft.steps" in resumed.stderr  # the warm start's length is the run's
