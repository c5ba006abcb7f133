"""One weight sync, learner rank 0 -> N rollout workers on Ray, through the object store and by the
collective broadcast (`distributed.weight_sync`), on the demo's model and on a ~20M one (tiny preset
`bench20m`), all on CPU (gloo): today's layout against yesterday's, side by side.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_weight_sync.py --workers 2 --repeats 9

Each model is synced in float32 as one bucket (`distributed.sync_bucket_mb: 0`: the path before buckets, one
object or one flat buffer per dtype) and in buckets of `--bucket-mb` (whole layers, streamed), in float32 and in
bfloat16 (`model.dtype`: the tensors are sent in the compute dtype). Timed from the driver: from asking the
learner for its weights until every worker has loaded them into its engine (the object store's loads are waited
for with an empty call after them; the collective waits by itself). Medians over --repeats syncs, after one
untimed sync. Memory: the peak resident set of the learner and of the first worker above their resident size
before the first sync (`ru_maxrss`; 0 where the load of the model peaked higher). The model folders under --out
are replaced.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import time
from pathlib import Path

import ray
import torch

from rlvr.config import load_config
from rlvr.distributed.ray_learner import RayLearner
from rlvr.distributed.ray_rollout import RayRollout
from rlvr.distributed.workers import LearnerWorker, RolloutWorker
from rlvr.models import make_tiny_model_dir


def _rss_mib(_actor=None) -> tuple[float, float]:
    """(resident now, peak so far) of the process it runs in, MiB (run in an actor through __ray_call__)."""
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[1]) * resource.getpagesize() / 2**20
    return now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def _median_sync_s(cfg, model: Path, workers: int, repeats: int) -> dict:
    rank0 = ray.remote(LearnerWorker).options(num_cpus=0.5).remote(cfg, model, model, 0, 1, ("", 0))
    learner = RayLearner([rank0], cfg.out_dir)
    actors = [ray.remote(RolloutWorker).options(num_cpus=0.5).remote(cfg, model) for _ in range(workers)]
    if cfg.distributed.weight_sync == "collective":
        learner.join_weight_group(actors)
    before = ray.get([a.__ray_call__.remote(_rss_mib) for a in (rank0, actors[0])])
    rollout = RayRollout(cfg, actors, learner.named_weights())
    times = []
    for _ in range(repeats + 1):
        tic = time.perf_counter()
        rollout.load_weights(learner.named_weights())
        ray.get([actor.ready.remote() for actor in actors])
        times.append(time.perf_counter() - tic)
    after = ray.get([a.__ray_call__.remote(_rss_mib) for a in (rank0, actors[0])])
    buckets = ray.get(rank0.buckets.remote())
    size = sum(torch.Size(shape).numel() * dtype.itemsize for b in buckets for _, shape, dtype in b)
    for actor in [rank0, *actors]:
        ray.kill(actor)
    learner_peak, worker_peak = (max(0.0, peak - now) for (now, _), (_, peak) in zip(before, after))
    return {"seconds": statistics.median(times[1:]), "mb": size / 2**20, "buckets": len(buckets),
            "learner_peak_mib": learner_peak, "worker_peak_mib": worker_peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--presets", default="test,bench20m", help="rlvr.models.tiny presets (test: the demo's)")
    parser.add_argument("--bucket-mb", type=float, default=8.0, help="bucket size of the bucketed syncs")
    parser.add_argument("--out", default="runs/bench_weight_sync")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}", flush=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    layouts = [("float32", 0.0), ("float32", args.bucket_mb), ("bfloat16", args.bucket_mb)]
    print("model     dtype     bucket MB  buckets  MB sent  mode          median ms  learner peak  worker peak")
    for preset in args.presets.split(","):
        model = Path(args.out) / preset
        shutil.rmtree(model, ignore_errors=True)
        make_tiny_model_dir(model, arch="qwen2", preset=preset, seed=0)
        for dtype, bucket_mb in layouts:
            for mode in ("object_store", "collective"):
                cfg = load_config("demo", [f"out_dir={Path(args.out) / 'run'}", f"model.path={model}",
                                           f"model.dtype={dtype}", "distributed.backend=ray",
                                           f"distributed.weight_sync={mode}", f"distributed.sync_bucket_mb={bucket_mb}"])
                r = _median_sync_s(cfg, model, args.workers, args.repeats)
                print(f"{preset:9s} {dtype:9s} {bucket_mb:9.1f} {r['buckets']:8d} {r['mb']:8.2f}  {mode:12s} "
                      f"{r['seconds'] * 1000:10.1f} {r['learner_peak_mib']:10.0f} MiB {r['worker_peak_mib']:8.0f} MiB",
                      flush=True)
    ray.shutdown()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
