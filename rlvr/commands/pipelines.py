"""`rlvr presets`, `rlvr compare`, `rlvr recipe`: the algorithm family from the command line.

    rlvr presets                                              # every named algorithm and what it changes
    rlvr compare configs/compare/length_bias.yaml --variants grpo_len dr_grpo_len --out runs/cmp
    rlvr recipe configs/recipes/r1.yaml --out runs/r1 --set train.steps=50
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from rlvr.commands.grammar import add_config_args
from rlvr.config import ConfigError, config_help


def _presets(args: argparse.Namespace) -> int:
    from rlvr.presets import format_presets

    print(format_presets())
    return 0


def shipped_list() -> str:
    """The shipped configs by command, one line each: the epilog of `rlvr --help` and `rlvr train --help`."""
    from rlvr.config import shipped_configs

    names: dict[str, list[str]] = {}
    for command, name, _ in shipped_configs():
        names.setdefault(command, []).append(name)
    return "; ".join(f"rlvr {command}: {', '.join(found)}" for command, found in names.items())


def _configs(args: argparse.Namespace) -> int:
    from rlvr.config import SHIPPED_CONFIGS, shipped_configs

    found = shipped_configs()
    width = max(len(f"rlvr {command} {name}") for command, name, _ in found)
    room = max(40, shutil.get_terminal_size((120, 24)).columns - width - 5)
    print(f"Shipped configs ({SHIPPED_CONFIGS}); the name stands for the file wherever a CONFIG is taken:")
    for command, name, summary in found:
        cut = summary if len(summary) <= room else summary[: summary.rfind(" ", 0, room - 3)] + "..."
        print(f"  {f'rlvr {command} {name}':<{width}}  {cut}")
    print("Every key of a config: rlvr train --help-config (a recipe's stages: rlvr recipe --help-config).")
    return 0


def _compare(args: argparse.Namespace) -> int:
    if args.help_config:
        print("\n".join(config_help()))
        return 0
    from rlvr.pipelines.compare import parse_variant, plot_comparison, run_comparison, summarize
    from rlvr.train.guard import Interrupted, StoppedAtOnce

    if not args.variants:
        raise ConfigError("give the variants to compare: --variants NAME ... (rlvr presets lists the named ones)")

    variants = [parse_variant(spec) for spec in args.variants]
    try:
        histories = run_comparison(args.config, variants, args.out, args.overrides, resume=args.resume)
    except (Interrupted, StoppedAtOnce) as err:  # the run's own hint would finish one variant, draw no comparison
        raise err.continued_with("the same `rlvr compare` command and --resume") from None
    table = summarize(histories)
    out = Path(args.out)
    png = plot_comparison(histories, out / "comparison.png", title=args.title or "")
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(f"plot: {png}\nruns: {', '.join(str(out / label) for label in histories)}")
    return 0


def stage_help() -> list[str]:
    """Every kind of recipe stage, what it does and its keys (`rlvr.config.stages`), as --help-config lists a
    config's."""
    from rlvr.config.stages import STAGE_KINDS

    lines = ["A recipe stage is {name: NAME, kind: KIND, KEY: VALUE, ...}; --set NAME.KEY=VALUE sets one key. "
             "The base config's keys: rlvr train --help-config."]
    for kind, cls in STAGE_KINDS.items():
        lines += ["", f"kind: {kind}: {' '.join(cls.__doc__.split())}"]
        lines += [f"  {line}" for line in config_help(cls)]
    return lines


def _recipe(args: argparse.Namespace) -> int:
    if args.help_config:
        print("\n".join(stage_help()))
        return 0
    from rlvr.pipelines.recipes import load_recipe, run_recipe
    from rlvr.train.guard import Interrupted, StoppedAtOnce

    if args.config is None:
        raise ConfigError("give a RECIPE file, or the name of a shipped one (rlvr configs lists them)")
    if args.out is not None and any(item.startswith("out_dir=") for item in args.overrides):
        raise ConfigError("--out and --set out_dir both name the recipe's folder; give one of them")
    recipe = load_recipe(args.config, args.overrides)
    out = args.out if args.out is not None else recipe.out_dir
    try:
        records = run_recipe(recipe, out)
    except (Interrupted, StoppedAtOnce) as err:
        raise err.continued_with("the same `rlvr recipe` command (finished stages are skipped, this one "
                                 "resumes)") from None
    final = next((r["model"] for r in reversed(records) if r.get("model")), None)
    print(f"recipe finished: {len(records)} stages in {out}" + (f"; final model {final}" if final else ""))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("presets", help="list the named algorithm presets (grpo, dr_grpo, dapo, ppo, ...)",
                              description="List the named algorithms (algorithm.preset) and the keys each sets.")
    p.set_defaults(func=_presets)

    k = subparsers.add_parser("configs", help="list the shipped configs and recipes, with the command that runs each",
                              description="List the configs shipped with rlvr (training configs, recipes, "
                                          "comparisons) and what each trains; a name works wherever a CONFIG file "
                                          "does (rlvr train sort, rlvr recipe r1).")
    k.set_defaults(func=_configs)

    c = subparsers.add_parser("compare", help="train several algorithm variants on the same task and seed, "
                                              "plot reward, held-out accuracy and completion length together",
                              description="Train each variant (a preset, a YAML of overrides or LABEL:KEY=VALUE,...) "
                                          "from the same base config and seed; write one run per variant, "
                                          "comparison.png and summary.md in --out.")
    add_config_args(c, "base training config (a YAML file or a shipped config's name) shared by every variant",
                    "override a config key for every variant (a key some variant sets is refused); repeat --set for "
                    "each key")
    c.add_argument("--variants", nargs="+", default=[], metavar="VARIANT",
                   help="preset names, YAML override files, or LABEL:KEY=VALUE,KEY=VALUE")
    c.add_argument("--out", default="runs/compare", help="folder: one run per variant, comparison.png, summary.md")
    c.add_argument("--title", default=None, help="figure title")
    c.add_argument("--resume", action="store_true",
                   help="continue an interrupted comparison in --out (the same variants and settings): finished "
                        "variants are kept, an interrupted one resumes from its latest checkpoint, the rest train")
    c.set_defaults(func=_compare)

    r = subparsers.add_parser("recipe", help="run a multi-stage recipe (R1, Kimi k1.5, Qwen3, ...) stage by stage",
                              description="Run a recipe's stages (sft, rl, dpo, filter, ...) in order, each from the "
                                          "model the one before produced; finished stages are skipped when run again "
                                          "(docs/training.md). --help-config lists every stage kind's keys.")
    add_config_args(r, "recipe YAML, or a shipped recipe's name (rlvr configs lists them: r1, kimi_k15, qwen3, ...)",
                    "KEY=VALUE changes the shared base config and every RL stage's config (over the file's values), "
                    "STAGE.KEY=VALUE one stage's option; repeat --set for each key")
    r.add_argument("--out", default=None, help="folder: one sub-folder per stage; finished stages are skipped when "
                                                 "run again (default: the recipe's out_dir, else runs/<recipe name>)")
    r.set_defaults(func=_recipe)
