"""rlvr vs TRL's GRPOTrainer on the GRPO phase of `rlvr demo` (or another config), side by side.

    .venv/bin/python benchmarks/bench_trl.py                # the demo's GRPO phase (600 steps)
    .venv/bin/python benchmarks/bench_trl.py --steps 150    # shorter
    .venv/bin/python benchmarks/bench_trl.py --only rlvr    # one side; the other is read from the last run
    .venv/bin/python benchmarks/bench_trl.py --config configs/sort.yaml --set task.options.reward=sparse \
        --target 0.7 --eval-every 20 --work .bench/trl-sort  # the second task: 5 digits, no KL, 12 new tokens

1. The demo's tiny model and SFT warm start are built once with rlvr's own functions (same seed and
   settings as `rlvr demo`) and saved as a Hugging Face folder: `.bench/trl/warm`.
2. rlvr's GRPO loop trains from that folder with the demo's GRPO config, in a child process.
3. TRL (installed into its own virtualenv `.venv-trl` on first use, versions pinned below) trains the
   same folder with `GRPOTrainer`, with the config mapped by `trl_arguments`, in another child process.
Both children run one after the other (never together) with the same torch thread count. The table
gives s/step and CPU-s/step of training (evaluation paused out; steps 2..N), split into rollout
(sampling + reward) and update (old/reference log-probs, loss, backward, AdamW), the training time until
the held-out greedy exact-match accuracy (200 prompts, the demo's set) first reaches 0.9, the peak RSS of
each process, and the ratios TRL / rlvr (> 1: rlvr is faster or leaner). CPU seconds are what a loaded,
shared machine cannot inflate; wall seconds are what a user waits.
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

from _trl_side import TrainClock  # noqa: E402  (the clock both children use)

DEMO_CONFIG = ROOT / "configs" / "demo.yaml"
TARGET = 0.9
TORCH_PIN = "torch==2.13.0"  # installed first, from the CPU wheel on local disk: a plain `torch` pulls CUDA
TRL_PINS = ["trl==1.16.0", "transformers==5.24.0", "accelerate==1.15.0", "datasets==5.2.0"]
# The benchmark times training, so both sides skip what the other cannot do alike: rlvr's sampled
# evaluation, TensorBoard, plots, progress bar and intermediate checkpoints (TRL: report_to none, no saves).
RLVR_OVERRIDES = ["sft.steps=0", "eval.samples=0", "checkpoint.every=0", "log.progress=false",
                  "log.tensorboard=false", "log.plots=false", "log.samples_per_eval=0"]
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
        "mask_truncated_completions": a.overlong_filter,
        "learning_rate": o.lr, "adam_beta1": o.betas[0], "adam_beta2": o.betas[1], "adam_epsilon": o.eps,
        "weight_decay": o.weight_decay, "max_grad_norm": o.max_grad_norm, "warmup_steps": o.warmup_steps,
        **_schedule(o),
        "seed": cfg.seed, "use_cpu": True, "bf16": False, "fp16": False, "gradient_checkpointing": False,
        "use_vllm": False, "report_to": "none", "save_strategy": "no", "disable_tqdm": True,
        "logging_steps": a.mu * (t.batch_size // mini), "model_init_kwargs": {"dtype": "float32"},
    }


def demo_config(overrides: list[str] = (), path: Path = DEMO_CONFIG):
    from rlvr.config import load_config

    return load_config(path, list(overrides))


def warm_start(cfg) -> Path:
    """The demo's tiny model after the demo's SFT warm start (rlvr's own `start_model`, seeded as
    `prepare_run` seeds it), saved once as a Hugging Face folder and reused while its settings match."""
    import torch

    from rlvr.tasks import get_task
    from rlvr.seeds import seed_everything
    from rlvr.train.setup import start_model

    stamp = json.dumps({k: repr(getattr(cfg, k)) for k in ("seed", "model", "task", "sft")}, sort_keys=True)
    run_dir, stamp_file = Path(cfg.out_dir), Path(cfg.out_dir) / "bench_stamp.json"
    warm = run_dir / ("sft_model" if cfg.sft.steps else "init_model")
    if (warm / "config.json").is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return warm
    shutil.rmtree(run_dir, ignore_errors=True)
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    seed_everything(cfg.seed)
    print(f"warm start: {cfg.sft.steps} SFT steps (the demo's) -> {warm}", flush=True)
    path = start_model(cfg, run_dir, get_task(cfg.task.name, **cfg.task.options))
    stamp_file.write_text(stamp)
    return path


def rlvr_child(spec: dict) -> dict:
    """rlvr's loop on the spec's config, timed by a TrainClock hooked onto its evaluation and its
    per-step log call (the loop itself is untouched)."""
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
        clock.evaluated(step, metrics["eval/greedy_accuracy"])
        print(f"[rlvr] step {step}: held-out greedy exact accuracy {metrics['eval/greedy_accuracy']:.3f}", flush=True)
        return metrics

    def timed_log(step, metrics, timings):
        log(step, metrics, timings)
        if step > 0:
            clock.step(step)

    loop._evaluate, run.logger.log = timed_evaluate, timed_log
    run.rollout.collect = clock.timed_rollout(run.rollout.collect)  # prompts -> scored completions
    loop.train(cfg, run=run)
    from rlvr.allocator import loaded_allocator

    return {**clock.as_dict(), "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            "threads": torch.get_num_threads(),
            "allocator": loaded_allocator(Path("/proc/self/maps").read_text()) or "system"}


def run_child(argv: list[str], threads: int, log_path: Path, preload: str | None = None) -> dict:
    """Run `argv` to completion -> its own peak RSS in MiB (wait4's rusage of that process, not the
    running maximum over all children that RUSAGE_CHILDREN would give). `preload`: a library for LD_PRELOAD."""
    env = {**os.environ, **({"LD_PRELOAD": preload} if preload else {}),
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"{argv[1]} failed (exit {code}); last lines of {log_path}:\n{tail}")
    return {"peak_rss_mib": usage.ru_maxrss / 1024}  # ru_maxrss is in KiB on Linux


def _preload(allocator: str) -> str | None:
    if allocator == "system":
        return None
    from rlvr.allocator import find_library

    path = find_library(allocator)
    if path is None:
        raise SystemExit(f"--trl-allocator {allocator}: the library is not installed")
    return path


def trl_python(venv: Path) -> Path:
    """The TRL virtualenv's python, created with the pinned versions when missing or different."""
    python = venv / "bin" / "python"
    want = {p.split("==")[0]: p.split("==")[1] for p in [TORCH_PIN, *TRL_PINS]}
    probe = ("import json, importlib.metadata as m; print(json.dumps({n: m.version(n) for n in %r}))" % list(want))
    if python.exists():
        got = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if got.returncode == 0 and {k: v.split("+")[0] for k, v in json.loads(got.stdout).items()} == want:
            return python
    print(f"installing TRL into {venv} (once; a few minutes): {' '.join([TORCH_PIN, *TRL_PINS])}", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH_PIN], check=True)  # first, so TRL's dependency is already satisfied (CPU build)
    subprocess.run([*pip, *TRL_PINS], check=True)
    return python


def summarize(result: dict, steps: int, target: float = TARGET) -> dict:
    """s/step and CPU-s/step over steps 2..N (step 1 pays one-off warm-up), training time to `target`."""
    clock = {s: rest for s, *rest in result["steps"]}  # step -> (wall, CPU, rollout wall, rollout CPU)
    first, last = min(clock), max(clock)
    if last != steps or last - first < 1:
        raise SystemExit(f"expected steps 1..{steps} in the result, got {first}..{last}")
    n = last - first
    reached = next(((s, wall) for s, wall, _, acc in result["evals"] if acc >= target), None)
    per_step = [(b - a) / n for a, b in zip(clock[first], clock[last])]
    return {"s_per_step": per_step[0], "cpu_per_step": per_step[1], "rollout_cpu_per_step": per_step[3],
            "update_cpu_per_step": per_step[1] - per_step[3],
            "acc_start": result["evals"][0][3], "acc_final": result["evals"][-1][3],
            "to_target_s": reached[1] if reached else None, "to_target_step": reached[0] if reached else None,
            "peak_rss_mib": result["peak_rss_mib"]}


def _fmt(value, spec: str) -> str:
    return format("-", spec.replace(".2f", "")) if value is None else format(value, spec)


def table(rows: dict[str, dict], steps: int, target: float = TARGET) -> str:
    r, t = rows["rlvr"], rows["trl"]

    def ratio(key):
        return t[key] / r[key] if r.get(key) and t.get(key) is not None else None

    reach = {k: (f"{v['to_target_s']:.0f} s (step {v['to_target_step']})" if v["to_target_s"] is not None
                 else f"not in {steps} steps") for k, v in rows.items()}
    lines = [f"{'':34}{'rlvr':>22}{'TRL GRPOTrainer':>22}{'TRL / rlvr':>12}",
             f"{'s/step (wall, training)':34}{r['s_per_step']:>22.3f}{t['s_per_step']:>22.3f}{_fmt(ratio('s_per_step'), '>12.2f')}",
             f"{'CPU-s/step (training)':34}{r['cpu_per_step']:>22.3f}{t['cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('cpu_per_step'), '>12.2f')}",
             f"{'  rollout: sample + reward':34}{r['rollout_cpu_per_step']:>22.3f}{t['rollout_cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('rollout_cpu_per_step'), '>12.2f')}",
             f"{'  update: log-probs, loss, AdamW':34}{r['update_cpu_per_step']:>22.3f}{t['update_cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('update_cpu_per_step'), '>12.2f')}",
             f"{f'training time to {target} held-out acc':34}{reach['rlvr']:>22}{reach['trl']:>22}"
             f"{_fmt(ratio('to_target_s'), '>12.2f')}",
             f"{'peak RSS (MiB)':34}{r['peak_rss_mib']:>22.0f}{t['peak_rss_mib']:>22.0f}{_fmt(ratio('peak_rss_mib'), '>12.2f')}",
             f"{'held-out acc: warm start -> final':34}{r['acc_start']:>13.3f} -> {r['acc_final']:.3f}"
             f"{t['acc_start']:>13.3f} -> {t['acc_final']:.3f}"]
    return "\n".join(lines)


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
    p.add_argument("--only", choices=["rlvr", "trl", "none"],
                   help="run one side (or none: print the last results again, e.g. for another --target); "
                        "the rest comes from the last results")
    p.add_argument("--trl-allocator", choices=["system", "tcmalloc"], default="system",
                   help="TRL's malloc: its default (glibc) or tcmalloc preloaded as rlvr's CLI does (rlvr's side "
                        "always starts like `rlvr train`: tcmalloc where installed, RLVR_ALLOCATOR=system to switch off)")
    p.add_argument("--child-rlvr", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "threads", "eval_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    return args


def _side(name: str, argv: list[str], threads: int, work: Path, out: Path, preload: str | None = None) -> dict:
    print(f"{name}: training (log: {work / f'{name}.log'}) ...", flush=True)
    usage = run_child(argv, threads, work / f"{name}.log", preload)
    return {**json.loads(out.read_text()), **usage}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_rlvr:
        from rlvr.allocator import setup_allocator

        setup_allocator()  # what `rlvr train` does first: re-exec with tcmalloc preloaded (RLVR_ALLOCATOR=system: not)
        spec, out = args.child_rlvr
        Path(out).write_text(json.dumps(rlvr_child(json.loads(Path(spec).read_text()))))
        return
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = args.config.resolve()
    base = demo_config(args.sets, config)
    threads, steps = args.threads or base.threads or 1, args.steps or base.train.steps
    warm = warm_start(demo_config([*args.sets, f"out_dir={work / 'warm'}"], config))  # exactly the config's SFT, its threads too
    overrides = [*args.sets, f"out_dir={work / 'rlvr'}", f"model.path={warm}", f"threads={threads}", f"train.steps={steps}",
                 f"eval.every={args.eval_every}", *RLVR_OVERRIDES]
    cfg = demo_config(overrides, config)
    results_file = work / "results.json"
    results = json.loads(results_file.read_text()) if args.only and results_file.is_file() else {}
    if args.only in (None, "rlvr"):
        shutil.rmtree(work / "rlvr", ignore_errors=True)
        spec = work / "rlvr_spec.json"
        spec.write_text(json.dumps({"config": str(config), "overrides": overrides}))
        results["rlvr"] = _side("rlvr", [sys.executable, __file__, "--child-rlvr", str(spec), str(work / "rlvr.json")],
                                threads, work, work / "rlvr.json")
    if args.only in (None, "trl"):
        python = trl_python(args.trl_venv)
        per_rollout = cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)
        t = cfg.task
        spec = work / "trl_spec.json"
        spec.write_text(json.dumps({
            "repo": str(ROOT), "model": str(warm), "out_dir": str(work / "trl"), "threads": threads, "steps": steps,
            "trl_args": trl_arguments(cfg, steps), "updates_per_rollout": per_rollout, "eval_every": args.eval_every,
            "max_new_tokens": cfg.rollout.max_new_tokens,
            "task": {"name": t.name, "options": t.options, "train_size": t.train_size, "seed": cfg.seed,
                     "eval_size": t.eval_size, "eval_seed": t.eval_seed}}))
        results["trl"] = {"allocator": args.trl_allocator, **_side("trl", [str(python), str(Path(__file__).parent / "_trl_side.py"), str(spec),
                                       str(work / "trl.json")], threads, work, work / "trl.json",
                             _preload(args.trl_allocator))}
    results_file.write_text(json.dumps(results))
    if {"rlvr", "trl"} - set(results):
        raise SystemExit(f"no results for {sorted({'rlvr', 'trl'} - set(results))} yet: run without --only")
    rows = {k: summarize(v, steps, args.target) for k, v in results.items()}
    print(f"\nGRPO phase of {config.name} ({cfg.task.name}): {steps} steps x {cfg.train.batch_size} completions "
          f"({cfg.train.batch_size // cfg.train.group_size} prompts x {cfg.train.group_size}), "
          f"{cfg.rollout.max_new_tokens} new tokens, mu={cfg.algorithm.mu}, lr={cfg.optim.lr}, "
          f"beta={cfg.algorithm.beta}; same warm-started model ({warm})")
    for side in ("rlvr", "trl"):
        print(f"{side} side: {results[side]['threads']} torch thread(s), malloc: "
              f"{results[side].get('allocator', 'system')}, {results[side]['versions']}")
    print()
    print(table(rows, steps, args.target))
    faster = rows["trl"]["cpu_per_step"] / rows["rlvr"]["cpu_per_step"]
    print(f"\nrlvr is {faster:.2f}x {'faster' if faster >= 1 else 'SLOWER'} than TRL per step in CPU time "
          f"({'not slower: OK' if faster >= 1 else 'slower: NOT OK'})")


if __name__ == "__main__":
    main()
