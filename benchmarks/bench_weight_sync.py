"""One weight sync, learner rank 0 -> N rollout workers on Ray, through the object store and by the
collective broadcast (`distributed.weight_sync`), on the demo's model and on a ~20M one (tiny preset
`bench20m`), all on CPU (gloo).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_weight_sync.py --workers 2 --repeats 9

Timed from the driver: from asking the learner for its weights until every worker has loaded them into
its engine (the object store's loads are waited for with an empty call after them; the collective waits
by itself). Medians over --repeats syncs, after one untimed sync. The model folders under --out are
replaced.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

import ray
import torch

from rlvr.config import load_config
from rlvr.distributed.ray_roles import RayLearner, RayRollout
from rlvr.distributed.workers import LearnerWorker, RolloutWorker
from rlvr.models import make_tiny_model_dir


def _median_sync_s(cfg, model: Path, workers: int, repeats: int) -> tuple[float, float]:
    rank0 = ray.remote(LearnerWorker).options(num_cpus=0.5).remote(cfg, model, model, 0, 1, ("", 0))
    learner = RayLearner([rank0], cfg.out_dir)
    actors = [ray.remote(RolloutWorker).options(num_cpus=0.5).remote(cfg, model) for _ in range(workers)]
    if cfg.distributed.weight_sync == "collective":
        learner.join_weight_group(actors)
    rollout = RayRollout(cfg, actors, learner.named_weights())
    times = []
    for _ in range(repeats + 1):
        tic = time.perf_counter()
        rollout.load_weights(learner.named_weights())
        ray.get([actor.ready.remote() for actor in actors])
        times.append(time.perf_counter() - tic)
    size = sum(t.numel() * t.element_size() for t in ray.get(rank0.weights.remote()).values())
    for actor in [rank0, *actors]:
        ray.kill(actor)
    return statistics.median(times[1:]), size / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--presets", default="test,bench20m", help="rlvr.models.tiny presets (test: the demo's)")
    parser.add_argument("--out", default="runs/bench_weight_sync")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}", flush=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    for preset in args.presets.split(","):
        model = Path(args.out) / preset
        shutil.rmtree(model, ignore_errors=True)
        make_tiny_model_dir(model, arch="qwen2", preset=preset, seed=0)
        for mode in ("object_store", "collective"):
            cfg = load_config("demo", [f"out_dir={Path(args.out) / 'run'}", f"model.path={model}",
                                       "distributed.backend=ray", f"distributed.weight_sync={mode}"])
            seconds, mb = _median_sync_s(cfg, model, args.workers, args.repeats)
            print(f"{preset:9s} {mb:7.2f} MB  {mode:12s} {args.workers} workers: median {seconds * 1000:8.1f} ms",
                  flush=True)
    ray.shutdown()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
