"""Synchronous in one process vs asynchronous on Ray (1 rollout worker + 1 learner, max_staleness 1,
truncated IS with cap 2), on the demo's task (sort 4 digits, sparse reward, configs/demo.yaml, held-out
evaluation every 50 steps), from the same SFT warm start; then Ray's own overhead per step.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_async.py --steps 600   # the full demo
    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_async.py --steps 60    # a shorter run

Prints, for each run: wall-clock seconds from start to end (start-up, Ray's included), training seconds
(the sum of the loop's s_per_step: evaluations out), training seconds until the first evaluation at or
above --target held-out greedy accuracy, the held-out greedy and sampled accuracy at the end, and the
median per-step rollout_s (waiting for the batch), update_s and sync_s (weights to the rollout side).
Then Ray's overhead measured alone: an empty actor call, one 256-completion batch put into the object
store and read by an actor, one weight sync (learner actor -> object store -> rollout actor). And the
load average before and after, since other processes on a shared machine change wall-clock numbers.
The run folders under --out are replaced.
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
from rlvr.distributed.ray_learner import RayLearner
from rlvr.distributed.run import train_distributed
from rlvr.distributed.workers import LearnerWorker, RolloutWorker
from rlvr.jsonl import read_jsonl
from rlvr.tasks import get_task
from rlvr.train.loop import train
from rlvr.train.setup import local_roles, start_model


def _config(out: Path, steps: int, warm: Path | None, extra: list[str]):
    base = [f"out_dir={out}", f"train.steps={steps}", "checkpoint.every=0", "log.progress=false",
            "log.plots=false", "log.report_to=[]"]
    if warm is not None:
        base += [f"model.path={warm}", "sft.steps=0"]
    return load_config("demo", base + extra)


def _run(fn, cfg, target: float) -> dict[str, float]:
    shutil.rmtree(cfg.out_dir, ignore_errors=True)
    tic = time.perf_counter()
    result = fn(cfg)
    wall = time.perf_counter() - tic
    timings = {r["step"]: r for r in read_jsonl(result.run_dir / "timings.jsonl") if "s_per_step" in r}
    evals = [r for r in read_jsonl(result.run_dir / "metrics.jsonl") if "eval/greedy_accuracy" in r]
    reached = next((r["step"] for r in evals if r["eval/greedy_accuracy"] >= target), None)
    out = {"wall_s": wall, "train_s": sum(t["s_per_step"] for t in timings.values()),
           "to_target_s": sum(t["s_per_step"] for s, t in timings.items() if s <= reached) if reached else float("nan"),
           "target_step": reached or float("nan"),
           "greedy": result.final_eval["eval/greedy_accuracy"], "sampled": result.final_eval["eval/sampled_accuracy"]}
    for key in ("rollout_s", "update_s", "sync_s"):
        out[key] = statistics.median(t[key] for t in timings.values())
    return out


@ray.remote(num_cpus=0)
class _Sink:
    def take(self, batch) -> int:
        return len(batch.prompts)

    def ping(self) -> int:
        return 0


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def _overhead(cfg, warm: Path, repeats: int = 9) -> dict[str, float]:
    """Seconds per step that Ray adds, each measured alone (medians)."""
    learner, rollout = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm, warm)
    batch = rollout.collect(1)
    sink = _Sink.remote()
    remote_learner = RayLearner([ray.remote(LearnerWorker).options(num_cpus=1).remote(cfg, warm, warm, 0, 1,
                                                                                       ("", 0))], cfg.out_dir)
    worker = ray.remote(RolloutWorker).options(num_cpus=1).remote(cfg, warm)
    ray.get([sink.ping.remote(), worker.stream_state.remote()])
    size = sum(t.numel() * t.element_size() for _, t in learner.named_weights())
    return {
        "empty_call_s": _median_s(lambda: ray.get(sink.ping.remote()), repeats),
        "batch_put_and_read_s": _median_s(lambda: ray.get(sink.take.remote(ray.put(batch))), repeats),
        "weight_sync_s": _median_s(lambda: ray.get([worker.load_weights.remote(bucket, 0)
                                                    for bucket in remote_learner.named_weights().refs]), repeats),
        "weights_mb": size / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--target", type=float, default=0.9, help="held-out greedy accuracy to reach")
    parser.add_argument("--out", default="runs/bench_async")
    args = parser.parse_args()
    out = Path(args.out)
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}", flush=True)
    sft_cfg = _config(out / "sft", args.steps, None, [])
    warm = start_model(sft_cfg, out / "sft", get_task(sft_cfg.task.name, **sft_cfg.task.options))
    sync = _run(train, _config(out / "sync", args.steps, warm, []), args.target)
    print(f"sync done, load average {os.getloadavg()}", flush=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    async_cfg = _config(out / "async", args.steps, warm, ["distributed.backend=ray", "rollout.max_staleness=1",
                                                          "algorithm.is_cap=2.0"])
    asyn = _run(train_distributed, async_cfg, args.target)
    overhead = _overhead(async_cfg, warm)
    ray.shutdown()
    print(f"{'':20s} {'wall s':>8s} {'train s':>8s} {'to ' + str(args.target) + ' s':>9s} {'at step':>7s} "
          f"{'greedy':>6s} {'sampled':>7s} {'rollout_s':>9s} {'update_s':>8s} {'sync_s':>7s}")
    for name, r in (("sync, 1 process", sync), ("async k=1, Ray 1+1", asyn)):
        print(f"{name:20s} {r['wall_s']:8.1f} {r['train_s']:8.1f} {r['to_target_s']:9.1f} {r['target_step']:7.0f} "
              f"{r['greedy']:6.3f} {r['sampled']:7.3f} {r['rollout_s']:9.4f} {r['update_s']:8.4f} {r['sync_s']:7.4f}")
    print(f"ratio sync / async ({args.steps} steps): wall {sync['wall_s'] / asyn['wall_s']:.2f}, "
          f"train {sync['train_s'] / asyn['train_s']:.2f}, to {args.target}: "
          f"{sync['to_target_s'] / asyn['to_target_s']:.2f}")
    print("Ray overhead (medians): " + ", ".join(f"{k} {v:.4f}" for k, v in overhead.items()))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
