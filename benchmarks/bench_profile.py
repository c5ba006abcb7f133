"""Where one RL step's time goes: rollout (generate, scoring, the rest of `Rollout.collect`), the
Learner's old/reference log-prob passes, training forward, loss, backward, optimizer, weight sync,
and the rest (batching, advantages, logging, Python).

Runs the real loop (`rlvr.train.loop.train`) on a config and times each part by wrapping the
functions the roles (`rlvr.train.rollout.Rollout`, `rlvr.train.learner.Learner`) call; nested parts
are counted exclusively (the model forward inside the training forward is its own row). Evaluation,
checkpoints and the end-of-run save are left out of the step.
Times are CPU seconds of the process (`time.process_time`, all threads), which other jobs sharing
the cores barely disturb; wall seconds are printed next to them, with the load average.

    .venv/bin/python benchmarks/bench_profile.py demo [--steps 5]
    .venv/bin/python benchmarks/bench_profile.py 20m [--steps 2]
    .venv/bin/python benchmarks/bench_profile.py sort [--steps 20]
    .venv/bin/python benchmarks/bench_profile.py smollm2 [--steps 3] [--config FILE]

"demo" is `rlvr demo`'s config (SFT warm start included, not timed). "20m" is the same task and
algorithm on a ~20M Qwen2 (`bench20m`, no warm start), 32 completions per step forced to 128 tokens.
"sort" is configs/sort.yaml with the exact-match reward (bench_trl.py's second task). "smollm2" is the real
model, SmolLM2-135M-Instruct, at issue 37's starting point (benchmarks/configs/smollm2_add.yaml: a + b through its
chat template, 8 prompts x 8, 48 new tokens), at the threads it sets. `--config` swaps a setting's file for another with the same overrides.
Wrapped names come from `rlvr.train.{loop,learner}` and `rlvr.algorithms.dynamic_sampling`; if one
goes away the script fails loudly rather than mislabel time.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

import rlvr.algorithms.dynamic_sampling as sampling_mod
import rlvr.train.passes as passes_mod
import rlvr.train.loop as loop
from rlvr.config import load_config
from rlvr.pipelines.demo import DEMO_CONFIG
from rlvr.train.setup import prepare_run

QUIET = ["eval.every=1000000", "task.eval_size=8", "eval.samples=1", "checkpoint.every=1000000",
         "log.progress=false", "log.report_to=[]", "log.plots=false"]
SORT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "sort.yaml"
SMOLLM2_CONFIG = Path(__file__).resolve().parent / "configs" / "smollm2_add.yaml"  # the real model's rows
SETTINGS = {  # setting -> (config file, overrides)
    "demo": (DEMO_CONFIG, []),
    "20m": (DEMO_CONFIG, ["model.tiny_preset=bench20m", "sft.steps=0", "rollout.max_new_tokens=128",
                          "train.batch_size=32", "train.group_size=8", "train.mini_batch_size=16"]),
    # the second task of bench_trl.py: sort 5 digits with the exact-match reward, no KL term, one thread
    "sort": (SORT_CONFIG, ["task.options.reward=sparse", "threads=1"]),
    "smollm2": (SMOLLM2_CONFIG, ["task.eval_size=4"]),
}
EXCLUDED = ("evaluation", "checkpoint", "end of run")


class Profile:
    """Exclusive CPU and wall time per label; a label's time excludes that of labels nested in it."""

    def __init__(self):
        self.cpu, self.wall, self.calls = defaultdict(float), defaultdict(float), defaultdict(int)
        self.inclusive_cpu, self.inclusive_wall = defaultdict(float), defaultdict(float)
        self.stack: list[list] = []  # [label, child cpu, child wall]
        self.tokens = {"padded": 0, "real": 0}

    @contextmanager
    def part(self, label: str):
        if any(frame[0] in EXCLUDED for frame in self.stack):  # e.g. generate inside evaluation
            yield
            return
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.stack.append([label, 0.0, 0.0])
        try:
            yield
        finally:
            _, child_cpu, child_wall = self.stack.pop()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            self.cpu[label] += cpu - child_cpu
            self.wall[label] += wall - child_wall
            self.inclusive_cpu[label] += cpu
            self.inclusive_wall[label] += wall
            self.calls[label] += 1
            if self.stack:
                self.stack[-1][1] += cpu
                self.stack[-1][2] += wall

    def wrap(self, fn, label):
        def timed(*args, **kwargs):
            with self.part(label(*args, **kwargs) if callable(label) else label):
                return fn(*args, **kwargs)
        return timed


def instrument(prof: Profile, run) -> None:
    """Wrap what the roles call; every name must exist, or the profile would silently miss time."""
    for module, names in ((passes_mod, ("cached_logprobs", "build_batch")), (loop, ("_evaluate", "save_checkpoint")),
                          (sampling_mod, ("score_completions",))):
        for name in names:
            if not hasattr(module, name):
                raise SystemExit(f"bench_profile: {module.__name__} has no {name!r}; update this script's wrappers")
    learner, rollout = run.learner, run.rollout
    passes_mod.cached_logprobs = prof.wrap(passes_mod.cached_logprobs, lambda model, *a, **k: (
        "reference log-prob pass" if model is learner.reference else "old log-prob pass"))
    objective = learner.objective  # its training forward: log-probs, entropy (and PPO's values)
    objective.forward = prof.wrap(_count_padding(prof, learner.pad_id, objective.forward),
                                  "training forward: log-probs, entropy")
    passes_mod.build_batch = prof.wrap(passes_mod.build_batch, "batching")
    sampling_mod.score_completions = prof.wrap(sampling_mod.score_completions, "scoring")
    loop._evaluate = prof.wrap(loop._evaluate, "evaluation")
    loop.save_checkpoint = prof.wrap(loop.save_checkpoint, "checkpoint")
    learner.save = prof.wrap(learner.save, "end of run")
    objective.advantages = prof.wrap(objective.advantages, "advantages")
    objective.loss = prof.wrap(objective.loss, "loss")
    torch.Tensor.backward = prof.wrap(torch.Tensor.backward, "backward")
    torch.nn.utils.clip_grad_norm_ = prof.wrap(torch.nn.utils.clip_grad_norm_, "grad clip")
    learner.optimizer.step = prof.wrap(learner.optimizer.step, "optimizer step")
    rollout.collect = prof.wrap(rollout.collect, "rollout: prompts, batch assembly")
    rollout.engine.generate = prof.wrap(rollout.engine.generate, "rollout: generate")
    rollout.load_weights = prof.wrap(rollout.load_weights, "weight sync")
    _time_model_forward(prof, learner.policy)


def _count_padding(prof: Profile, pad_id: int, fn):
    def counted(*args, **kwargs):
        batch = next(a for a in args if hasattr(a, "input_ids"))  # the RolloutBatch
        prof.tokens["padded"] += batch.input_ids.numel()
        prof.tokens["real"] += int((batch.input_ids != pad_id).sum())
        return fn(*args, **kwargs)
    return counted


def _time_model_forward(prof: Profile, model) -> None:
    """The policy's own forward inside the training forward, as a nested part."""
    parts = []

    def pre(*_):
        if prof.stack and prof.stack[-1][0] == "training forward: log-probs, entropy":
            parts.append(prof.part("training forward: model"))
            parts[-1].__enter__()

    def post(*_):
        if parts and prof.stack and prof.stack[-1][0] == "training forward: model":
            parts.pop().__exit__(None, None, None)

    model.register_forward_pre_hook(pre)
    model.register_forward_hook(post)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("setting", choices=sorted(SETTINGS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key, as rlvr train's --set; repeat --set for each")
    parser.add_argument("--config", type=Path, help="the setting's overrides on this config file instead")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="rlvr-profile-")
    config, setting = SETTINGS[args.setting]
    config = args.config or config
    cfg = load_config(config, [f"out_dir={out}", f"train.steps={args.steps}", *QUIET, *setting, *args.set])
    run = prepare_run(cfg)
    if args.setting == "20m":  # every completion runs to 128 tokens
        sampler = run.rollout.sampler
        sampler.sampling = replace(sampler.sampling, ignore_eos=True)
    prof = Profile()
    instrument(prof, run)
    warnings.filterwarnings("ignore", message=re.escape("Seems like `optimizer.step()` has been overridden"))
    load = os.getloadavg()[0]
    with prof.part("train"):
        loop.train(cfg, run=run)
    report(prof, args, cfg, load)


def report(prof: Profile, args, cfg, load: float) -> None:
    steps = args.steps
    cpu_total = prof.inclusive_cpu["train"] - sum(prof.inclusive_cpu[x] for x in EXCLUDED)
    wall_total = prof.inclusive_wall["train"] - sum(prof.inclusive_wall[x] for x in EXCLUDED)
    prof.cpu["other (logging, Python)"] = prof.cpu.pop("train")
    prof.wall["other (logging, Python)"] = prof.wall.pop("train")
    rows = sorted(((k, v) for k, v in prof.cpu.items() if k not in EXCLUDED), key=lambda kv: -kv[1])
    print(f"setting {args.setting}: model {cfg.model.path or cfg.model.tiny_preset}, {cfg.train.batch_size} "
          f"completions/step, "
          f"max_new_tokens {cfg.rollout.max_new_tokens}, mu {cfg.algorithm.mu}, threads {cfg.threads}, "
          f"{steps} steps; load {load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"{'part':40s} {'CPU ms/step':>11s} {'share':>6s} {'wall ms/step':>12s}")
    for label, cpu in rows:
        print(f"{label:40s} {1000 * cpu / steps:11.1f} {cpu / cpu_total:6.1%} "
              f"{1000 * prof.wall[label] / steps:12.1f}")
    print(f"{'step (sum)':40s} {1000 * cpu_total / steps:11.1f} {1:6.0%} {1000 * wall_total / steps:12.1f}")
    if prof.tokens["padded"]:
        print(f"padding in the training forward: {1 - prof.tokens['real'] / prof.tokens['padded']:.1%} "
              f"of {prof.tokens['padded'] // steps} token slots per step")


if __name__ == "__main__":
    main()
