"""`rlvr dpo`, `rlvr reward-model`, `rlvr rft`: the offline trainers from the command line.

    rlvr dpo --model DIR --data pairs.jsonl --set loss=ipo --set optim.lr=1e-6 --out runs/dpo
    rlvr reward-model my_rm.yaml --model DIR --data pairs.jsonl --out runs/rm
    rlvr rft --model DIR --task sort --set rounds=3 --out runs/rft
    rlvr dpo --help-config                      # every key of the trainer's config, its default and source

The command's inputs are flags (--model, --data, --task, --device, ...); the trainer's settings are its config
(`rlvr.config.offline`: a CONFIG file and --set, as `rlvr train`'s). The per-key flags of earlier versions
(`--lr`, `--batch-size`, `--loss`) still work, each with a deprecation line. Bad input (missing file, bad row, bad
value) is one line on stderr and exit code 2, before any model is loaded. `add_parsers(subparsers)` registers the
three commands; heavy modules (torch, transformers) are imported when a command runs, not for its --help.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from rlvr.commands.grammar import add_config_args, add_deprecated_flags
from rlvr.commands.placement_flags import add_placement_flags, config_from_flags
from rlvr.config import config_help, load_config
from rlvr.config.offline import PreferenceConfig, RewardModelConfig, RFTConfig

OUTPUTS = ["model", "metrics.json"]  # what an offline command writes into --out
_OPTIM_FLAGS = ("lr", "max_grad_norm", "weight_decay", "warmup_steps", "schedule", "min_lr_ratio")  # now optim.*


def old_flags(cls: type) -> dict[str, tuple[str, bool]]:
    """{flag name of earlier versions: (its config key, boolean)}: one per scalar key of the trainer's config, the
    optimizer's now under `optim.`."""
    flags = {name: (f"optim.{name}", False) for name in _OPTIM_FLAGS}
    flags.update({fld.name: (fld.name, fld.type == "bool") for fld in fields(cls) if fld.name != "optim"})
    return flags


def _trainer_config(cls: type, args: argparse.Namespace) -> Any:
    return load_config(args.config, args.overrides, cls=cls)


def _save(out: Path, model: Any, tokenizer: Any, metrics: dict[str, Any]) -> None:
    from rlvr.models import save_model

    save_model(model, tokenizer, out / "model")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))


def _report(metrics: dict[str, Any], key: str = "accuracy") -> str:
    before, after = metrics["eval_before"].get(key), metrics["eval_after"].get(key)
    if before is None:
        return "no held-out pairs (eval_fraction 0 and no --eval-data)"
    return f"held-out {key}: {before:.3f} -> {after:.3f} ({metrics['num_eval']} pairs)"


def _check_out(args: argparse.Namespace) -> None:
    from rlvr.train.preflight import check_output_folder

    check_output_folder(args.out, OUTPUTS, args.overwrite)


def _start_model(path: str, causal_lm: bool) -> str:
    """--model: a Hugging Face folder, or the --out folder of an earlier `rlvr dpo`, `reward-model`, `rft` or
    `sft` run, to go on training the model it saved there (`rlvr.models.model_folder`); checked before any work."""
    from rlvr.models import model_folder
    from rlvr.train.preflight import check_model_folder

    folder = str(model_folder(path, required=False))
    check_model_folder(folder, "--model", causal_lm=causal_lm)
    return folder


def _run_pairs(args: argparse.Namespace, command: str, cls: type,
               train: Callable[..., dict[str, Any]], load: Callable[[Any, str], Any]) -> int:
    from transformers import AutoConfig

    from rlvr.algorithms.common import max_positions
    from rlvr.algorithms.preference import check_pair_lengths, load_preference_pairs
    from rlvr.models import load_tokenizer

    config = _trainer_config(cls, args)
    placed = config_from_flags(args, training=True)
    args.model = _start_model(args.model, causal_lm=command != "reward-model")  # an RM may go on training
    pairs = load_preference_pairs(args.data)
    eval_pairs = load_preference_pairs(args.eval_data) if args.eval_data else None
    _check_out(args)
    tokenizer = load_tokenizer(args.model)
    # every pair fits max_length and the model's context: checked on its config, before the model is loaded
    check_pair_lengths(tokenizer, [*pairs, *(eval_pairs or [])], config.max_length,
                       max_positions(AutoConfig.from_pretrained(args.model)))
    model = load(placed.model, args.model)
    on_step = (lambda row: print(json.dumps(row))) if args.verbose else None
    metrics = train(model, tokenizer, pairs, config, eval_pairs=eval_pairs, on_step=on_step)
    _save(Path(args.out), model, tokenizer, metrics)
    print(f"rlvr {command}: {_report(metrics)}; saved to {Path(args.out) / 'model'}")
    return 0


def _help_config(cls: type, args: argparse.Namespace) -> bool:
    """--help-config: print the keys of the trainer's config (True: done)."""
    if args.help_config:
        print("\n".join(config_help(cls)))
    return args.help_config


def _dpo(args: argparse.Namespace) -> int:
    if _help_config(PreferenceConfig, args):
        return 0
    from rlvr.algorithms.preference import train_preference
    from rlvr.models import load_policy  # float32 weights on --device, forward in --dtype

    return _run_pairs(args, "dpo", PreferenceConfig, train_preference, load_policy)


def _load_reward_model(m: Any, path: str) -> Any:
    """A reward model (or one started from a causal LM) placed as `load_policy` places a policy."""
    from rlvr.models import resolve_placement
    from rlvr.rewards.reward_model import load_placed_reward_model

    placement = resolve_placement(m)
    return load_placed_reward_model(path, placement.device, placement.dtype, from_lm=True)


def _reward_model(args: argparse.Namespace) -> int:
    if _help_config(RewardModelConfig, args):
        return 0
    from rlvr.algorithms.reward_model import train_reward_model

    return _run_pairs(args, "reward-model", RewardModelConfig, train_reward_model, _load_reward_model)


def _rft(args: argparse.Namespace) -> int:
    if _help_config(RFTConfig, args):
        return 0
    from rlvr.algorithms.rft import train_rft
    from rlvr.commands.task_options import task_from_cli
    from rlvr.models import load_policy, load_tokenizer
    from rlvr.tasks import TooFewExamples
    from rlvr.rollout.engines import build_engine

    config = _trainer_config(RFTConfig, args)
    placed = config_from_flags(args, training=True)
    args.model = _start_model(args.model, causal_lm=True)
    if args.train_size < 1 or args.eval_size < 0:
        raise ValueError(f"--train-size must be >= 1 and --eval-size >= 0, got {args.train_size}, {args.eval_size}")
    task = task_from_cli(args.task, args.task_option, args.model)
    _check_out(args)
    examples = task.train_examples(args.train_size, config.seed)
    try:
        eval_examples = task.eval_examples(args.eval_size, config.seed) if args.eval_size else None
    except TooFewExamples as err:
        raise ValueError(f"--eval-size {args.eval_size}: {err}") from None
    model, tokenizer = load_policy(placed.model, args.model), load_tokenizer(args.model)
    engine = build_engine(placed, model, tokenizer, args.model)  # rlvr's on the model itself, or vLLM synced per round
    metrics = train_rft(model, tokenizer, engine, examples, task.is_correct, config,
                        eval_examples, on_round=lambda row: print(json.dumps(row)))
    _save(Path(args.out), model, tokenizer, metrics)
    before, after = metrics.get("eval_accuracy_before"), metrics["rounds"][-1].get("eval_accuracy")
    summary = f"greedy accuracy {before:.3f} -> {after:.3f}; " if before is not None else ""
    print(f"rlvr rft: {summary}saved to {Path(args.out) / 'model'}")
    return 0


def _common(parser: argparse.ArgumentParser, out: str, cls: type, engine: bool = False) -> None:
    """The inputs and outputs of an offline command, its config (CONFIG, --set, --help-config) and the flags of
    earlier versions."""
    add_config_args(parser, "YAML of the trainer's keys (rlvr COMMAND --help-config lists them); --set wins over it")
    parser.add_argument("--model", required=False, help="Hugging Face folder of the starting model, a .gguf file, "
                        "an embedded model (smollm2-135m-instruct), or the --out folder of an earlier rlvr dpo / "
                        "reward-model / rft / sft run (to go on from its model)")
    parser.add_argument("--out", default=out, help=f"run folder: model/ and metrics.json are written here (default: "
                                                   f"{out})")
    parser.add_argument("--overwrite", action="store_true", help="replace model/ and metrics.json of an earlier run "
                        "in --out (without it such a folder is refused before any work)")
    parser.add_argument("--verbose", action="store_true", help="print every optimizer step as JSON")
    add_placement_flags(parser, engine=engine)
    add_deprecated_flags(parser, old_flags(cls))


def _pair_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="jsonl of {prompt, chosen, rejected} (required)")
    parser.add_argument("--eval-data", help="held-out jsonl (default: eval_fraction of --data)")


def _required(run: Callable[[argparse.Namespace], int], *flags: str) -> Callable[[argparse.Namespace], int]:
    """`run`, once each of `flags` was given (--help-config needs none of them)."""
    def checked(args: argparse.Namespace) -> int:
        missing = [flag for flag in flags if getattr(args, flag[2:].replace("-", "_")) is None]
        if missing and not args.help_config:
            raise ValueError(f"the following arguments are required: {', '.join(missing)} (see rlvr {args.command} "
                             "--help)")
        return run(args)
    return checked


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    dpo = subparsers.add_parser("dpo", help="offline preference training: DPO, IPO, SimPO, LN-DPO",
                                description="Train a causal LM on (prompt, chosen, rejected) pairs with a preference "
                                            "loss (DPO, IPO, SimPO or length-normalised DPO; "
                                            "docs/preference_sft_rft.md); writes OUT/model and OUT/metrics.json.")
    _common(dpo, "runs/dpo", PreferenceConfig)
    _pair_data(dpo)
    dpo.set_defaults(func=_required(_dpo, "--model", "--data"))

    rm = subparsers.add_parser("reward-model", help="train a Bradley-Terry reward model on preference pairs",
                               description="Train a reward model (a causal LM with a scalar head) on (prompt, chosen, "
                                           "rejected) pairs with the Bradley-Terry loss; writes OUT/model (usable as "
                                           "the reward of an RL run) and OUT/metrics.json.")
    _common(rm, "runs/reward_model", RewardModelConfig)
    _pair_data(rm)
    rm.set_defaults(func=_required(_reward_model, "--model", "--data"))

    rft = subparsers.add_parser("rft", help="rejection-sampling fine-tuning / expert iteration on a task",
                                description="Sample completions of a task's prompts, keep those its verifier accepts, "
                                            "fine-tune on them (packed SFT); more rounds are expert iteration. Writes "
                                            "OUT/model and OUT/metrics.json.")
    _common(rft, "runs/rft", RFTConfig, engine=True)
    rft.add_argument("--task", default="sort", help="task name (rlvr.tasks.get_task)")
    rft.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                     help="task option, repeatable (e.g. length=3)")
    rft.add_argument("--train-size", type=int, default=256, help="training prompts sampled from the task")
    rft.add_argument("--eval-size", type=int, default=64, help="held-out prompts for greedy accuracy (0: none)")
    rft.set_defaults(func=_required(_rft, "--model"))
