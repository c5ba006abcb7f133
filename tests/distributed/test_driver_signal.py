"""SIGINT (Ctrl-C: the whole process group) or SIGTERM (`kill PID`: the driver alone) to the driver of a
Ray run: a checkpoint at the end of the step under way, exit code 128 + signal, every process of the
run's Ray instance gone, and `rlvr train --resume` in a fresh driver then writes what an uninterrupted
run writes, synchronous and asynchronous."""

import os
import signal
import time

import psutil  # Ray's own dependency (it ships a copy)
import pytest

from ray_helpers import assert_same_run, latest_step, resumable_config, run_rlvr, spawn_rlvr, write_config
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.preflight import check_checkpoint

pytestmark = pytest.mark.slow


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie has exited: only its parent's wait is missing)."""
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _assert_all_end(processes: list[psutil.Process], within: float = 30) -> None:
    """The run's Ray processes end: its GCS, raylet and agents, and its actors' workers."""
    deadline = time.monotonic() + within
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(processes), [p.name() for p in _alive(processes)]


def _rows(path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.parametrize("k, signum, group", [(0, signal.SIGINT, True), (1, signal.SIGTERM, False)],
                         ids=["sync_sigint_to_group", "async_k1_sigterm"])
def test_a_signal_checkpoints_stops_ray_and_the_resume_equals_uninterrupted(uninterrupted, tmp_path, warm_model,
                                                                            k, signum, group):
    full = uninterrupted(k)

    run_dir, stderr = tmp_path / "signalled", tmp_path / "stderr.txt"
    cfg = {**resumable_config(run_dir, warm_model, k), "checkpoint": {"every": 0, "keep": 2}}  # only the signal's
    with stderr.open("w") as err:  # a session of its own: a process group to send Ctrl-C's SIGINT to
        proc = spawn_rlvr("train", str(write_config(tmp_path / "signalled.yaml", cfg)), stderr=err,
                          start_new_session=True)
    deadline = time.monotonic() + 240
    while _rows(run_dir / "metrics.jsonl") < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # steps 0 (the first evaluation), 1 and 2 logged
    assert proc.poll() is None, f"the run ended before the signal: {stderr.read_text()}"
    ray_processes = psutil.Process(proc.pid).children(recursive=True)
    assert ray_processes
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    assert proc.wait(timeout=120) == 128 + signum, stderr.read_text()

    step = latest_step(run_dir)
    assert 2 <= step < 8 and not (run_dir / "final_model").exists()
    assert _rows(run_dir / "metrics.jsonl") == step + 1  # the checkpoint is the last step logged, at its end
    check_checkpoint(latest_checkpoint(run_dir))
    assert f"{signal.Signals(signum).name} at step {step}: checkpoint written" in stderr.read_text()
    _assert_all_end(ray_processes)

    resumed = run_rlvr("train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(run_dir, full, k)

