"""SIGINT (Ctrl-C: the whole process group) or SIGTERM (`kill PID`: the driver alone) to the driver of a
Ray run: a checkpoint at the end of the step under way, exit code 128 + signal, every process of the
run's Ray instance gone, and `rlvr train --resume` in a fresh driver then writes what an uninterrupted
run writes, synchronous and asynchronous. A SIGTERM before the first step exits at once, with 143 too."""

import os
import signal
import subprocess
import sys
import time

import psutil  # Ray's own dependency (it ships a copy)
import pytest

from ray_helpers import (ENV, ROOT, assert_same_run, latest_step, ray_sections, resumable_config, run_rlvr, spawn_rlvr,
                         tiny_config, write_config)
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


# `rlvr train CONFIG`, SIGTERM to itself while the roles are placed (Ray started, no step yet); prints the
# pids of its Ray instance first
_SIGTERM_IN_SETUP = """
import os, signal, sys, time
import psutil
import rlvr.distributed.run as ray_run
from rlvr.cli import main

def placing(*args):
    print(*(p.pid for p in psutil.Process().children(recursive=True)), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)

ray_run.ray_roles = placing
sys.exit(main(["train", sys.argv[1]]))
"""


def test_sigterm_before_the_first_step_exits_143_and_stops_ray(tmp_path, warm_model):
    cfg = write_config(tmp_path / "run.yaml", tiny_config(tmp_path / "run", warm_model, distributed=ray_sections()))
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_IN_SETUP, str(cfg)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stderr
    pids = [int(pid) for pid in proc.stdout.split()]  # GCS, raylet, agents (no actor was placed)
    assert pids
    ray_processes = []
    for pid in pids:
        try:
            ray_processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:  # ended already
            pass
    _assert_all_end(ray_processes)
