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
import time
from dataclasses import fields
from pathlib import Path

from rlvr.commands.grammar import add_config_args, out_override
from rlvr.commands.pipelines import shipped_list
from rlvr.config import Config, ConfigError, config_help


def _train(args: argparse.Namespace) -> int:
    if args.help_config:
        print("\n".join(config_help()))
        return 0
    from rlvr.config import load_config
    from rlvr.train.loop import train, train_to_end
    from rlvr.train.summary import print_summary

    overrides = out_override(args)
    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder (no config.yaml)")
        if args.out is not None:
            raise ConfigError("--resume RUN_DIR names the run folder; leave out --out")
        cfg = load_config(args.config or saved, [*overrides, f"out_dir={run_dir}"])
    elif args.config is None:
        raise ConfigError("give a CONFIG file or the name of a shipped one (`rlvr configs` lists them), or --resume "
                          "RUN_DIR")
    else:
        cfg = load_config(args.config, overrides)
    if cfg.distributed.backend == "ray":
        from rlvr.distributed.run import train_distributed as train
    start = time.perf_counter()
    if args.resume_or_start:  # also a folder stopped before its first checkpoint: started again
        result = train_to_end(cfg, run_train=train)
    else:
        result = train(cfg, resume=bool(args.resume))
    print_summary(result, time.perf_counter() - start)
    return 0


def _sft(args: argparse.Namespace) -> int:
    from rlvr.config.offline import SFTRunConfig

    if args.help_config:
        print("\n".join(config_help(SFTRunConfig)))
        return 0
    import torch

    from rlvr.config import load_config
    from rlvr.models import model_folder, resolve_placement
    from rlvr.train.evaluate import evaluate_heldout
    from rlvr.train.preflight import check_context, check_output_folder, preflight, run_task
    from rlvr.train.rollout import inference_engine
    from rlvr.train.setup import held_out_examples, start_model

    if args.model is not None:  # an earlier run's --out folder: the model it saved there (runs/sft/sft_model)
        args.model = str(model_folder(args.model, required=False))
    sets = [f"{key}={value}" for key, value in [("model.path", args.model), ("task.name", args.task),
                                                 ("sft.data", args.data), ("sft.steps", args.steps)]
            if value is not None]
    cfg = load_config(args.config, [*sets, *out_override(args)], cls=SFTRunConfig).run_config()
    resolve_placement(cfg.model)  # model.device, model.dtype: checked before any work
    preflight(cfg, resume=False)
    # an RL run's folder (its metrics, its init_model) or an earlier SFT's model is not written over unasked
    check_output_folder(cfg.out_dir, ["sft_model", "init_model", "metrics.jsonl"], args.overwrite,
                        "--out" if args.out else "out_dir")
    task = run_task(cfg)
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
    from rlvr.config import load_config

    if args.help_config:  # the demo's own settings (configs/demo.yaml) as the defaults shown
        print("\n".join(config_help(load_config("demo"))))
        return 0
    if args.config is not None:
        raise ConfigError(f"rlvr demo takes no CONFIG (it trains configs/demo.yaml); use `rlvr train {args.config}`")
    from rlvr.pipelines.demo import run_demo

    return run_demo(args.out, args.seed, args.overrides)


def _sections() -> str:
    """The RL config's sections, as its help names them."""
    return ", ".join(fld.name for fld in fields(Config) if isinstance(fld.default_factory, type))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="run RL (GRPO family, PPO) from a YAML config",
                              description="Run the RL loop from a YAML config (a file, or a shipped config by name: "
                                          "rlvr configs); see docs/training.md.",
                              epilog=f"Shipped configs (rlvr configs describes them): {shipped_list()}.")
    add_config_args(p, f"YAML config, or a shipped config's name (rlvr configs); sections: {_sections()}")
    p.add_argument("--out", default=None, help="run folder (the config key out_dir)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    p.add_argument("--resume-or-start", action="store_true",
                   help="resume the run folder (--resume RUN_DIR, else the config's out_dir) from its latest "
                        "checkpoint, or start it when it has none, also when it stopped before its first checkpoint "
                        "(for jobs that may be preempted)")
    p.set_defaults(func=_train)

    s = subparsers.add_parser("sft", help="supervised warm start: NLL on completion tokens only",
                              description="SFT from a jsonl of {prompt, completion} or from task demonstrations; "
                                          "writes OUT/sft_model and prints its held-out greedy accuracy. Takes an "
                                          "rlvr train config (the keys it does not read are left out).")
    add_config_args(s, "YAML config (rlvr sft --help-config lists the keys read: seed, out_dir, threads, model, task, "
                       "sft, rollout's engine settings), or an rlvr train config")
    s.add_argument("--model", help="Hugging Face model folder, a .gguf file, an embedded model "
                   "(smollm2-135m-instruct), or the --out folder of an earlier rlvr sft / dpo / reward-model / rft "
                   "run (to go on from its model); default: build the tiny model (model.path)")
    s.add_argument("--task", help="task for demonstrations and the held-out check (task.name; default: sort)")
    s.add_argument("--data", help="jsonl of {prompt, completion} pairs (sft.data; default: task demonstrations)")
    s.add_argument("--steps", type=int, help="optimizer steps (sft.steps)")
    s.add_argument("--out", help="output folder (out_dir; default: runs/sft)")
    s.add_argument("--overwrite", action="store_true", help="replace sft_model/ (and init_model/) of an earlier run "
                   "in the output folder (without it such a folder is refused before any work)")
    s.set_defaults(func=_sft)

    d = subparsers.add_parser("demo", help="train a tiny model to sort digits with GRPO, on CPU, in minutes",
                              description="Build a tiny model, warm-start it with SFT, improve it with GRPO; "
                                          "print held-out accuracy before and after.")
    add_config_args(d, argparse.SUPPRESS, "override a key of the demo's config (configs/demo.yaml); repeat --set for "
                                          "each key")
    d.add_argument("--out", default=None, help="run folder (default: runs/demo-<time>)")
    d.add_argument("--seed", type=int, default=0, help="seed of the run (the config key seed)")
    d.set_defaults(func=_demo)
