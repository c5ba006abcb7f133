"""rlvr vs TRL's GRPOTrainer on the GRPO phase of `rlvr demo` (or another config), side by side.

    .venv/bin/python benchmarks/bench_trl.py                # the demo's GRPO phase (600 steps)
    .venv/bin/python benchmarks/bench_trl.py --steps 150    # shorter
    .venv/bin/python benchmarks/bench_trl.py --seeds 3 --stop-at-target  # RL seeds 0, 1, 2; medians
    .venv/bin/python benchmarks/bench_trl.py --schedule sequential --only rlvr  # one side; the other: last run
    .venv/bin/python benchmarks/bench_trl.py --config configs/sort.yaml --set task.options.reward=sparse \
        --target 0.7 --eval-every 20 --work .bench/trl-sort  # the second task: 5 digits, no KL, 12 new tokens

1. The demo's tiny model and SFT warm start are built once with rlvr's own functions (same seed and
   settings as `rlvr demo`) and saved as a Hugging Face folder: `.bench/trl/warm`, in a child process (this
   one never imports torch, so that `evict` can drop its pages before the pair starts).
2. rlvr's GRPO loop trains from that folder with the demo's GRPO config, in a child process.
3. TRL (installed into its own virtualenv `.venv-trl` on first use, versions pinned in `_trl_env.py`) trains the
   same folder with `GRPOTrainer`, with the config mapped by `trl_arguments`, in another child process.
By default (`--schedule together`) both children run at the same time, each pinned to a core of its own
with one torch thread: this VM's speed drifts by up to 2x within half an hour, which one-after-the-other
runs (`--schedule sequential`) would read as a difference between the trainers; side by side, both see
the same machine. With `--seeds K` the pair runs for RL seeds seed .. seed + K - 1 from the one warm
start, and the ratios are given per seed and as medians (which step first reaches the target differs by
seed on either side). `--stop-at-target` ends each side at its first evaluation at the target. Both
sides run with tcmalloc preloaded where installed: rlvr's child starts as `rlvr train` does, and TRL's
is given the same library (`--trl-allocator auto`), its fastest setting here (about 1.6-1.9x faster per
step than with glibc's malloc); `--trl-allocator system` runs TRL as it installs, its leanest. The table
gives s/step and CPU-s/step of training (evaluation paused out; steps 2..N), split into rollout
(sampling + reward) and update (old/reference log-probs, loss, backward, AdamW), the training time until
the held-out greedy exact-match accuracy (200 prompts, the demo's set) first reaches 0.9, the peak RSS of
each process (both venvs' libraries dropped from the page cache first: `evict`), and the ratios
TRL / rlvr (> 1: rlvr is faster or leaner). CPU seconds are what a loaded, shared machine cannot inflate;
wall seconds are what a user waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _trl_report import TARGET, report  # noqa: E402  (the tables and ratios)
from _trl_side import TrainClock  # noqa: E402  (the clock both children use)
from _trl_env import (evict, library_files, start_child, trl_allocator, trl_python,  # noqa: E402
                      wait_child)  # (the children's processes, TRL's venv and allocator, the page cache)

DEMO_CONFIG = ROOT / "configs" / "demo.yaml"
# The benchmark times training, so both sides skip what the other cannot do alike: rlvr's sampled
# evaluation, TensorBoard, plots, progress bar and intermediate checkpoints (TRL: report_to none, no saves).
RLVR_OVERRIDES = ["sft.steps=0", "eval.samples=0", "checkpoint.every=0", "log.progress=false",
                  "log.report_to=[]", "log.plots=false", "log.samples_per_eval=0"]
AGGREGATIONS = {"seq_mean_token_mean": "grpo", "seq_sum_constant": "dr_grpo", "token_mean": "dapo"}
ADVANTAGES = {"grpo": "group", "centered": "none"}


def _schedule(o) -> dict:
    """rlvr's warmup + constant / linear / cosine (to min_lr_ratio) as a transformers schedule."""
    if o.schedule == "cosine":
        if o.min_lr_ratio:
            return {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": o.min_lr_ratio}}
        return {"lr_scheduler_type": "cosine"}
    if o.schedule == "linear" and not o.min_lr_ratio:
        return {"lr_scheduler_type": "linear"}
    if o.schedule == "constant":
        return {"lr_scheduler_type": "constant_with_warmup"}
    raise ValueError(f"optim.schedule {o.schedule!r} with min_lr_ratio {o.min_lr_ratio} has no transformers schedule")


def _unsupported(cfg) -> list[str]:
    a = cfg.algorithm
    checks = [
        (a.advantage not in ADVANTAGES, f"algorithm.advantage {a.advantage!r} (TRL: {sorted(ADVANTAGES)})"),
        (a.aggregation not in AGGREGATIONS, f"algorithm.aggregation {a.aggregation!r}"),
        (a.policy_loss != "clipped", f"algorithm.policy_loss {a.policy_loss!r}"),
        (a.beta > 0 and a.kl_estimator != "k3", f"algorithm.kl_estimator {a.kl_estimator!r} (TRL: k3)"),
        (a.aggregation == "seq_sum_constant" and a.loss_constant not in (None, cfg.rollout.max_new_tokens),
         "algorithm.loss_constant other than rollout.max_new_tokens"),
        (a.dynamic_sampling, "algorithm.dynamic_sampling"), (a.kl_reward_coef > 0, "algorithm.kl_reward_coef"),
        (bool(cfg.task.rewards), "task.rewards (extra reward terms)"),
    ]
    return [what for bad, what in checks if bad]


def trl_arguments(cfg, steps: int) -> dict:
    """GRPOConfig keyword arguments equal to the rlvr config `cfg` run for `steps` RL steps.

    One rlvr step = one rollout of `train.batch_size` completions, then mu epochs over minibatches of
    `mini_batch_size`, each an optimizer step over micro-batches. TRL counts optimizer steps, generates
    `per_device_train_batch_size * steps_per_generation` completions at once (steps counted in
    micro-batches) and replays them `num_iterations` times; so micro -> per-device batch, mini / micro
    -> gradient accumulation, batch / micro -> steps per generation, mu -> num_iterations.
    """
    bad = _unsupported(cfg)
    if bad:
        raise ValueError(f"no TRL equivalent for: {', '.join(bad)}")
    t, a, o, r = cfg.train, cfg.algorithm, cfg.optim, cfg.rollout
    mini, micro = cfg.mini_batch_size, cfg.micro_batch_size
    return {
        "per_device_train_batch_size": micro, "gradient_accumulation_steps": mini // micro,
        "steps_per_generation": t.batch_size // micro, "num_generations": t.group_size,
        "num_iterations": a.mu, "max_steps": steps * a.mu * (t.batch_size // mini),
        "max_completion_length": r.max_new_tokens, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
        "scale_rewards": ADVANTAGES[a.advantage], "loss_type": AGGREGATIONS[a.aggregation],
        "epsilon": a.clip_low, "epsilon_high": a.clip_high, "beta": a.beta,
        # TRL >= 1.x weights the k3 term by pi/pi_old by default (DeepSeek-V3.2); rlvr only with kl_unbiased
        "use_bias_correction_kl": a.kl_unbiased,
        "mask_truncated_completions": a.overlong_filter,
        "learning_rate": o.lr, "adam_beta1": o.betas[0], "adam_beta2": o.betas[1], "adam_epsilon": o.eps,
        "weight_decay": o.weight_decay, "max_grad_norm": o.max_grad_norm, "warmup_steps": o.warmup_steps,
        **_schedule(o),
        "seed": cfg.seed, "use_cpu": True, "bf16": False, "fp16": False, "gradient_checkpointing": False,
        "use_vllm": False, "report_to": "none", "save_strategy": "no", "disable_tqdm": True,
        "logging_steps": a.mu * (t.batch_size // mini), "model_init_kwargs": {"dtype": "float32"},
    }


def task_options(name: str, options: dict, model: Path) -> dict:
    """The task's options as `rlvr train` builds its task: one that takes a tokenizer (a chat template) gets the
    trained model's, so TRL's side renders the same prompts."""
    from rlvr.tasks import TASKS
    from rlvr.tasks.base import task_options as option_names

    takes_tokenizer = name in TASKS and "tokenizer" in option_names(TASKS[name])[0]
    return {**({"tokenizer": str(model)} if takes_tokenizer else {}), **options}


def demo_config(overrides: list[str] = (), path: Path = DEMO_CONFIG):
    from rlvr.config import load_config

    return load_config(path, list(overrides))


def warm_start(sets: list[str], config: Path, work: Path) -> Path:
    """The demo's tiny model after the demo's SFT warm start (rlvr's own `start_model`, seeded as
    `prepare_run` seeds it), saved once as a Hugging Face folder and reused while its settings match.
    It is built in a child process: this process never imports torch, because `evict` cannot drop the pages
    of a library that a running process maps, and rlvr's side would then count them in its peak RSS
    (measured: 487-512 MiB with torch imported here, 432 without, the same run)."""
    overrides = [*sets, f"out_dir={work / 'warm'}"]
    cfg = demo_config(overrides, config)  # exactly the config's SFT, its threads too
    if cfg.model.path and not cfg.sft.steps:  # a real model as it is: its folder (a GGUF's converted one)
        work.mkdir(parents=True, exist_ok=True)
        spec = work / "warm_spec.json"
        spec.write_text(json.dumps({"resolve": cfg.model.path, "out": str(work / "warm_folder.txt")}))
        subprocess.run([sys.executable, __file__, "--child-warm", str(spec)], check=True)
        return Path((work / "warm_folder.txt").read_text())
    stamp = json.dumps({k: repr(getattr(cfg, k)) for k in ("seed", "model", "task", "sft")}, sort_keys=True)
    run_dir, stamp_file = Path(cfg.out_dir), Path(cfg.out_dir) / "bench_stamp.json"
    warm = run_dir / ("sft_model" if cfg.sft.steps else "init_model")
    if (warm / "config.json").is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return warm
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"warm start: {cfg.sft.steps} SFT steps (the demo's) -> {warm}", flush=True)
    spec = work / "warm_spec.json"
    spec.write_text(json.dumps({"config": str(config), "overrides": overrides}))
    subprocess.run([sys.executable, __file__, "--child-warm", str(spec)], check=True)
    if not (warm / "config.json").is_file():
        raise SystemExit(f"the warm start's child wrote no model to {warm}")
    stamp_file.write_text(stamp)
    return warm


def warm_child(spec: dict) -> None:
    """Builds the warm start of `warm_start` (in its child process), or resolves a real model's folder."""
    if spec.get("resolve"):
        from rlvr.models.sources import resolve_model

        Path(spec["out"]).write_text(str(resolve_model(spec["resolve"])))
        return
    import torch

    from rlvr.tasks import get_task
    from rlvr.seeds import seed_everything
    from rlvr.train.setup import start_model

    cfg = demo_config(spec["overrides"], Path(spec["config"]))
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    seed_everything(cfg.seed)
    start_model(cfg, Path(cfg.out_dir), get_task(cfg.task.name, **cfg.task.options))


class _Reached(Exception):
    """Raised by the rlvr child's evaluation hook at the target accuracy under --stop-at-target."""


def rlvr_child(spec: dict) -> dict:
    """rlvr's loop on the spec's config, timed by a TrainClock hooked onto its evaluation and its
    per-step log call (the loop itself is untouched); `spec["stop_at"]`: end at that accuracy."""
    import torch
    import transformers

    import rlvr.train.loop as loop
    from rlvr.config import load_config
    from rlvr.train.setup import prepare_run

    cfg = load_config(spec.get("config", DEMO_CONFIG), spec["overrides"])
    run = prepare_run(cfg)
    clock, evaluate, log = TrainClock(), loop._evaluate, run.logger.log

    def timed_evaluate(run, step, *rest):  # rest: the loop's run guard
        with clock.paused():
            metrics = evaluate(run, step, *rest)
        accuracy = metrics["eval/greedy_accuracy"]
        clock.evaluated(step, accuracy)
        print(f"[rlvr] step {step}: held-out greedy exact accuracy {accuracy:.3f}", flush=True)
        if step > 0 and spec.get("stop_at") is not None and accuracy >= spec["stop_at"]:
            clock.step(step)  # the loop logs (and clocks) a step after its evaluation
            raise _Reached
        return metrics

    def timed_log(step, metrics, timings):
        log(step, metrics, timings)
        if step > 0:
            clock.step(step)

    loop._evaluate, run.logger.log = timed_evaluate, timed_log
    run.rollout.collect = clock.timed_rollout(run.rollout.collect)  # prompts -> scored completions
    try:
        loop.train(cfg, run=run)
    except _Reached:
        pass
    from rlvr.allocator import loaded_allocator

    return {**clock.as_dict(), "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            "threads": torch.get_num_threads(),
            "allocator": loaded_allocator(Path("/proc/self/maps").read_text()) or "system"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=DEMO_CONFIG,
                   help="the run's config (default: the demo's; e.g. configs/arith.yaml, the second task)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for both sides, as `rlvr train --set` (repeatable)")
    p.add_argument("--target", type=float, default=TARGET, help="held-out greedy accuracy to time the runs to")
    p.add_argument("--steps", type=int, default=None, help="RL steps (default: the config's train.steps)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of both trainers (default: the demo's `threads`)")
    p.add_argument("--eval-every", type=int, default=25, help="held-out evaluation every this many RL steps")
    p.add_argument("--work", type=Path, default=ROOT / ".bench" / "trl", help="work folder (warm start, runs)")
    p.add_argument("--trl-venv", type=Path, default=ROOT / ".venv-trl", help="TRL's own virtualenv")
    p.add_argument("--seeds", type=int, default=1,
                   help="how many RL seeds, from --first-seed on (one warm start); ratios per seed and medians")
    p.add_argument("--first-seed", type=int, default=None,
                   help="the first RL seed (default: the config's seed, which also seeds the warm start)")
    p.add_argument("--schedule", choices=["together", "sequential"], default="together",
                   help="together (default): both sides at once, each pinned to a core of its own, so both see the "
                        "same machine speed (needs 2 cores and 1 thread); sequential: one after the other")
    p.add_argument("--stop-at-target", action="store_true",
                   help="end each side at its first evaluation at the target (per-step figures: the steps it ran)")
    p.add_argument("--only", choices=["rlvr", "trl", "none"],
                   help="run one side (or none: print the last results again, e.g. for another --target); "
                        "the rest comes from the last results (one seed, sequential schedule)")
    p.add_argument("--trl-allocator", choices=["auto", "system", "tcmalloc"], default="auto",
                   help="TRL's malloc: auto (default) = tcmalloc preloaded where installed, TRL's fastest setting; "
                        "system = its own default (glibc), its leanest. rlvr's side always starts like `rlvr train`: "
                        "tcmalloc where installed, RLVR_ALLOCATOR=system to switch off")
    p.add_argument("--child-rlvr", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--child-warm", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "threads", "eval_every", "seeds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.only in ("rlvr", "trl") and (args.seeds > 1 or args.schedule == "together"):
        p.error("--only rlvr/trl reruns one side of a one-seed sequential run: add --schedule sequential, "
                "no --seeds")
    if args.schedule == "together" and not (args.child_rlvr or args.child_warm) and args.only != "none":
        if len(os.sched_getaffinity(0)) < 2:
            p.error("--schedule together needs 2 cores to pin the sides to; use --schedule sequential")
    return args


def run_pair(args, cfg, config: Path, overrides: list[str], warm: Path, steps: int, threads: int, work: Path,
             seed: int, last: dict) -> dict:
    """One rlvr run and one TRL run of RL seed `seed` -> {"rlvr": result, "trl": result}; `last`: the
    previous results, which supply the side that `--only` leaves out."""
    stop_at = args.target if args.stop_at_target else None
    tag = "" if args.seeds == 1 else f"-seed{seed}"
    sides = {}
    if args.only in (None, "rlvr"):
        shutil.rmtree(work / "rlvr", ignore_errors=True)
        spec = work / "rlvr_spec.json"
        spec.write_text(json.dumps({"config": str(config), "overrides": overrides, "stop_at": stop_at}))
        sides["rlvr"] = ([sys.executable, __file__, "--child-rlvr", str(spec), str(work / "rlvr.json")], None)
    if args.only in (None, "trl"):
        python = trl_python(args.trl_venv)
        per_rollout = cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)
        t = cfg.task
        spec = work / "trl_spec.json"
        spec.write_text(json.dumps({
            "repo": str(ROOT), "model": str(warm), "out_dir": str(work / "trl"), "threads": threads, "steps": steps,
            "trl_args": trl_arguments(cfg, steps), "updates_per_rollout": per_rollout, "eval_every": args.eval_every,
            "max_new_tokens": cfg.rollout.max_new_tokens, "stop_at": stop_at,
            "task": {"name": t.name, "options": task_options(t.name, t.options, warm), "train_size": t.train_size,
                     "seed": cfg.seed,
                     "eval_size": t.eval_size, "eval_seed": t.eval_seed}}))
        allocator, library = trl_allocator(args.trl_allocator)
        sides["trl"] = ([str(python), str(Path(__file__).parent / "_trl_side.py"), str(spec), str(work / "trl.json")],
                        library)
    evict([f for python in {argv[0] for argv, _ in sides.values()} for f in library_files(python)])  # `evict`: why
    together = args.schedule == "together"
    cores = sorted(os.sched_getaffinity(0))
    result = dict(last)
    running = {}
    for i, (name, (argv, preload)) in enumerate(sides.items()):
        log = work / f"{name}{tag}.log"
        print(f"{name} (seed {seed}): training{' on core %d' % cores[i] if together else ''} (log: {log}) ...",
              flush=True)
        running[name] = (start_child(argv, threads, log, preload, cores[i] if together else None), log)
        if not together:
            result[name] = {**wait_child(*running.pop(name)), **json.loads((work / f"{name}.json").read_text())}
    for name, (proc, log) in running.items():
        result[name] = {**wait_child(proc, log), **json.loads((work / f"{name}.json").read_text())}
    if "trl" in sides:
        result["trl"]["allocator"] = allocator
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_rlvr:
        from rlvr.allocator import setup_allocator

        setup_allocator()  # what `rlvr train` does first: re-exec with tcmalloc preloaded (RLVR_ALLOCATOR=system: not)
        spec, out = args.child_rlvr
        Path(out).write_text(json.dumps(rlvr_child(json.loads(Path(spec).read_text()))))
        return
    if args.child_warm:
        warm_child(json.loads(Path(args.child_warm).read_text()))
        return
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = args.config.resolve()
    base = demo_config(args.sets, config)
    threads, steps = args.threads or base.threads or 1, args.steps or base.train.steps
    if args.schedule == "together" and threads != 1 and args.only != "none":
        print("bench_trl.py: error: --schedule together pins each side to one core: the torch threads must be 1 "
              f"(got {threads}; pass --threads 1 or --schedule sequential)", file=sys.stderr)
        raise SystemExit(2)
    warm = warm_start(args.sets, config, work)
    results_file = work / "results.json"
    last = json.loads(results_file.read_text()) if args.only and results_file.is_file() else {}
    if args.only == "none":
        if not last.get("runs"):
            raise SystemExit(f"no results in {results_file} yet: run without --only")
        runs, stopped = last["runs"], last.get("stopped", False)
    else:
        runs, stopped = [], args.stop_at_target
        previous = (last.get("runs") or [{}])[0]  # --only: the other side's last result (one seed)
        kept = {side: result for side, result in previous.items() if side in ("rlvr", "trl")}
        for k in range(args.seeds):
            seed = (base.seed if args.first_seed is None else args.first_seed) + k
            overrides = [*args.sets, f"seed={seed}", f"out_dir={work / 'rlvr'}", f"model.path={warm}",
                         f"threads={threads}", f"train.steps={steps}", f"eval.every={args.eval_every}", *RLVR_OVERRIDES]
            cfg = demo_config(overrides, config)
            runs.append({"seed": seed, **run_pair(args, cfg, config, overrides, warm, steps, threads, work, seed,
                                                  kept)})
            results_file.write_text(json.dumps({"runs": runs, "stopped": stopped, "schedule": args.schedule}))
    missing = sorted({"rlvr", "trl"} - set(runs[0]))
    if missing:
        raise SystemExit(f"no results for {missing} in {results_file} yet: run without --only")
    schedule = last.get("schedule", args.schedule) if args.only == "none" else args.schedule
    print(f"\nGRPO phase of {config.name} ({base.task.name}): {steps} steps x {base.train.batch_size} completions "
          f"({base.train.batch_size // base.train.group_size} prompts x {base.train.group_size}), "
          f"{base.rollout.max_new_tokens} new tokens, mu={base.algorithm.mu}, lr={base.optim.lr}, "
          f"beta={base.algorithm.beta}; same warm-started model ({warm}); sides run "
          f"{'together, one core each' if schedule == 'together' else 'one after the other'}")
    print(report(runs, steps, args.target, stopped))


if __name__ == "__main__":
    main()
