"""Recipes: the post-training pipelines of papers as YAML files, run stage by stage.

    rlvr recipe configs/recipes/r1.yaml --out runs/r1 --set train.steps=50 --set cold_start.steps=200

A recipe file is either a plain training config (one RL stage; `rlvr train FILE` runs it as well) or

    base: {model: ..., task: ..., rollout: ..., seed: ...}   # optional: a training config every stage shares
    stages:
      - {name: cold_start, kind: sft, steps: 200}
      - {name: reasoning_rl, kind: rl, config: {algorithm: {preset: grpo}}}

A stage name is a plain folder name (letters, digits, `_`, `-`). The recipe sets three things of an `rl`
stage itself, so its config (or `--set STAGE.KEY`) may not: `model.path` (and `model.tiny_*`: the model is the
previous stage's), `sft.*` (supervised steps are stages of their own) and `out_dir` (`OUT/NN_name/run`). The
recipe's folder OUT is `--out`, else the file's or `--set`'s `out_dir`, else `runs/<recipe file name>`.

Each stage starts from the model the previous stage produced (the first from `base.model`, or a tiny
model built from it). An `rl` stage is `base` + its `config`, trained by the shared loop
(`rlvr.train.loop.train_to_end`) with `sft.steps = 0` (supervised steps are stages of their own). A
`filter` stage restricts the training prompts of the RL stages after it. `--set KEY=VALUE` changes
`base` and every `rl` stage's config (the command line wins over the file), `--set STAGE.KEY=VALUE`
one stage's option (for an `rl` stage, its config). Every stage is checked before the first runs.
Stage folders are `OUT/NN_name`; a stage whose `stage.json` exists is skipped (if it was made with the
settings asked for now, else the recipe stops naming them), and an interrupted RL stage resumes, so
running an interrupted recipe again finishes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from rlvr.pipelines.compare import _flatten
from rlvr.config import (Config, ConfigError, apply_overrides, check_out_dir, config_file, from_dict, load_config,
                         read_yaml)
from rlvr.config.stages import STAGE_KINDS
from rlvr.tasks import TooFewExamples
from rlvr.train.preflight import SettingsChanged, describe, differences, plain, run_task
from rlvr.train.rollout import check_one_engine
from rlvr.train.setup import held_out_examples
from rlvr.train.validate import check_registries
from rlvr.pipelines.recipe_options import check_sft_lengths, check_stage_options
from rlvr.pipelines.recipe_stages import STAGE_FUNCTIONS, initial_model

START = "recipe_start.json"  # the settings the starting model (OUT/init_model, its warm start) was made with
_NAME = re.compile(r"[A-Za-z0-9_-]+")  # a stage's folder `OUT/NN_name` and its `--set NAME.KEY` prefix
# what the recipe sets in an rl stage's config itself (key or section prefix -> why)
OWNED = {"model.path": "the previous stage's model", "model.tiny_": "the previous stage's model",
         "sft.": "supervised steps are stages of their own (kind sft)", "out_dir": "the stage's folder OUT/NN_name/run"}


@dataclass
class Stage:
    name: str
    kind: str
    options: Any  # the kind's section (rlvr.config.stages)
    sets: list[str] = field(default_factory=list)  # `--set` items of an rl stage's config


@dataclass
class Recipe:
    base: dict[str, Any]
    stages: list[Stage]
    base_overrides: list[str] = field(default_factory=list)
    out_dir: str = "runs/recipe"  # the default of --out: the file's or --set's out_dir, else runs/<file name>


def _stage(raw: Any, index: int) -> Stage:
    if not isinstance(raw, dict) or "kind" not in raw or "name" not in raw:
        raise ConfigError(f"stages[{index}] needs `name` and `kind`, got {raw!r}")
    name, kind = str(raw["name"]), raw["kind"]
    if not _NAME.fullmatch(name):
        raise ConfigError(f"stages[{index}]: name {name!r} is not a plain folder name (letters, digits, _ and -; "
                          "it names the stage's folder OUT/NN_name)")
    if kind not in STAGE_KINDS:
        raise ConfigError(f"stages[{index}] ({name}): unknown kind {kind!r}; choose from {sorted(STAGE_KINDS)}")
    options = {k: v for k, v in raw.items() if k not in ("name", "kind")}
    return Stage(name, kind, from_dict(STAGE_KINDS[kind], options, f"{name}."))


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Parse a recipe file and route `--set` overrides to the base or to a stage."""
    path = config_file(path, "recipes", "recipe file")
    raw = read_yaml(path)
    if not raw:  # not 100 steps of every default, as an empty training config would give
        raise ConfigError(f"{path}: empty recipe; write a training config, or `stages` (and optionally `base`)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping")
    if "stages" not in raw:  # a plain training config: one RL stage
        raw = {"base": raw, "stages": [{"name": "rl", "kind": "rl"}]}
    if set(raw) - {"base", "stages"} or not isinstance(raw["stages"], list) or not raw["stages"]:
        raise ConfigError(f"{path}: a staged recipe has a non-empty list `stages` and optionally `base` (the config "
                          f"the stages share), nothing else; got {sorted(raw)}")
    stages = [_stage(s, i) for i, s in enumerate(raw["stages"])]
    names = [s.name for s in stages]
    if len(set(names)) != len(names) or set(names) & {f.name for f in fields(Config)}:
        raise ConfigError(f"stage names must be unique and differ from config sections, got {names}")
    recipe = Recipe(raw.get("base") or {}, stages)
    by_name = {s.name: s for s in stages}
    for item in overrides:
        head, _, rest = item.partition(".")
        if head in by_name and rest:
            _override_stage(by_name[head], rest)
        else:
            recipe.base_overrides.append(item)
    base = base_config(recipe)  # validate now, before any work: the base, every stage's options, every RL config
    explicit = "out_dir" in recipe.base or any(item.startswith("out_dir=") for item in recipe.base_overrides)
    recipe.out_dir = base.out_dir if explicit else f"runs/{path.stem}"
    check_held_out(base)
    rl_configs = {}  # stage name -> its config, as checked
    for stage in stages:
        check_stage_options(stage.name, stage.kind, stage.options)
        if stage.kind == "rl":
            rl_configs[stage.name] = _check_rl_stage(recipe, stage)
        if stage.kind == "budget_eval" and stage.options.examples:
            check_held_out(base, stage.options.examples, f"{stage.name}.examples")
    check_sft_lengths(base, [(stage.name, stage.kind, stage.options) for stage in stages])
    # the RL stages train one model in turn, one after the other in this process
    check_one_engine(rl_configs, "RL stage", models=False)
    return recipe


def check_held_out(cfg: Config, size: int | None = None, key: str = "") -> None:
    """The task has `size` (`key`; default task.eval_size) distinct held-out examples, as the stages that evaluate
    will draw them: refused before any work, not after the starting model and the stages before it were made."""
    task = run_task(cfg)
    if size is None:
        held_out_examples(cfg, task)  # ConfigError naming task.eval_size
        return
    try:
        task.eval_examples(size, cfg.task.eval_seed)
    except TooFewExamples as err:
        raise ConfigError(f"{key}={size}: {err}") from None


def _check_rl_stage(recipe: Recipe, stage: Stage) -> Config:
    """The stage's own config sets none of the keys the recipe sets (OWNED: silently replaced before), and the
    whole config (base, stage, command line) is valid and has its held-out set; returns that config."""
    keys = [item.partition("=")[0] for item in [*_flatten(stage.options.config), *stage.sets]]
    owned = [key for key in keys if key.startswith(tuple(OWNED))]
    if owned:
        why = "; ".join(sorted({f"{p.rstrip('._')}: {OWNED[p]}" for k in owned for p in OWNED if k.startswith(p)}))
        raise ConfigError(f"stage {stage.name!r} (rl): the recipe sets {', '.join(owned)} itself ({why}); "
                          "remove from the stage")
    try:
        cfg = rl_config(recipe, stage, None, Path(stage.name), None)
        check_held_out(cfg)
    except ConfigError as err:
        raise ConfigError(f"stage {stage.name!r} (rl): {err}") from None
    return cfg


def _override_stage(stage: Stage, item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    if stage.kind == "rl":
        stage.sets.append(item)
    else:
        apply_overrides(stage.options, [item], f"{stage.name}.")


def base_config(recipe: Recipe, extra: list[str] = ()) -> Config:
    return check_registries(load_config(None, [*_flatten(recipe.base), *recipe.base_overrides, *extra]))


def rl_config(recipe: Recipe, stage: Stage, model: Path | None, out_dir: Path, pool: Path | None) -> Config:
    """The recipe's base, the stage's config, then the command line's `--set` (for every stage, then for this
    one: the command line wins over the file, as everywhere), on `model` (None: not checked, as before any
    stage has run), into `out_dir`, without SFT."""
    items = [*_flatten(recipe.base), *_flatten(stage.options.config), *recipe.base_overrides, *stage.sets,
             f"out_dir={out_dir}", "sft.steps=0", *([f"model.path={model}"] if model is not None else [])]
    if pool is not None:
        base = base_config(recipe)
        items += ["task.name=subset", "task.options=" + json.dumps(
            {"path": str(pool), "task": base.task.name, "options": base.task.options})]
    return check_registries(load_config(None, items))


def start_settings(base: Config) -> dict[str, Any]:
    """What the starting model (a tiny model built in OUT and its SFT warm start) depends on."""
    task = {"name": base.task.name, "options": base.task.options, "train_size": base.task.train_size}
    return plain({"seed": base.seed, "model": asdict(base.model), "sft": asdict(base.sft), "task": task})


def stage_settings(recipe: Recipe, stage: Stage) -> dict[str, Any]:
    """What a stage's result depends on besides the stages before it (recorded in its stage.json): an RL
    stage's config but for where and how it logs and checkpoints and when its guard stops it; another stage's
    options and the base config's sections it reads."""
    if stage.kind == "rl":
        cfg = asdict(rl_config(recipe, stage, None, Path(stage.name), None))
        return plain({"config": {k: v for k, v in cfg.items() if k not in ("out_dir", "log", "checkpoint", "guard")}})
    base = asdict(base_config(recipe))
    return plain({"options": asdict(stage.options),
                  "base": {k: base[k] for k in ("seed", "model", "task", "rollout")}})


def check_unchanged(recorded: dict[str, Any] | None, current: dict[str, Any], what: str, out_dir: Path) -> None:
    """A finished part of the recipe in `out_dir` was made with the settings asked for now; ConfigError
    naming the first differences otherwise (it would be skipped, and the run silently keep the old result)."""
    diff = [] if recorded is None else differences(recorded, current)
    if diff:
        raise ConfigError(f"{what} in {str(out_dir)!r} was made with other settings ({describe(diff)}); choose "
                          "another --out, or delete that stage's folder and those after it to redo them")


def check_stage_folders(out_dir: Path, stage_dirs: list[Path]) -> None:
    """`out_dir` holds no stage folder (`NN_name`) but this recipe's: another recipe's stages there (the same --out
    given to two recipes, or stages renamed or removed since) would mix two recipes' results in one folder."""
    ours = {d.name for d in stage_dirs}
    others = sorted(d.name for d in out_dir.glob("[0-9][0-9]_*") if d.is_dir() and d.name not in ours
                    and _NAME.fullmatch(d.name[3:]))
    if others:
        raise ConfigError(f"--out {str(out_dir)!r} holds stage folders this recipe does not have ({', '.join(others)}):"
                          f" another recipe's, or stages renamed since; choose another --out (this recipe's stages: "
                          f"{', '.join(sorted(ours))})")


def run_recipe(recipe: Recipe, out_dir: str | Path, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every stage in order; returns each stage's record (also in `OUT/NN_name/stage.json`). Finished
    stages are skipped, after checking (all of them, before any work) that they were made with the
    settings asked for now."""
    out_dir = Path(out_dir)
    check_out_dir(out_dir, "--out")
    base = base_config(recipe)
    stage_dirs = [out_dir / f"{i:02d}_{stage.name}" for i, stage in enumerate(recipe.stages, 1)]
    check_stage_folders(out_dir, stage_dirs)
    settings = [stage_settings(recipe, stage) for stage in recipe.stages]
    start = start_settings(base)
    if (out_dir / START).is_file() and any(d.exists() for d in stage_dirs):  # none begun: rebuilt (start_model)
        check_unchanged(json.loads((out_dir / START).read_text()), start, "the starting model", out_dir)
    for stage, stage_dir, current in zip(recipe.stages, stage_dirs, settings):
        if (stage_dir / "stage.json").is_file():
            recorded = json.loads((stage_dir / "stage.json").read_text()).get("settings")
            check_unchanged(recorded, current, f"stage {stage.name!r}", out_dir)
    model, pool = initial_model(base, out_dir), None
    (out_dir / START).write_text(json.dumps(start, indent=2))
    records = []
    for i, (stage, stage_dir, current) in enumerate(zip(recipe.stages, stage_dirs, settings), 1):
        done = stage_dir / "stage.json"
        if done.is_file():
            record = json.loads(done.read_text())
            log(f"[{i}/{len(recipe.stages)}] {stage.name} ({stage.kind}): done before, skipped")
        else:
            log(f"[{i}/{len(recipe.stages)}] {stage.name} ({stage.kind}) from {model}")
            stage_dir.mkdir(parents=True, exist_ok=True)
            if stage.kind == "rl":
                record = _run_rl_stage(rl_config(recipe, stage, model, stage_dir / "run", pool), stage, stage_dir)
            else:
                record = STAGE_FUNCTIONS[stage.kind](base, stage.options, model, stage_dir)
            record = {"name": stage.name, "kind": stage.kind, **record, "settings": current}
            done.write_text(json.dumps(record, indent=2))
        log(f"    {json.dumps(record.get('metrics', {}))}")
        model = Path(record.get("model") or model)
        pool = Path(record["pool"]) if record.get("pool") else pool
        records.append(record)
    return records


def _run_rl_stage(cfg: Config, stage: Stage, stage_dir: Path) -> dict[str, Any]:
    """The RL stage's run, started or (interrupted before) resumed; a resume refused is named as the user ran it,
    `rlvr recipe --out`, not as `rlvr train --resume` ("start a new run in another out_dir")."""
    try:
        return STAGE_FUNCTIONS["rl"](cfg, stage_dir)
    except SettingsChanged as err:
        raise ConfigError(f"stage {stage.name!r} (rl) was interrupted and resumes: {str(err.run_dir)!r} was trained "
                          f"with other settings ({describe(err.changed)}); drop the change of {err.keys}, or choose "
                          "another --out, or delete that stage's folder and those after it to redo them") from None
