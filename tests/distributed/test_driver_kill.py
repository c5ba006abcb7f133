"""kill -9 of the driver of a Ray run, then `rlvr train --resume` in a fresh driver (which starts a
fresh Ray instance): the same metrics, held-out samples and final weights as a run never interrupted,
synchronous and asynchronous (the checkpoint holds the batch already sampled for the next step)."""

import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from ray_helpers import ray_sections, run_rlvr, spawn_rlvr, tiny_config, write_config
from rlvr.config import load_config
from rlvr.distributed.run import train_distributed
from rlvr.jsonl import read_jsonl

pytestmark = pytest.mark.slow


def _config(run_dir, model, k: int) -> dict:
    return tiny_config(run_dir, model, train={"steps": 8, "batch_size": 16, "group_size": 4},
                       rollout={"max_staleness": k}, algorithm={"is_cap": 2.0},
                       checkpoint={"every": 1, "keep": 2}, eval={"every": 3, "samples": 2},
                       distributed=ray_sections())


def _latest_step(run_dir) -> int:
    pointer = run_dir / "checkpoints" / "latest"
    return int(pointer.read_text().split("_")[1]) if pointer.exists() else 0


@pytest.mark.parametrize("k", [0, 1], ids=["sync", "async_k1"])
def test_kill_9_of_the_driver_then_resume_equals_uninterrupted(ray_cluster, tmp_path, warm_model, k):
    full = train_distributed(load_config(None, [], base=_config(tmp_path / "full", warm_model, k))).run_dir

    run_dir = tmp_path / "killed"
    proc = spawn_rlvr("train", str(write_config(tmp_path / "killed.yaml", _config(run_dir, warm_model, k))))
    deadline = time.monotonic() + 240
    while _latest_step(run_dir) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= _latest_step(run_dir) < 8 and not (run_dir / "final_model").exists()

    resumed = run_rlvr("train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(9))
    assert {r["staleness"] for r in rows[1:]} == ({0.0, 1.0} if k else {0.0})
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert (run_dir / name).read_text() == (full / name).read_text(), name
    a = load_file(str(full / "final_model" / "model.safetensors"))
    b = load_file(str(run_dir / "final_model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
