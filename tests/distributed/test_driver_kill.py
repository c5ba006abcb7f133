"""kill -9 of the driver of a Ray run, then `rlvr train --resume` in a fresh driver (which starts a
fresh Ray instance): the same metrics, held-out samples and final weights as a run never interrupted,
synchronous and asynchronous (the checkpoint holds the batch already sampled for the next step)."""

import signal
import time

import pytest

from ray_helpers import assert_same_run, latest_step, resumable_config, run_rlvr, spawn_rlvr, write_config

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("k", [0, 1], ids=["sync", "async_k1"])
def test_kill_9_of_the_driver_then_resume_equals_uninterrupted(uninterrupted, tmp_path, warm_model, k):
    full = uninterrupted(k)

    run_dir = tmp_path / "killed"
    proc = spawn_rlvr("train", str(write_config(tmp_path / "killed.yaml", resumable_config(run_dir, warm_model, k))))
    deadline = time.monotonic() + 240
    while latest_step(run_dir) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= latest_step(run_dir) < 8 and not (run_dir / "final_model").exists()

    resumed = run_rlvr("train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(run_dir, full, k)
