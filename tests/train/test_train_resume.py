"""kill -9 in the middle of a run, `rlvr train --resume`: same metrics and weights as a run that was
never interrupted."""

import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main

pytestmark = pytest.mark.slow

SECTIONS = dict(train={"steps": 8, "batch_size": 16, "group_size": 4}, checkpoint={"every": 1, "keep": 2},
                eval={"every": 3, "samples": 2})


def test_kill_9_then_resume_equals_uninterrupted(config_factory, rlvr, checkpoint_step):
    full = config_factory("full", **SECTIONS)
    done = rlvr("train", str(full))
    assert done.returncode == 0, done.stderr

    killed = config_factory("killed", **SECTIONS)
    run_dir = killed.parent / "killed"
    proc = rlvr.spawn("train", str(killed))
    deadline = time.monotonic() + 240
    while checkpoint_step(run_dir) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= checkpoint_step(run_dir) < 8
    assert not (run_dir / "final_model").exists()

    resumed = rlvr("train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    full_dir = full.parent / "full"
    assert (run_dir / "metrics.jsonl").read_text() == (full_dir / "metrics.jsonl").read_text()
    a = load_file(str(full_dir / "final_model" / "model.safetensors"))
    b = load_file(str(run_dir / "final_model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    samples = [line for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples == (full_dir / "samples.jsonl").read_text().splitlines()


def test_resume_needs_a_run_folder(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run folder" in err
