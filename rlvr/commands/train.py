"""`rlvr train`, `rlvr sft` and `rlvr demo`: argv -> config -> run.

    rlvr train configs/sort.yaml --set train.steps=200 --set optim.lr=3e-4
    rlvr train --resume runs/sort            # continue after an interruption (even kill -9)
    rlvr train configs/sort.yaml --resume-or-start   # resume out_dir if it has a checkpoint, else start
    rlvr train --help-config                 # every config key, its default and why it exists
    rlvr sft configs/sort.yaml --set sft.steps=300 --out runs/sft
    rlvr demo
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.config import ConfigError

def _overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override a config key, typed by its field (dotted: optim.lr=3e-4); repeatable")


def _train(args: argparse.Namespace) -> int:
    from rlvr.config import config_help, load_config
    from rlvr.train.loop import train, train_to_end

    if args.help_config:
        print("\n".join(config_help()))
        return 0
    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder (no config.yaml)")
        cfg = load_config(args.config or saved, [*args.overrides, f"out_dir={run_dir}"])
    elif args.config is None:
        raise ConfigError("give a CONFIG file (or --resume RUN_DIR); see configs/ for examples")
    else:
        cfg = load_config(args.config, args.overrides)
    if cfg.distributed.backend == "ray":
        from rlvr.distributed.run import train_distributed as train
    if args.resume_or_start:  # also a folder stopped before its first checkpoint: started again
        result = train_to_end(cfg, run_train=train)
    else:
        result = train(cfg, resume=bool(args.resume))
    acc = result.final_eval.get("eval/greedy_accuracy")
    if acc is not None:
        print(f"held-out greedy exact-match accuracy: {acc:.3f}")
    print(f"run folder: {result.run_dir}")
    return 0


# The config keys `rlvr sft` reads: its seed, folder and CPU threads, the start model (not model.lora: the warm
# start trains every weight), the task's demonstrations and held-out set, the sft section, and the engine and token
# budget of the held-out check. A --set of any other key would change nothing (optim.lr, train.steps were accepted
# and ignored); a config file may hold every other section, as `rlvr train`'s does (a model.lora there is refused).
SFT_READS = ("seed", "out_dir", "threads", "model", "task.name", "task.options", "task.train_size", "task.eval_size",
             "task.eval_seed", "sft", "rollout.max_new_tokens", "rollout.engine", "rollout.gpu_memory_utilization",
             "rollout.enable_prefix_caching", "rollout.enable_sleep_mode")
SFT_IGNORES = ("model.lora",)
SFT_NAMES = {"train.steps": "sft.steps", "optim.lr": "sft.lr", "train.batch_size": "sft.batch_size"}


def _covers(prefixes: tuple[str, ...], key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def check_sft_overrides(overrides: list[str]) -> None:
    """Every --set key of `rlvr sft` is one it reads (SFT_READS); a malformed item is load_config's to report."""
    for item in overrides:
        key, sep, _ = item.partition("=")
        if sep and (not _covers(SFT_READS, key) or _covers(SFT_IGNORES, key)):
            hint = f"; did you mean {SFT_NAMES[key]}?" if key in SFT_NAMES else ""
            reads = ", ".join(k + ".*" if k in ("model", "sft") else k for k in SFT_READS)
            raise ConfigError(f"--set {key}: rlvr sft does not read this key, so it would change nothing{hint} (it "
                              f"reads {reads}; not {', '.join(k + '.*' for k in SFT_IGNORES)})")


def _sft(args: argparse.Namespace) -> int:
    import torch

    from rlvr.config import load_config
    from rlvr.models import model_folder, resolve_placement
    from rlvr.tasks import get_task
    from rlvr.train.evaluate import evaluate_heldout
    from rlvr.train.preflight import check_context, check_output_folder, preflight
    from rlvr.train.rollout import inference_engine
    from rlvr.train.setup import held_out_examples, start_model

    if args.model is not None:  # an earlier run's --out folder: the model it saved there (runs/sft/sft_model)
        args.model = str(model_folder(args.model, required=False))
    sets = [f"{key}={value}" for key, value in [("model.path", args.model), ("task.name", args.task),
                                                 ("sft.data", args.data), ("sft.steps", args.steps),
                                                 ("out_dir", args.out)] if value is not None]
    check_sft_overrides(args.overrides)
    cfg = load_config(args.config, [*sets, *args.overrides])
    if cfg.sft.steps < 1:
        raise ConfigError("sft.steps must be >= 1 for `rlvr sft` (use --steps)")
    if cfg.model.lora.r > 0:  # refused from --set by check_sft_overrides; a config file's was ignored unsaid
        raise ConfigError(f"model.lora: rlvr sft trains every weight and does not read model.lora (r="
                          f"{cfg.model.lora.r} in the config); remove it, or leave it to `rlvr train`, whose RL stage "
                          f"uses it")
    resolve_placement(cfg.model)  # model.device, model.dtype: checked before any work
    preflight(cfg, resume=False)
    # an RL run's folder (its metrics, its init_model) or an earlier SFT's model is not written over unasked
    check_output_folder(cfg.out_dir, ["sft_model", "init_model", "metrics.jsonl"], args.overwrite,
                        "--out" if args.out else "out_dir")
    task = get_task(cfg.task.name, **cfg.task.options)
    held_out = held_out_examples(cfg, task)  # before training: the task may not have that many
    check_context(cfg, [ex.prompt for ex in held_out])
    if cfg.threads:  # as `rlvr train` (rlvr.train.setup.prepare_run)
        torch.set_num_threads(cfg.threads)
    run_dir = Path(cfg.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = start_model(cfg, run_dir, task, lambda step, loss: step % 50 == 0 and print(f"step {step}: loss {loss:.4f}"))
    engine = inference_engine(cfg, path)  # as `rlvr train` samples: model.device, model.dtype, rollout.engine
    metrics, _ = evaluate_heldout(engine, task, held_out, cfg.rollout.max_new_tokens, 0, 1.0, 0, 0)
    print(f"held-out greedy exact-match accuracy: {metrics['eval/greedy_accuracy']:.3f}")
    print(f"model: {path}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from rlvr.pipelines.demo import run_demo

    return run_demo(args.out, args.seed, args.overrides)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="run RL (GRPO family) from a YAML config",
                              description="Run the RL loop from a YAML config; see configs/ and docs/training.md.")
    p.add_argument("config", nargs="?", help="YAML config (sections: model, task, sft, rollout, algorithm, "
                                             "train, guard, optim, eval, checkpoint, log, reward, distributed, value)")
    _overrides(p)
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    p.add_argument("--resume-or-start", action="store_true",
                   help="resume the run folder (--resume RUN_DIR, else the config's out_dir) from its latest "
                        "checkpoint, or start it when it has none, also when it stopped before its first checkpoint "
                        "(for jobs that may be preempted)")
    p.add_argument("--help-config", action="store_true", help="list every config key with its help and exit")
    p.set_defaults(func=_train)

    s = subparsers.add_parser("sft", help="supervised warm start: NLL on completion tokens only",
                              description="SFT from a jsonl of {prompt, completion} or from task "
                                          "demonstrations; writes OUT/sft_model.")
    s.add_argument("config", nargs="?", help="YAML config (read: seed, out_dir, model, task, sft, and rollout's "
                                             "max_new_tokens and engine settings for the held-out check; a "
                                             "model.lora with r > 0 is refused: SFT trains every weight)")
    s.add_argument("--model", help="Hugging Face model folder, a .gguf file, an embedded model "
                   "(smollm2-135m-instruct), or the --out folder of an earlier rlvr sft / dpo / reward-model / rft "
                   "run (to go on from its model); default: build the tiny model")
    s.add_argument("--task", help="task for demonstrations and the held-out check (default: sort)")
    s.add_argument("--data", help="jsonl of {prompt, completion} pairs (default: task demonstrations)")
    s.add_argument("--steps", type=int, help="optimizer steps")
    s.add_argument("--out", help="output folder")
    s.add_argument("--overwrite", action="store_true", help="replace sft_model/ (and init_model/) of an earlier run "
                   "in the output folder (without it such a folder is refused before any work)")
    _overrides(s)
    s.set_defaults(func=_sft)

    d = subparsers.add_parser("demo", help="train a tiny model to sort digits with GRPO, on CPU, in minutes",
                              description="Build a tiny model, warm-start it with SFT, improve it with GRPO; "
                                          "print held-out accuracy before and after.")
    d.add_argument("--out", default=None, help="run folder (default: runs/demo-<time>)")
    d.add_argument("--seed", type=int, default=0)
    _overrides(d)
    d.set_defaults(func=_demo)
