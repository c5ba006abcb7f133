"""`rlvr eval --model DIR --task NAME`: greedy and sampled evaluation, a summary table, a jsonl.

The CLI owner wires it in with `rlvr.commands.eval.add_parser(subparsers)`; the parser's default
`func` runs it and returns the exit code (0). Bad options raise ValueError with a one-line message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr.commands.outputs import make_out_folder, resolve_out_file
from rlvr.commands.placement_flags import add_placement_flags, config_from_flags
from rlvr.commands.task_options import task_from_cli

_ORDER = ("accuracy", "reward", "mean_length", "format_error_rate", "formatted_wrong_rate", "truncation_rate")


def _k_list(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k expects comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--k values must be >= 1, got {text!r}")
    return sorted(set(ks))  # 1,1,2 asks for pass@1 and pass@2


def parse_budgets(text: str) -> list[int]:
    """`"64,128,256"` -> [64, 128, 256]; argparse type for `--thinking-budget`."""
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"thinking budgets must be comma-separated integers, got {text!r}") from None
    if not budgets or any(b < 1 for b in budgets):
        raise argparse.ArgumentTypeError(f"thinking budgets must be positive integers, got {text!r}")
    return budgets


def add_thinking_budget_args(parser: argparse.ArgumentParser) -> None:
    """Add `--thinking-budget 64,128,256` and `--answer-tokens N` to an eval parser."""
    parser.add_argument("--thinking-budget", type=parse_budgets, default=None, metavar="B1,B2,...",
                        help="evaluate with thinking cut at each budget (Qwen3 early-stop phrase) and plot "
                             "accuracy against budget")
    parser.add_argument("--answer-tokens", type=int, default=None,
                        help="most new tokens for the answer after the thinking (default: --max-new-tokens, "
                             "else what the model's context leaves after the prompt, the largest budget and the "
                             "early-stop text, at most 512)")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("eval", help="evaluate a model on a task (greedy and sampled)",
                              description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model folder, a .gguf file, an embedded "
                   "model (smollm2-135m-instruct), or the --out folder of an rlvr dpo / rft / sft run (its model)")
    p.add_argument("--task", required=True, help="task name (rlvr.tasks.TASKS)")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                   help="task option, repeatable (e.g. template=chat)")
    p.add_argument("--num-examples", type=int, default=100, help="held-out problems (0 = all)")
    p.add_argument("--n", type=int, default=4, help="samples per problem in sampled mode (0 = greedy only)")
    p.add_argument("--k", type=_k_list, default=None, help="k values for pass@k/maj@k (default 1,...,n)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"new tokens per completion (default: {DEFAULT_NEW_TOKENS}, or what the model's context "
                        "leaves after the longest prompt when that is less)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampled mode temperature")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="held-out selection and sampling seed")
    p.add_argument("--batch-size", type=int, default=None, help="max sequences decoded at once (hf engine)")
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


DEFAULT_NEW_TOKENS = 512


def _fit(engine, longest: int, asked: int | None, flag: str, where: str, what: str) -> int:
    """New tokens after `longest` prompt tokens (`what`): `asked` (by `flag`) checked to fit the model's context,
    or the default capped to what the context leaves (the tiny demo model has 512 positions: 512 new tokens
    never fit, and `rlvr eval` with its defaults failed on it). A prompt that fills the context names `where`."""
    positions = engine.max_positions
    if positions is not None and longest >= positions:
        raise ValueError(f"{where}: {what} ({longest} tokens) fills the model's context ({positions} positions): "
                         "evaluate a model whose config.json has a larger max_position_embeddings")
    if asked is None:
        return DEFAULT_NEW_TOKENS if positions is None else min(DEFAULT_NEW_TOKENS, positions - longest)
    if positions is not None and longest + asked > positions:
        raise ValueError(f"{flag} {asked}: {what} ({longest} tokens) + {asked} exceeds the model's "
                         f"max_position_embeddings ({positions}); at most {positions - longest} fit")
    return asked


def _new_tokens(args: argparse.Namespace, engine, prompts: list[str]) -> tuple[int, int]:
    """(new tokens per completion, new tokens of the answer after the thinking under --thinking-budget), both
    checked against the model's context before any work. The answer's prompt is a prompt, the largest budget's
    thinking and the early-stop text: sized for the plain prompts only, the sweep failed after the eval."""
    from rlvr.thinking.budget import EARLY_STOP_TEXT

    def tokens(texts: list[str], special: bool) -> int:
        return max(map(len, engine.tokenizer(texts, add_special_tokens=special)["input_ids"]))

    longest = tokens(prompts, engine.add_special_tokens)
    new = _fit(engine, longest, args.max_new_tokens, "--max-new-tokens", "--model", "the longest prompt")
    if not args.thinking_budget:
        return new, new
    budget = max(args.thinking_budget)
    # an upper bound: prompt, thinking and early-stop text tokenised apart (together they may merge at the seams)
    answer_prompt = longest + budget + tokens([EARLY_STOP_TEXT], False)
    flag = "--answer-tokens" if args.answer_tokens is not None else "--max-new-tokens"
    answer = _fit(engine, answer_prompt, args.answer_tokens or args.max_new_tokens, flag,
                  f"--thinking-budget {budget}", f"the longest prompt + {budget} thinking + the early-stop text")
    return new, answer


def check_flags(args: argparse.Namespace) -> None:
    """The numeric flags, before any work: each bad one is one line naming it."""
    if args.n < 0 or args.num_examples < 0:
        raise ValueError("--n and --num-examples must be >= 0")
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1 (or left out: all at once), got {args.batch_size}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.answer_tokens is not None and args.answer_tokens < 1:
        raise ValueError(f"--answer-tokens must be >= 1, got {args.answer_tokens}")
    if args.temperature < 0:
        raise ValueError(f"--temperature must be >= 0, got {args.temperature:g}")
    if not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p:g}")
    if args.n == 0 and args.k:
        ks = ",".join(map(str, args.k))
        raise ValueError(f"--k {ks}: pass@k and maj@k need sampled mode; --n is 0 (greedy only)")
    if args.n > 0 and args.k and max(args.k) > args.n:
        raise ValueError(f"--k {max(args.k)} needs at least that many samples per problem; --n is {args.n}")


def out_file(args: argparse.Namespace) -> Path:
    """Where the graded samples go: --out, or eval_TASK.jsonl in it when it is a folder (as `rlvr report --out`
    does), default in the model folder; an existing file only if an earlier eval wrote it. Checked before the
    model loads (`make_out_folder` makes the folder later)."""
    from rlvr.eval.evaluate import is_eval_jsonl

    out = resolve_out_file(args.out, Path(args.model) / f"eval_{args.task}.jsonl", "--out", is_eval_jsonl,
                           "a jsonl of graded samples written by `rlvr eval`")
    return out


def _problems(examples: list) -> str:
    return f"{len(examples)} problem{'s' * (len(examples) != 1)}"


def run(args: argparse.Namespace) -> int:
    run_eval(args)
    return 0


def run_eval(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Greedy (n = 1) then sampled (n = --n) evaluation; returns {mode: metrics}."""
    from rlvr.eval.evaluate import evaluate
    from rlvr.models import model_folder
    from rlvr.rollout.base import SamplingParams
    from rlvr.thinking.sweep import run_budget_eval
    from rlvr.tasks import TooFewExamples
    from rlvr.train.preflight import check_model_folder
    from rlvr.train.rollout import inference_engine

    check_flags(args)
    args.model = str(model_folder(args.model, required=False))  # an rlvr dpo/rft/sft --out folder: its model
    check_model_folder(args.model, "--model", causal_lm=True)
    task = task_from_cli(args.task, args.task_option, args.model)
    try:
        examples = task.eval_examples(args.num_examples, args.seed)
    except TooFewExamples as err:
        raise ValueError(f"--num-examples {args.num_examples}: {err}") from None
    out = out_file(args)
    engine = inference_engine(config_from_flags(args, training=False), args.model, args.batch_size)
    args.max_new_tokens, answer_tokens = _new_tokens(args, engine, [ex.prompt for ex in examples])
    make_out_folder(out.parent, "--out")
    if 0 < len(examples) < args.num_examples:  # a data file's held-out share is smaller than asked
        note = getattr(task, "held_out_note", None)
        print(f"rlvr eval: note: --num-examples {args.num_examples}: evaluating the {_problems(examples)} "
              f"{args.task} holds out" + (f" ({note()})" if note else ""), file=sys.stderr)
    out.unlink(missing_ok=True)
    results = {"greedy": evaluate(engine, task, examples, 1, SamplingParams(
        temperature=0.0, max_new_tokens=args.max_new_tokens, seed=args.seed), (1,), out, "greedy")}
    if args.n > 0:
        sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p,
                                  max_new_tokens=args.max_new_tokens, seed=args.seed)
        ks = args.k or sorted({1, *[2 ** i for i in range(1, args.n.bit_length()) if 2 ** i <= args.n], args.n})
        results[f"sampled (n={args.n}, T={args.temperature:g})"] = evaluate(
            engine, task, examples, args.n, sampling, ks, out, "sampled")
    print_summary(results, f"{args.task} on {args.model}: {_problems(examples)}")
    print(f"graded samples: {out}")
    if args.thinking_budget:  # Qwen3's thinking budget: accuracy against budget, table + plot
        run_budget_eval(args, engine, task, examples, out.parent, sampling=SamplingParams(
            temperature=0.0, max_new_tokens=answer_tokens, seed=args.seed))
    return results
