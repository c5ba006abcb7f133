"""`rlvr dpo`, `rlvr reward-model`, `rlvr rft`: the offline trainers from the command line.

    rlvr dpo --model DIR --data pairs.jsonl --loss dpo|ipo|simpo|ln_dpo --out runs/dpo
    rlvr reward-model --model DIR --data pairs.jsonl --out runs/rm
    rlvr rft --model DIR --task sort --rounds 3 --out runs/rft

`add_parsers(subparsers)` registers the three commands on the main `rlvr` parser; each stores
`args.func(args) -> exit code`. Every config field is a flag (`--micro-batch-size`), with the help
text of the dataclass field. Bad input (missing file, bad row, bad value) is one line on stderr and
exit code 2, before any model is loaded.
"""

from __future__ import annotations

import argparse
import json
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Callable

from rlvr.algorithms.common import max_positions
from rlvr.algorithms.preference import PreferenceConfig, check_pair_lengths, load_preference_pairs
from rlvr.algorithms.reward_model import RewardModelConfig
from rlvr.algorithms.rft import RFTConfig
from rlvr.commands.placement_flags import add_placement_flags, config_from_flags
from rlvr.commands.task_options import task_from_cli
from rlvr.train.preflight import check_model_folder

_SCALARS = (int, float, str, bool)


def _scalar_type(hint: Any) -> type:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if args else hint
    if base not in _SCALARS:
        raise TypeError(f"no command-line type for {hint!r}")
    return base


def add_config_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One `--field-name` flag per dataclass field, typed and documented by the field."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        kind = _scalar_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        text = f"{f.metadata.get('help', '')} (default: {default})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
        else:
            parser.add_argument(flag, type=kind, default=default, help=text)


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    config = cls(**{f.name: getattr(args, f.name) for f in fields(cls)})
    config.validate()
    return config


OUTPUTS = ["model", "metrics.json"]  # what an offline command writes into --out


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

    folder = str(model_folder(path, required=False))
    check_model_folder(folder, "--model", causal_lm=causal_lm)
    return folder


def _run_pairs(args: argparse.Namespace, command: str, cls: type,
               train: Callable[..., dict[str, Any]], load: Callable[[Any, str], Any]) -> int:
    config = config_from_args(cls, args)
    placed = config_from_flags(args, training=True)
    args.model = _start_model(args.model, causal_lm=command != "reward-model")  # an RM may go on training
    pairs = load_preference_pairs(args.data)
    eval_pairs = load_preference_pairs(args.eval_data) if args.eval_data else None
    _check_out(args)
    from transformers import AutoConfig
    from rlvr.models import load_tokenizer
    tokenizer = load_tokenizer(args.model)
    # every pair fits --max-length and the model's context: checked on its config, before the model is loaded
    check_pair_lengths(tokenizer, [*pairs, *(eval_pairs or [])], config.max_length,
                       max_positions(AutoConfig.from_pretrained(args.model)))
    model = load(placed.model, args.model)
    on_step = (lambda row: print(json.dumps(row))) if args.verbose else None
    metrics = train(model, tokenizer, pairs, config, eval_pairs=eval_pairs, on_step=on_step)
    _save(Path(args.out), model, tokenizer, metrics)
    print(f"rlvr {command}: {_report(metrics)}; saved to {Path(args.out) / 'model'}")
    return 0


def _dpo(args: argparse.Namespace) -> int:
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
    from rlvr.algorithms.reward_model import train_reward_model

    return _run_pairs(args, "reward-model", RewardModelConfig, train_reward_model, _load_reward_model)


def _rft(args: argparse.Namespace) -> int:
    from rlvr.algorithms.rft import train_rft
    from rlvr.models import load_policy, load_tokenizer
    from rlvr.tasks import TooFewExamples
    from rlvr.rollout.engines import build_engine

    config = config_from_args(RFTConfig, args)
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


def _common(parser: argparse.ArgumentParser, out: str) -> None:
    parser.add_argument("--model", required=True, help="Hugging Face folder of the starting model, a .gguf file, "
                        "an embedded model (smollm2-135m-instruct), or the --out folder of an earlier rlvr dpo / "
                        "reward-model / rft / sft run (to go on from its model)")
    parser.add_argument("--out", default=out, help="run folder: model/ and metrics.json are written here")
    parser.add_argument("--overwrite", action="store_true", help="replace model/ and metrics.json of an earlier run "
                        "in --out (without it such a folder is refused before any work)")
    parser.add_argument("--verbose", action="store_true", help="print every optimizer step as JSON")


def _pair_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="jsonl of {prompt, chosen, rejected}")
    parser.add_argument("--eval-data", help="held-out jsonl (default: eval_fraction of --data)")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    dpo = subparsers.add_parser("dpo", help="offline preference training: DPO, IPO, SimPO, LN-DPO")
    _common(dpo, "runs/dpo")
    add_placement_flags(dpo)
    _pair_data(dpo)
    add_config_flags(dpo, PreferenceConfig)
    dpo.set_defaults(func=_dpo)

    rm = subparsers.add_parser("reward-model", help="train a Bradley-Terry reward model on preference pairs")
    _common(rm, "runs/reward_model")
    add_placement_flags(rm)
    _pair_data(rm)
    add_config_flags(rm, RewardModelConfig)
    rm.set_defaults(func=_reward_model)

    rft = subparsers.add_parser("rft", help="rejection-sampling fine-tuning / expert iteration on a task")
    _common(rft, "runs/rft")
    add_placement_flags(rft, engine=True)
    rft.add_argument("--task", default="sort", help="task name (rlvr.tasks.get_task)")
    rft.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                     help="task option, repeatable (e.g. length=3)")
    rft.add_argument("--train-size", type=int, default=256, help="training prompts sampled from the task")
    rft.add_argument("--eval-size", type=int, default=64, help="held-out prompts for greedy accuracy (0: none)")
    add_config_flags(rft, RFTConfig)
    rft.set_defaults(func=_rft)
