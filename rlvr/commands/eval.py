"""`rlvr eval --model DIR --task NAME`: greedy and sampled evaluation, a summary table, a jsonl.

    rlvr eval --model runs/sft/sft_model --task sort --n 8 --temperature 0.7
    rlvr eval my_eval.yaml --set eval.samples=8 --set rollout.engine=hf --out evals/
    rlvr eval --help-config                     # every key, its default and source

Its settings are a config (`rlvr.config.evaluation.EvalRunConfig`: a CONFIG file and `--set KEY=VALUE`, as every
command's); its flags (--model, --task, --n, --temperature, ...) are aliases of keys (`ALIASES`), --set wins over
them, and an error about a value a flag gave names the flag. `add_parser(subparsers)` registers the command; its
`func` runs it and returns the exit code (0). Bad input raises ValueError (ConfigError) with a one-line message.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from rlvr.commands.grammar import add_config_args, settle
from rlvr.commands.outputs import make_out_folder, resolve_out_file
from rlvr.commands.placement_flags import add_placement_flags, check_placement, named
from rlvr.commands.task_options import flag_named, parse_task_options, task_from_options
from rlvr.config import ConfigError, config_help, load_config
from rlvr.config.evaluation import DEFAULT_NEW_TOKENS, EvalRunConfig

_ORDER = ("accuracy", "reward", "mean_length", "format_error_rate", "formatted_wrong_rate", "truncation_rate")

# flag (its argparse dest) -> the config key it sets; --task-option KEY=VALUE sets task.options.KEY
ALIASES = {"model": "model.path", "task": "task.name", "num_examples": "num_examples", "n": "eval.samples",
           "k": "eval.k", "max_new_tokens": "rollout.max_new_tokens", "temperature": "eval.temperature",
           "top_p": "eval.top_p", "seed": "seed", "batch_size": "rollout.batch_size", "device": "model.device",
           "dtype": "model.dtype", "engine": "rollout.engine", "thinking_budget": "thinking.budgets",
           "answer_tokens": "thinking.answer_tokens"}


def _positive_ints(text: str, what: str) -> list[int]:
    """`"4,1,2"` -> [4, 1, 2]: at least one integer, each >= 1, else one argparse error line naming `what`."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{what} must be comma-separated integers >= 1, got {text!r}")
    return values


def _k_list(text: str) -> list[int]:
    return sorted(set(_positive_ints(text, "--k values")))  # 1,1,2 asks for pass@1 and pass@2


def parse_budgets(text: str) -> list[int]:
    """`"64,128,256"` -> [64, 128, 256]; argparse type for `--thinking-budget`."""
    return _positive_ints(text, "thinking budgets")


def add_thinking_budget_args(parser: argparse.ArgumentParser) -> None:
    """Add `--thinking-budget 64,128,256` and `--answer-tokens N` to an eval parser."""
    parser.add_argument("--thinking-budget", type=parse_budgets, default=None, metavar="B1,B2,...",
                        help="thinking.budgets: evaluate with thinking cut at each budget (Qwen3 early-stop phrase) "
                             "and plot accuracy against budget")
    parser.add_argument("--answer-tokens", type=int, default=None,
                        help="thinking.answer_tokens: most new tokens for the answer after the thinking (default: "
                             "--max-new-tokens, else what the model's context leaves after the prompt, the largest "
                             f"budget and the early-stop text, at most {DEFAULT_NEW_TOKENS})")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("eval", help="evaluate a model on a task (greedy and sampled)",
                              description=__doc__.split("\n")[0])
    add_config_args(p, "YAML of rlvr eval's keys (rlvr eval --help-config lists them); the flags below are aliases "
                       "of keys, and --set wins over both")
    p.add_argument("--model", help="model.path (required): Hugging Face model folder, a .gguf file, an embedded "
                   "model (smollm2-135m-instruct), or the --out folder of an rlvr dpo / rft / sft run (its model)")
    p.add_argument("--task", help="task.name (required): task name (rlvr.tasks.TASKS)")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                   help="task.options.KEY, repeatable (e.g. template=chat)")
    p.add_argument("--num-examples", type=int, help="num_examples: held-out problems (default 100; 0 = all)")
    p.add_argument("--n", type=int, help="eval.samples: samples per problem in sampled mode (default 4; 0 = greedy "
                                          "only)")
    p.add_argument("--k", type=_k_list, help="eval.k: k values for pass@k/maj@k, e.g. 1,4 (default 1,...,n)")
    p.add_argument("--max-new-tokens", type=int,
                   help=f"rollout.max_new_tokens: new tokens per completion (default: {DEFAULT_NEW_TOKENS}, or what "
                        "the model's context leaves after the longest prompt when that is less)")
    p.add_argument("--temperature", type=float, help="eval.temperature: sampled mode temperature (default 1)")
    p.add_argument("--top-p", type=float, help="eval.top_p: sampled mode nucleus threshold (default 1: off)")
    p.add_argument("--seed", type=int, help="seed: held-out selection and sampling seed (default 0)")
    p.add_argument("--batch-size", type=int, help="rollout.batch_size: max sequences decoded at once (hf engine)")
    add_placement_flags(p, engine=True)
    p.add_argument("--out", default=None,
                   help="jsonl of graded samples, or a folder to write eval_TASK.jsonl in (an existing one, or a path "
                        "ending in '/'); missing folders are made; an existing file is written over only if it is an "
                        "earlier eval's jsonl (default: MODEL/eval_TASK.jsonl, replaced on each run)")
    add_thinking_budget_args(p)
    p.set_defaults(func=run)
    return p


def print_summary(results: dict[str, dict[str, float]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for mode in results:
        table.add_column(mode, justify="right")
    names = [m for m in _ORDER if any(m in r for r in results.values())]
    names += sorted({m for r in results.values() for m in r if m.startswith(("pass@", "maj@"))},
                    key=lambda m: (m.split("@")[0], int(m.split("@")[1])))
    for name in names + ["prompts", "samples_per_prompt"]:
        cells = [results[mode].get(name) for mode in results]
        table.add_row(name, *["-" if v is None else (f"{v:.0f}" if name in ("prompts", "samples_per_prompt")
                                                      else f"{v:.4g}") for v in cells])
    Console().print(table)


def eval_config(args: argparse.Namespace) -> tuple[EvalRunConfig, dict[str, str], Callable[[str], str]]:
    """The config: CONFIG < the flags given < --set. With it, {key: flag} of the keys a flag set and --set did not
    (an error about such a value names the flag), and how an error names a task option (`--task-option KEY`, or
    `task.options.KEY` where CONFIG or --set gave it)."""
    if "configs" in vars(args):  # main() settles CONFIG among the positionals; a parser built in code leaves it
        settle(args, "rlvr eval")
    set_keys = {item.partition("=")[0] for item in args.overrides}
    given = {dest: getattr(args, dest) for dest in ALIASES if getattr(args, dest) is not None}
    names = {ALIASES[dest]: "--" + dest.replace("_", "-") for dest in given if ALIASES[dest] not in set_keys}
    flags = [f"{ALIASES[dest]}={json.dumps(value) if isinstance(value, list) else value}"
             for dest, value in given.items()]
    try:
        cfg = load_config(getattr(args, "config", None), [*flags, *args.overrides], cls=EvalRunConfig)
    except ConfigError as err:
        raise ConfigError(named(str(err), names)) from None
    options = parse_task_options(cfg.task.name, args.task_option)
    mine = {key: value for key, value in options.items()
            if "task.options" not in set_keys and f"task.options.{key}" not in set_keys}
    from_config = set(cfg.task.options) - set(mine)
    cfg.task.options.update(mine)
    return cfg, names, lambda key: f"task.options.{key}" if key in from_config else flag_named(key)


def _shown(names: dict[str, str], key: str, value: Any) -> str:
    """A setting as the user gave it: `--max-new-tokens 600` by its flag, else `rollout.max_new_tokens=600`."""
    return f"{names[key]} {value}" if key in names else f"{key}={value}"


def _fit(engine, longest: int, asked: int | None, label: str, where: str, what: str) -> int:
    """New tokens after `longest` prompt tokens (`what`): `asked` (given as `label`) checked to fit the model's
    context, or the default capped to what the context leaves (the tiny demo model has 512 positions: 512 new tokens
    never fit, and `rlvr eval` with its defaults failed on it). A prompt that fills the context names `where`."""
    positions = engine.max_positions
    if positions is not None and longest >= positions:
        raise ValueError(f"{where}: {what} ({longest} tokens) fills the model's context ({positions} positions): "
                         "evaluate a model whose config.json has a larger max_position_embeddings")
    if asked is None:
        return DEFAULT_NEW_TOKENS if positions is None else min(DEFAULT_NEW_TOKENS, positions - longest)
    if positions is not None and longest + asked > positions:
        raise ValueError(f"{label}: {what} ({longest} tokens) + {asked} exceeds the model's "
                         f"max_position_embeddings ({positions}); at most {positions - longest} fit")
    return asked


def _new_tokens(cfg: EvalRunConfig, names: dict[str, str], engine, prompts: list[str]) -> tuple[int, int]:
    """(new tokens per completion, new tokens of the answer after the thinking under thinking.budgets), both
    checked against the model's context before any work. The answer's prompt is a prompt, the largest budget's
    thinking and the early-stop text: sized for the plain prompts only, the sweep failed after the eval."""
    from rlvr.thinking.budget import EARLY_STOP_TEXT

    def tokens(texts: list[str], special: bool) -> int:
        return max(map(len, engine.tokenizer(texts, add_special_tokens=special)["input_ids"]))

    longest, asked = tokens(prompts, engine.add_special_tokens), cfg.rollout.max_new_tokens
    new = _fit(engine, longest, asked, _shown(names, "rollout.max_new_tokens", asked),
               names.get("model.path", "model.path"), "the longest prompt")
    if not cfg.thinking.budgets:
        return new, new
    budget = max(cfg.thinking.budgets)
    # an upper bound: prompt, thinking and early-stop text tokenised apart (together they may merge at the seams)
    answer_prompt = longest + budget + tokens([EARLY_STOP_TEXT], False)
    key = "thinking.answer_tokens" if cfg.thinking.answer_tokens is not None else "rollout.max_new_tokens"
    asked = cfg.thinking.answer_tokens or asked
    answer = _fit(engine, answer_prompt, asked, _shown(names, key, asked), _shown(names, "thinking.budgets", budget),
                  f"the longest prompt + {budget} thinking + the early-stop text")
    return new, answer


def out_file(out: str | None, model: str, task: str) -> Path:
    """Where the graded samples go: --out, or eval_TASK.jsonl in it when it is a folder (as `rlvr report --out`
    does), default in the model folder; an existing file only if an earlier eval wrote it. Checked before the
    model loads (`make_out_folder` makes the folder later)."""
    from rlvr.eval.evaluate import is_eval_jsonl

    return resolve_out_file(out, Path(model) / f"eval_{task}.jsonl", "--out", is_eval_jsonl,
                            "a jsonl of graded samples written by `rlvr eval`")


def _problems(examples: list) -> str:
    return f"{len(examples)} problem{'s' * (len(examples) != 1)}"


def run(args: argparse.Namespace) -> int:
    if args.help_config:
        print("\n".join(config_help(EvalRunConfig)))
        return 0
    run_eval(args)
    return 0


def run_eval(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Greedy (n = 1) then sampled (n = eval.samples) evaluation; returns {mode: metrics}."""
    from rlvr.eval.evaluate import evaluate
    from rlvr.eval.metrics import default_ks
    from rlvr.models import model_folder
    from rlvr.rollout.base import SamplingParams
    from rlvr.thinking.sweep import run_budget_eval
    from rlvr.tasks import TooFewExamples
    from rlvr.train.preflight import check_model_folder
    from rlvr.train.rollout import inference_engine

    cfg, names, option_named = eval_config(args)
    placed = check_placement(cfg.run_config(), False, names)  # model.device, model.dtype, rollout.engine
    model = str(model_folder(cfg.model.path, required=False))  # an rlvr dpo/rft/sft --out folder: its model
    check_model_folder(model, names.get("model.path", "model.path"), causal_lm=True)
    task = task_from_options(cfg.task.name, cfg.task.options, model, option_named)
    try:
        examples = task.eval_examples(cfg.num_examples, cfg.seed)
    except TooFewExamples as err:
        raise ValueError(f"{_shown(names, 'num_examples', cfg.num_examples)}: {err}") from None
    out = out_file(args.out, model, cfg.task.name)
    engine = inference_engine(placed, model, cfg.rollout.batch_size)
    new_tokens, answer_tokens = _new_tokens(cfg, names, engine, [ex.prompt for ex in examples])
    make_out_folder(out.parent, "--out")
    if 0 < len(examples) < cfg.num_examples:  # a data file's held-out share is smaller than asked
        note = getattr(task, "held_out_note", None)
        print(f"rlvr eval: note: {_shown(names, 'num_examples', cfg.num_examples)}: evaluating the "
              f"{_problems(examples)} {cfg.task.name} holds out" + (f" ({note()})" if note else ""), file=sys.stderr)
    out.unlink(missing_ok=True)
    results = {"greedy": evaluate(engine, task, examples, 1, SamplingParams(
        temperature=0.0, max_new_tokens=new_tokens, seed=cfg.seed), (1,), out, "greedy")}
    n, sampled = cfg.eval.samples, cfg.eval
    if n > 0:
        sampling = SamplingParams(temperature=sampled.temperature, top_p=sampled.top_p, max_new_tokens=new_tokens,
                                  seed=cfg.seed)
        ks = sampled.k or default_ks(n)
        results[f"sampled (n={n}, T={sampled.temperature:g})"] = evaluate(
            engine, task, examples, n, sampling, sorted(set(ks)), out, "sampled")
    print_summary(results, f"{cfg.task.name} on {model}: {_problems(examples)}")
    print(f"graded samples: {out}")
    if cfg.thinking.budgets:  # Qwen3's thinking budget: accuracy against budget, table + plot
        sweep = argparse.Namespace(thinking_budget=cfg.thinking.budgets, answer_tokens=answer_tokens)
        run_budget_eval(sweep, engine, task, examples, out.parent, sampling=SamplingParams(
            temperature=0.0, max_new_tokens=answer_tokens, seed=cfg.seed))
    return results
