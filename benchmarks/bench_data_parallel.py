"""CPU seconds of one data-parallel `update` with rows of advantage 0 left out (`train.zero_advantage_rows:
auto`, the default) against every row trained (`train`), on two Ray learner ranks, interleaved.

    .venv/bin/python benchmarks/bench_data_parallel.py                 # whole-policy ranks, the sort task
    .venv/bin/python benchmarks/bench_data_parallel.py --shard         # FSDP2 ranks
    .venv/bin/python benchmarks/bench_data_parallel.py --steps 22 --learners 2

The config's model is warm-started by its own SFT (built once, as `bench_trl.py` builds it, under
`--work`), so its groups are flat as a run's are (a fifth to two fifths on the sort task with the exact-match
reward, its default here). Each step samples one batch in this process with the warm model (the rollout
keeps it: the flat share stays the warm start's), and the ranks run `update` on it twice, once per mode, in
alternating order; the time of an update is the largest of the ranks' `time.process_time` (CPU seconds of
the rank's process, one torch thread each): the ranks wait for each other at every all-reduce, so the
slowest sets the pace. The first two steps are warm-up. A config with a KL term (beta > 0, as the demo's)
trains every row in both modes: the KL reads rows of advantage 0 too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trl import demo_config, warm_start  # noqa: E402  (the config's SFT warm start, built once)

MODES = {"auto": True, "train": False}  # train.zero_advantage_rows -> Learner.skips_zero_advantage


def timed_update(worker, batch, skips: bool) -> tuple[float, float]:
    """(CPU s, wall s) of one `update` in a learner actor, rows of advantage 0 left out or not."""
    import time

    worker.learner.skips_zero_advantage = skips
    cpu, wall = time.process_time(), time.perf_counter()
    worker.update(batch)
    return time.process_time() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "sort.yaml")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="config override (default for the sort config: task.options.reward=sparse)")
    p.add_argument("--steps", type=int, default=12, help="batches (the first two are warm-up)")
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--shard", action="store_true", help="FSDP2 ranks (distributed.shard: true)")
    p.add_argument("--work", type=Path, default=ROOT / ".bench" / "data-parallel")
    args = p.parse_args(argv)
    if args.steps < 3 or args.learners < 2:
        p.error("--steps must be >= 3 (two are warm-up) and --learners >= 2")
    import ray
    import torch

    from rlvr.core import flat_group_share
    from rlvr.distributed.ray_learner import _free_port
    from rlvr.distributed.workers import LearnerWorker
    from rlvr.tasks import get_task
    from rlvr.train.setup import local_roles

    sets = args.sets or (["task.options.reward=sparse"] if args.config.name == "sort.yaml" else [])
    work = args.work.resolve()
    warm = str(warm_start(demo_config([*sets, "threads=1", f"out_dir={work / 'warm'}"], args.config.resolve())))
    cfg = demo_config([*sets, f"model.path={warm}", "sft.steps=0", "threads=1", f"out_dir={work / 'run'}",
                       "distributed.backend=ray", f"distributed.learners={args.learners}",
                       f"distributed.shard={str(args.shard).lower()}"], args.config.resolve())
    torch.set_num_threads(1)
    ray.init(num_cpus=args.learners, include_dashboard=False, log_to_driver=False)
    task = get_task(cfg.task.name, **cfg.task.options)
    learner, rollout = local_roles(cfg, task, warm, warm)
    if not learner.skips_zero_advantage:  # a KL term, token-level advantages or train.zero_advantage_rows: train
        p.error(f"{args.config}: this config trains every row of advantage 0 (its gradient is not 0 there): "
                "nothing to compare")
    del learner
    master = ("127.0.0.1", _free_port())
    actor = ray.remote(LearnerWorker).options(num_cpus=1)
    ranks = [actor.remote(cfg, warm, warm, r, args.learners, master) for r in range(args.learners)]
    times: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    flat = []
    for step in range(1, args.steps + 1):
        batch = rollout.collect(step)
        share = float(flat_group_share(batch.rewards, batch.group_size))
        for mode in (MODES if step % 2 else reversed(MODES)):
            out = ray.get([rank.__ray_call__.remote(timed_update, batch, MODES[mode]) for rank in ranks])
            if step > 2:
                times[mode].append((max(cpu for cpu, _ in out), max(wall for _, wall in out)))
        if step > 2:
            flat.append(share)
            print(f"step {step}: flat groups {share:.2f}, CPU-s left out {times['auto'][-1][0]:.3f}, "
                  f"all rows {times['train'][-1][0]:.3f}", flush=True)
    ray.shutdown()
    ratios = [b[0] / a[0] for a, b in zip(times["auto"], times["train"])]
    walls = [b[1] / a[1] for a, b in zip(times["auto"], times["train"])]
    kind = "FSDP2" if args.shard else "whole-policy"
    print(f"{args.learners} {kind} ranks, {len(ratios)} steps, flat groups {min(flat):.2f}-{max(flat):.2f} "
          f"(mean {statistics.mean(flat):.2f}): CPU-s per update, the slower rank, left out "
          f"{statistics.median(a for a, _ in times['auto']):.3f}, all rows "
          f"{statistics.median(a for a, _ in times['train']):.3f}; all rows / left out per step: median "
          f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}), "
          f"wall {statistics.median(walls):.2f}x")


if __name__ == "__main__":
    main()
