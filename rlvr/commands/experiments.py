"""`rlvr experiment ...`: the lecture experiments from the command line.

    rlvr experiment sort-toy --delta all --out runs/sort_toy
    rlvr experiment sort-toy --delta normalized --reward all --prompts repeated --seeds 8
    rlvr experiment two-state
    rlvr experiment lecture17 --out docs/lecture17

`add_parser(subparsers)` registers the `experiment` command on the main `rlvr` parser; the chosen
sub-command's function is stored as `args.func(args) -> exit code`.
"""

from __future__ import annotations

import argparse

from rlvr.commands.outputs import check_out_folder, make_out_folder

# the names of the sort toy's deltas, rewards and prompt sets (rlvr.pipelines.experiments: DELTAS, SORT_REWARDS,
# PROMPT_SETS), here for the parser: those modules import torch, which `--help` must not
DELTA_NAMES = ("raw", "centered", "normalized", "max_only")
REWARD_NAMES = ("exact", "position", "inclusion")
PROMPT_SET_NAMES = ("lecture", "repeated")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def sort_toy_configs(args: argparse.Namespace) -> dict:
    """{label: config} of every run, all checked before the first one trains."""
    from rlvr.pipelines.experiments.sort_rewards import PROMPT_SETS
    from rlvr.pipelines.experiments.sort_toy import SortToyConfig

    deltas = list(DELTA_NAMES) if args.delta == "all" else [args.delta]
    rewards = list(REWARD_NAMES) if args.reward == "all" else [args.reward]
    if "normalized" in deltas and args.responses < 2:
        raise ValueError(f"--responses {args.responses}: --delta {args.delta} runs the normalized delta, which "
                         "needs at least 2 responses per prompt (a std); raise --responses or pick another --delta")
    configs = {}
    for delta in deltas:
        for reward in rewards:
            label = "/".join([delta] * (len(deltas) > 1 or len(rewards) == 1) + [reward] * (len(rewards) > 1))
            configs[label] = SortToyConfig(
                delta=delta, reward=reward, prompts=PROMPT_SETS[args.prompts], epochs=args.epochs,
                inner_steps=args.inner_steps, responses=args.responses, lr=args.lr, seed=args.seed, seeds=args.seeds)
    return configs


def _sort_toy(args: argparse.Namespace) -> int:
    from rlvr.pipelines.experiments.sort_toy import format_table, plot_sort_toy, run_sort_toy, save_metrics

    configs = sort_toy_configs(args)
    name = "_".join(["sort_toy", args.delta] + [args.reward] * (args.reward != "inclusion")
                    + [args.prompts] * (args.prompts != "lecture"))
    out = make_out_folder(check_out_folder(args.out, "--out", (f"{name}.png", f"{name}.jsonl")), "--out")
    results = {label: run_sort_toy(config) for label, config in configs.items()}
    print(format_table(results))
    png = plot_sort_toy(results, out / f"{name}.png")
    jsonl = save_metrics(results, out / f"{name}.jsonl")
    print(f"plot: {png}\nmetrics: {jsonl}")
    return 0


def _lecture17(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rlvr.pipelines.experiments.lecture17 import QUICK, Lecture17Sizes, run_lecture17  # imports the trainer

    out, runs = check_out_folder(args.out, "--out", ("report.md",)), check_out_folder(args.runs, "--runs")
    make_out_folder(out, "--out")
    make_out_folder(runs, "--runs")
    sizes = QUICK if args.quick else Lecture17Sizes()
    report, claims = run_lecture17(args.out, args.runs, replace(sizes, workers=args.workers or sizes.workers))
    if args.quick:
        print("quick run (--quick): checks the pipeline only; no claim is tested")
    for c in claims:
        print(f"{'not tested' if args.quick else c.verdict:>13}  {c.lecture}: {c.measured}")
    print(f"report: {report}")
    return 0


def _two_state(args: argparse.Namespace) -> int:
    from rlvr.pipelines.experiments.two_state import check_against_core, format_two_state, two_state_example

    result = two_state_example()
    print(format_two_state(result, check_against_core(result)))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("experiment", help="the lecture experiments (sorting toy, two-state baseline)")
    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)

    toy = sub.add_parser("sort-toy", help="policy gradient on 3-number sorting with raw/centered/normalized/"
                                          "max_only deltas (CS336 lecture 17)")
    toy.add_argument("--delta", choices=[*DELTA_NAMES, "all"], default="all",
                     help="which delta multiplies grad log pi; 'all' runs the four and draws them on one figure")
    toy.add_argument("--reward", choices=[*REWARD_NAMES, "all"], default="inclusion",
                     help="reward design (lecture 17): exact (0/1), position (matching positions), inclusion "
                          "(prompt tokens present + ordered pairs, hackable with repeated tokens); "
                          "'all' runs the three")
    toy.add_argument("--prompts", choices=list(PROMPT_SET_NAMES), default="lecture",
                     help="lecture: [1 0 2], [3 2 4], [1 2 3]; repeated: prompts that repeat a token, where the "
                          "inclusion reward has maximum-reward answers that are not sorted")
    toy.add_argument("--epochs", type=_positive_int, default=100, help="sampling rounds (lecture: 100)")
    toy.add_argument("--inner-steps", type=_positive_int, default=10,
                     help="Adam steps on each round's samples (lecture: 10)")
    toy.add_argument("--responses", type=_positive_int, default=10, help="responses per prompt (lecture: 10)")
    toy.add_argument("--lr", type=_positive_float, default=1e-3, help="Adam learning rate (lecture: 1e-3)")
    toy.add_argument("--seed", type=int, default=5, help="random seed (lecture: 5)")
    toy.add_argument("--seeds", type=_positive_int, default=1,
                     help="independent replicas trained side by side; results give mean and min-max over them")
    toy.add_argument("--out", default="runs/sort_toy", help="folder for the PNG and the metrics jsonl")
    toy.set_defaults(func=_sort_toy)

    lec = sub.add_parser("lecture17", help="every claim of CS336 lecture 17 measured on CPU: report.md + figures")
    lec.add_argument("--out", default="docs/lecture17", help="folder for report.md and its figures (regenerated)")
    lec.add_argument("--runs", default="runs/lecture17", help="folder for the training runs (models, metrics)")
    lec.add_argument("--quick", action="store_true", help="tiny sizes: checks the pipeline in seconds, proves nothing")
    lec.add_argument("--workers", type=_positive_int, default=None,
                     help="processes running independent parts side by side (default 2, one per idle core; "
                          "1 with --quick)")
    lec.set_defaults(func=_lecture17)

    two = sub.add_parser("two-state", help="exact variance of the policy gradient with and without a baseline")
    two.set_defaults(func=_two_state)
    return parser
