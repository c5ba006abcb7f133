"""`rlvr presets`, `rlvr compare`, `rlvr recipe`: the algorithm family from the command line.

    rlvr presets                                              # every named algorithm and what it changes
    rlvr compare configs/compare/length_bias.yaml --variants grpo_len dr_grpo_len --out runs/cmp
    rlvr recipe configs/recipes/r1.yaml --out runs/r1 --set train.steps=50
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _presets(args: argparse.Namespace) -> int:
    from rlvr.presets import format_presets

    print(format_presets())
    return 0


def _compare(args: argparse.Namespace) -> int:
    from rlvr.pipelines.compare import parse_variant, plot_comparison, run_comparison, summarize
    from rlvr.train.guard import Interrupted, StoppedAtOnce

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


def _recipe(args: argparse.Namespace) -> int:
    from rlvr.config import ConfigError
    from rlvr.pipelines.recipes import load_recipe, run_recipe
    from rlvr.train.guard import Interrupted, StoppedAtOnce

    if args.out is not None and any(item.startswith("out_dir=") for item in args.overrides):
        raise ConfigError("--out and --set out_dir both name the recipe's folder; give one of them")
    recipe = load_recipe(args.recipe, args.overrides)
    out = args.out if args.out is not None else recipe.out_dir
    try:
        records = run_recipe(recipe, out)
    except (Interrupted, StoppedAtOnce) as err:
        raise err.continued_with("the same `rlvr recipe` command (finished stages are skipped, this one "
                                 "resumes)") from None
    final = next((r["model"] for r in reversed(records) if r.get("model")), None)
    print(f"recipe finished: {len(records)} stages in {out}" + (f"; final model {final}" if final else ""))
    return 0


def _sets(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--set", dest="overrides", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help=help_text)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("presets", help="list the named algorithm presets (grpo, dr_grpo, dapo, ppo, ...)")
    p.set_defaults(func=_presets)

    c = subparsers.add_parser("compare", help="train several algorithm variants on the same task and seed, "
                                              "plot reward, held-out accuracy and completion length together")
    c.add_argument("config", nargs="?", default=None, help="base training config (YAML) shared by every variant")
    c.add_argument("--variants", nargs="+", required=True, metavar="VARIANT",
                   help="preset names, YAML override files, or LABEL:KEY=VALUE,KEY=VALUE")
    c.add_argument("--out", default="runs/compare", help="folder: one run per variant, comparison.png, summary.md")
    c.add_argument("--title", default=None, help="figure title")
    c.add_argument("--resume", action="store_true",
                   help="continue an interrupted comparison in --out (the same variants and settings): finished "
                        "variants are kept, an interrupted one resumes from its latest checkpoint, the rest train")
    _sets(c, "override a config key for every variant; a key some variant sets is refused; repeatable")
    c.set_defaults(func=_compare)

    r = subparsers.add_parser("recipe", help="run a multi-stage recipe (R1, Kimi k1.5, Qwen3, ...) stage by stage")
    r.add_argument("recipe", help="recipe YAML (configs/recipes/*.yaml)")
    r.add_argument("--out", default=None, help="folder: one sub-folder per stage; finished stages are skipped when "
                                                 "run again (default: the recipe's out_dir, else runs/<recipe name>)")
    _sets(r, "KEY=VALUE changes the shared base config and every RL stage's config (over the file's values), "
             "STAGE.KEY=VALUE one stage's option; repeatable")
    r.set_defaults(func=_recipe)
