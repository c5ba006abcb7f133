"""Helpers of the Ray tests (imported by name; `conftest` is ambiguous across test folders)."""

import importlib.util
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file

from rlvr.jsonl import read_jsonl

# the train tests' tiny config and warm-started model, shared rather than copied
_spec = importlib.util.spec_from_file_location("train_conftest", Path(__file__).parents[1] / "train" / "conftest.py")
_train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_train)
tiny_config, write_config, warm_model = _train.tiny_config, _train.write_config, _train.warm_model
run_rlvr, spawn_rlvr = _train._rlvr, _train._spawn  # `rlvr ...` in a fresh interpreter (and in the background)
ROOT, ENV = _train.ROOT, _train.ENV  # where, and with which environment, they run
latest_step = _train.latest_step  # the step of the newest checkpoint of a run in progress


def ray_sections(**distributed) -> dict:
    """Fractional CPUs, so a learner and two rollout workers fit in the 2-CPU test cluster."""
    return {"backend": "ray", "rollout_cpus": 0.5, "learner_cpus": 0.5, **distributed}


def resumable_config(run_dir, model, k: int) -> dict:
    """8 steps of a Ray run at staleness `k`, a checkpoint every step, held-out samples every 3 steps: the
    run that the interruption tests stop and resume, and compare with the same run left alone."""
    return tiny_config(run_dir, model, train={"steps": 8, "batch_size": 16, "group_size": 4},
                       rollout={"max_staleness": k}, algorithm={"is_cap": 2.0},
                       checkpoint={"every": 1, "keep": 2}, eval={"every": 3, "samples": 2},
                       distributed=ray_sections())


def assert_same_run(run_dir: Path, full: Path, k: int) -> None:
    """`run_dir`, interrupted and resumed, wrote what the uninterrupted `full` wrote: every step once,
    byte-identical metrics and held-out samples, bit-equal final weights."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(9))
    assert {r["staleness"] for r in rows[1:]} == ({0.0, 1.0} if k else {0.0})
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert (run_dir / name).read_text() == (full / name).read_text(), name
    a = load_file(str(full / "final_model" / "model.safetensors"))
    b = load_file(str(run_dir / "final_model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def same_batch(a, b) -> None:
    """Two scored batches are the same: step, policy version, prompts, tokens, sampler log-probs, rewards."""
    assert (a.step, a.version, a.prompts, a.completion_ids) == (b.step, b.version, b.prompts, b.completion_ids)
    assert a.sampler_logprobs == b.sampler_logprobs and a.correct == b.correct
    torch.testing.assert_close(a.rewards, b.rewards)


@contextmanager
def cpu_hog(processes: int, seconds: float):
    """`processes` busy loops at the test's own priority for `seconds` or the block's duration, whichever ends
    first: the machine as loaded as a CI runner beside other jobs (Ray's restarts and waits take several times
    longer). Bounded, so that a test beside it stays a test of seconds, however slow the machine already is."""
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def busy(factor: int = 2) -> int:
    """How many busy loops load every core `factor` times over."""
    return factor * (os.cpu_count() or 2)
