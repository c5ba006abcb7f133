"""Synchronous in one process vs asynchronous on Ray (1 rollout worker + 1 learner, max_staleness 1),
on the demo's task (sort 4 digits, sparse reward, demo.yaml), from the same SFT warm start; then Ray's
own overhead per step: moving a 256-completion batch through the object store, and one weight sync
(learner -> object store -> rollout worker).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_async.py --steps 600   # the full demo
    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_async.py --steps 60    # a shorter run

Prints wall-clock seconds of each run (training only: the runs evaluate only at the start and the
end), the held-out greedy and sampled accuracy at the end, the ratio, and the load average, since
other processes on a shared machine change wall-clock numbers.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import ray
import torch

from rlvr.config import load_config
from rlvr.distributed.ray_roles import RemoteWeights
from rlvr.distributed.run import train_distributed
from rlvr.distributed.workers import LearnerWorker, RolloutWorker
from rlvr.tasks import get_task
from rlvr.train.loop import train
from rlvr.train.setup import local_roles, start_model


def _config(out: Path, steps: int, warm: Path | None, extra: list[str]):
    base = [f"out_dir={out}", f"train.steps={steps}", "eval.every=0", "checkpoint.every=0", "log.progress=false",
            "log.plots=false", "log.tensorboard=false"]
    if warm is not None:
        base += [f"model.path={warm}", "sft.steps=0"]
    return load_config("demo", base + extra)


def _timed(fn, cfg) -> tuple[float, dict]:
    tic = time.perf_counter()
    result = fn(cfg)
    return time.perf_counter() - tic, result.final_eval


def _overhead(cfg, warm: Path, repeats: int = 5) -> dict[str, float]:
    """Seconds per step that Ray adds: a batch into a learner actor, weights from it into a worker."""
    learner, rollout = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm, warm)
    batch = rollout.collect(1)
    remote_learner = ray.remote(LearnerWorker).options(num_cpus=1).remote(cfg, warm, warm, 0, 1, ("", 0))
    worker = ray.remote(RolloutWorker).options(num_cpus=1).remote(cfg, warm)
    ray.get([remote_learner.state_dict.remote(), worker.state_dict.remote()])
    out = {"batch_transfer_s": [], "weight_sync_s": []}
    for _ in range(repeats):
        tic = time.perf_counter()
        ray.get(remote_learner.logprobs.remote(ray.put(batch)))
        mid = time.perf_counter()
        ray.get(remote_learner.logprobs.remote(batch))  # the same call without Ray: compute only
        out["batch_transfer_s"].append(max(0.0, (mid - tic) - (time.perf_counter() - mid)))
        tic = time.perf_counter()
        ray.get(worker.load_weights.remote(RemoteWeights(remote_learner.weights.remote()).ref, 0))
        out["weight_sync_s"].append(time.perf_counter() - tic)
    size = sum(t.numel() * t.element_size() for _, t in learner.named_weights())
    return {k: sorted(v)[len(v) // 2] for k, v in out.items()} | {"weights_mb": size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--out", default="runs/bench_async")
    args = parser.parse_args()
    out = Path(args.out)
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}")
    sft_cfg = _config(out / "sft", args.steps, None, [])
    warm = start_model(sft_cfg, out / "sft", get_task(sft_cfg.task.name, **sft_cfg.task.options))
    sync_s, sync_eval = _timed(train, _config(out / "sync", args.steps, warm, []))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    async_cfg = _config(out / "async", args.steps, warm, ["distributed.backend=ray", "rollout.max_staleness=1",
                                                          "algorithm.is_cap=2.0"])
    async_s, async_eval = _timed(train_distributed, async_cfg)
    overhead = _overhead(async_cfg, warm)
    ray.shutdown()
    for name, seconds, final in (("sync, 1 process", sync_s, sync_eval), ("async k=1, Ray 1+1", async_s, async_eval)):
        print(f"{name:20s} {seconds:7.1f} s  greedy acc {final['eval/greedy_accuracy']:.3f}  "
              f"sampled acc {final['eval/sampled_accuracy']:.3f}")
    print(f"wall-clock ratio sync / async: {sync_s / async_s:.2f} ({args.steps} steps)")
    print("Ray overhead per step: " + ", ".join(f"{k} {v:.4f}" for k, v in overhead.items()))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
