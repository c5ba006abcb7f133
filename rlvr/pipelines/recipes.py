"""Recipes: the post-training pipelines of papers as YAML files, run stage by stage.

    rlvr recipe configs/recipes/r1.yaml --out runs/r1 --set train.steps=50 --set cold_start.steps=200

A recipe file is either a plain training config (one RL stage; `rlvr train FILE` runs it as well) or

    base: {model: ..., task: ..., rollout: ..., seed: ...}   # a training config every stage shares
    stages:
      - {name: cold_start, kind: sft, steps: 200}
      - {name: reasoning_rl, kind: rl, config: {algorithm: {preset: grpo}}}

Each stage starts from the model the previous stage produced (the first from `base.model`, or a tiny
model built from it). An `rl` stage is `base` + its `config`, trained by the shared loop
(`rlvr.train.loop.train`) with `sft.steps = 0` (supervised steps are stages of their own). A
`filter` stage restricts the training prompts of the RL stages after it. `--set KEY=VALUE` changes
`base` (every stage), `--set STAGE.KEY=VALUE` one stage's option (for an `rl` stage, its config).
Stage folders are `OUT/NN_name`; a stage whose `stage.json` exists is skipped, so running an
interrupted recipe again resumes at the first unfinished stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from rlvr.pipelines.compare import _flatten
from rlvr.config import Config, ConfigError, config_file, load_config, parse_yaml, read_yaml
from rlvr.train.validate import check_registries
from rlvr.pipelines.recipe_stages import STAGE_FUNCTIONS, initial_model

# kind -> option defaults (None: optional, no default). Unknown options are an error.
_SFT = {"steps": 100, "batch_size": 32, "lr": 1e-3}
_SAMPLE = {"prompts": 64, "samples": 4, "temperature": 1.0}
KINDS: dict[str, dict[str, Any]] = {
    "rl": {"config": {}},
    "sft": {**_SFT, "data": None, "demonstrations": 256},
    "rejection_sft": {**_SFT, **_SAMPLE, "data": None, "demonstrations": 0},
    "dpo": {**_SAMPLE, "loss": "dpo", "beta": None, "lr": 1e-4, "epochs": 1, "batch_size": 8},
    "filter": {"prompts": None, "samples": 8, "k": None, "mode": "drop_solved", "drop_unsolved": False,
               "temperature": 1.0},
    "fusion_sft": {**_SFT, "data": None, "demonstrations": 256, "thinking": "The answer is {answer}.",
                   "unflagged_think": 0.0},
    "budget_eval": {"budgets": [8, 16, 32], "examples": None, "answer_tokens": None},
}


@dataclass
class Stage:
    name: str
    kind: str
    options: dict[str, Any]
    sets: list[str] = field(default_factory=list)  # `--set` items of an rl stage's config


@dataclass
class Recipe:
    base: dict[str, Any]
    stages: list[Stage]
    base_overrides: list[str] = field(default_factory=list)


def _stage(raw: Any, index: int) -> Stage:
    if not isinstance(raw, dict) or "kind" not in raw or "name" not in raw:
        raise ConfigError(f"stages[{index}] needs `name` and `kind`, got {raw!r}")
    name, kind = str(raw["name"]), raw["kind"]
    if kind not in KINDS:
        raise ConfigError(f"stages[{index}] ({name}): unknown kind {kind!r}; choose from {sorted(KINDS)}")
    options = {k: v for k, v in raw.items() if k not in ("name", "kind")}
    unknown = set(options) - set(KINDS[kind])
    if unknown:
        raise ConfigError(f"stage {name!r} ({kind}): unknown options {sorted(unknown)}; "
                          f"valid: {sorted(KINDS[kind])}")
    return Stage(name, kind, {**KINDS[kind], **options})


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Parse a recipe file and route `--set` overrides to the base or to a stage."""
    path = config_file(path, "recipes", "recipe file")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping")
    if "stages" not in raw:  # a plain training config: one RL stage
        raw = {"base": raw, "stages": [{"name": "rl", "kind": "rl"}]}
    if set(raw) - {"base", "stages"} or not isinstance(raw["stages"], list) or not raw["stages"]:
        raise ConfigError(f"{path}: a staged recipe has exactly `base` and a non-empty list `stages`")
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
    base_config(recipe)  # validate now, before any work
    return recipe


def _override_stage(stage: Stage, item: str) -> None:
    key, sep, value = item.partition("=")
    if not sep:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    if stage.kind == "rl":
        stage.sets.append(item)
    elif key not in stage.options:
        raise ConfigError(f"stage {stage.name!r} ({stage.kind}) has no option {key!r}; valid: {sorted(stage.options)}")
    else:
        stage.options[key] = parse_yaml(value, f"--set {stage.name}.{key}")


def base_config(recipe: Recipe, extra: list[str] = ()) -> Config:
    return check_registries(load_config(None, [*_flatten(recipe.base), *recipe.base_overrides, *extra]))


def rl_config(recipe: Recipe, stage: Stage, model: Path, out_dir: Path, pool: Path | None) -> Config:
    """base + the stage's config + its --set items, on `model`, into `out_dir`, without SFT."""
    extra = [*_flatten(stage.options["config"]), *stage.sets, f"model.path={model}", f"out_dir={out_dir}", "sft.steps=0"]
    if pool is not None:
        base = base_config(recipe)
        extra += ["task.name=subset", "task.options=" + json.dumps(
            {"path": str(pool), "task": base.task.name, "options": base.task.options})]
    return base_config(recipe, extra)


def run_recipe(recipe: Recipe, out_dir: str | Path, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every stage in order; returns each stage's record (also in `OUT/NN_name/stage.json`)."""
    out_dir = Path(out_dir)
    base = base_config(recipe)
    model, pool = initial_model(base, out_dir), None
    records = []
    for i, stage in enumerate(recipe.stages, 1):
        stage_dir = out_dir / f"{i:02d}_{stage.name}"
        done = stage_dir / "stage.json"
        if done.is_file():
            record = json.loads(done.read_text())
            log(f"[{i}/{len(recipe.stages)}] {stage.name} ({stage.kind}): done before, skipped")
        else:
            log(f"[{i}/{len(recipe.stages)}] {stage.name} ({stage.kind}) from {model}")
            stage_dir.mkdir(parents=True, exist_ok=True)
            if stage.kind == "rl":
                record = STAGE_FUNCTIONS["rl"](rl_config(recipe, stage, model, stage_dir / "run", pool), stage_dir)
            else:
                record = STAGE_FUNCTIONS[stage.kind](base, stage.options, model, stage_dir)
            record = {"name": stage.name, "kind": stage.kind, **record}
            done.write_text(json.dumps(record, indent=2))
        log(f"    {json.dumps(record.get('metrics', {}))}")
        model = Path(record.get("model") or model)
        pool = Path(record["pool"]) if record.get("pool") else pool
        records.append(record)
    return records
