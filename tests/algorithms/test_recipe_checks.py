"""Recipes: what is checked before any stage runs (options, data files row by row, held-out sizes, names,
the keys a recipe owns, its folder) and refused in one line, and the shipped files passing those checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlvr.pipelines.recipes import load_recipe, rl_config, run_recipe
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.tasks import get_task
from rlvr.train.setup import held_out_examples
from rlvr.train.validate import check_registries
from rlvr.commands.grammar import set_args
from recipe_helpers import DEMO, RECIPES, TRACE
from variant_helpers import TINY


@pytest.mark.parametrize("override, words", [
    ("mixed_sft.samples=0", "mixed_sft.samples must be > 0, got 0"),
    ("cold_start.steps=abc", "cold_start.steps: expected int, got abc"),
    ("cold_start.lr=-1", "cold_start.lr must be > 0, got -1.0"),
    ("cold_start.stepz=3", "unknown config key 'cold_start.stepz'; did you mean 'cold_start.steps'?"),
    ("preference.loss=foo", "preference.loss: unknown 'foo'; choose from ['dpo', 'ipo', 'simpo', 'ln_dpo']"),
    ("preference.loss=ln_dpo", "preference.loss 'ln_dpo' has no default beta; set beta"),
    ("cold_start.data=missing.jsonl", "cold_start.data: no such file 'missing.jsonl'"),
    ("reasoning_rl.train.stepz=3", "stage 'reasoning_rl' (rl): unknown config key 'train.stepz'"),
    ("reasoning_rl.train.steps=-2", "stage 'reasoning_rl' (rl): train.steps"),
])
def test_every_stage_is_checked_before_the_first_one_runs(override, words, tmp_path, capsys):
    """A bad value in a later stage was found only when that stage started (r1: minutes of earlier stages
    first), a non-number as an internal TypeError (exit 1); now one line naming STAGE.KEY, before any work."""
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPES / "r1.yaml", [override])
    assert words in str(err.value)
    assert main(["recipe", str(RECIPES / "r1.yaml"), "--out", str(tmp_path / "out"), "--set", override]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and words in out.err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("recipe, override, words", [
    ("qwen3", "difficulty_filter.k=9", "k must be in 1..n=8"),
    ("kimi_k15", "curation.k=3", "mode='all_fail' means k=1"),
    ("qwen3", "budget.budgets=[0, 8]", "budget.budgets: expected a non-empty list of integers >= 1"),
    ("qwen3", "fusion.unflagged_think=2", "fusion.unflagged_think must be in [0, 1], got 2.0"),
])
def test_filter_and_budget_options_are_checked_before_any_stage(recipe, override, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_recipe(RECIPES / f"{recipe}.yaml", [override])


def test_a_finished_stage_made_with_other_settings_is_refused_not_skipped(tmp_path):
    """Run again with other settings, a recipe skipped its finished stages and kept their old results
    (exit 0, no word); now the first stage whose settings differ is named with the keys, before any work.
    Settings that change no result (logging) are not compared."""
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a", "kind": "sft", "steps": 1, "demonstrations": 4},
                                               {"name": "b", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    out = tmp_path / "out"
    first = run_recipe(load_recipe(path, TINY), out, log=lambda _: None)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"stage 'b' in .* other settings \(options.steps 1 -> 2\)"):
        run_recipe(load_recipe(path, [*TINY, "b.steps=2"]), out, log=lambda _: None)
    with pytest.raises(ConfigError, match=r"the starting model .* \(seed 0 -> 3\)"):
        run_recipe(load_recipe(path, [*TINY, "seed=3"]), out, log=lambda _: None)
    with pytest.raises(ConfigError, match=r"stage 'a' .*\(base.rollout.max_new_tokens 8 -> 9\)"):
        run_recipe(load_recipe(path, [*TINY, "rollout.max_new_tokens=9"]), out, log=lambda _: None)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before  # nothing touched
    again = run_recipe(load_recipe(path, [*TINY, "log.progress=true"]), out, log=lambda _: None)
    assert again == first


def test_a_folder_holding_another_recipes_stages_is_refused_before_any_work(tmp_path, capsys):
    """Two recipes given the same --out shared the folder without a word (their stages side by side, the
    starting model replaced); now the second is refused in one line naming the stage folders it does not have."""
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump({"stages": [{"name": "a", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    second.write_text(yaml.safe_dump({"stages": [{"name": "b", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    out = tmp_path / "out"
    run_recipe(load_recipe(first, TINY), out, log=lambda _: None)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(["recipe", str(second), "--out", str(out), *[f"--set={item}" for item in TINY]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds stage folders this recipe does not have (01_a)" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before  # nothing touched
    assert run_recipe(load_recipe(first, TINY), out, log=lambda _: None)[0]["name"] == "a"  # its own: resumes


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["recipe", str(RECIPES / "r1_zero.yaml"), "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "not a folder" in err


BAD_DATA = {  # file name -> its text: three good rows, then a bad one on line 4 (after a blank line)
    "badjson.jsonl": lambda good: good * 2 + "\n" + "not json\n",
    "nofield.jsonl": lambda good: good * 3 + '{"prompt": "p"}\n',
    "number.jsonl": lambda good: good * 3 + json.dumps({**TRACE, **DEMO, "prompt": 5}) + "\n",
}


@pytest.mark.parametrize("recipe, key, row, name, words", [
    ("qwen3", "fusion.data", TRACE, "badjson.jsonl", "badjson.jsonl:4: not valid JSON"),
    ("qwen3", "fusion.data", TRACE, "nofield.jsonl", "nofield.jsonl:4: missing string field 'thinking'"),
    ("qwen3", "fusion.data", TRACE, "number.jsonl", "number.jsonl:4: field 'prompt' is an int, not a string"),
    ("qwen3", "cold_start.data", DEMO, "badjson.jsonl", "badjson.jsonl:4: not valid JSON"),
    ("qwen3", "cold_start.data", DEMO, "nofield.jsonl", "nofield.jsonl:4: missing field(s) ['completion']"),
    ("r1", "mixed_sft.data", DEMO, "number.jsonl", "number.jsonl:4: field(s) ['prompt'] must be strings"),
])
def test_a_stage_data_file_is_read_row_by_row_before_the_first_stage(recipe, key, row, name, words, tmp_path, capsys):
    """`fusion.data=bad.jsonl` was only checked to exist: qwen3 ran its cold start, filter and RL stages, then
    stopped at "bad.jsonl:4: not valid JSON" naming no option. Every stage's data file is now read, each row
    checked as the stage checks it, before any stage, and the error names the key."""
    good = json.dumps(row) + "\n"
    path = tmp_path / name
    path.write_text(BAD_DATA[name](good))
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPES / f"{recipe}.yaml", [f"{key}={path}"])
    assert str(err.value).startswith(f"{key}: {tmp_path}/{words}")
    assert main(["recipe", str(RECIPES / f"{recipe}.yaml"), "--out", str(tmp_path / "out"),
                 *set_args([*TINY, f"{key}={path}"])]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and f"{key}: {tmp_path}/{words}" in out.err and not (tmp_path / "out").exists()


def test_an_empty_fusion_data_file_is_refused_before_the_first_stage(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match=f"^fusion.data: {tmp_path}/empty.jsonl: no rows$"):
        load_recipe(RECIPES / "qwen3.yaml", [f"fusion.data={tmp_path}/empty.jsonl"])


LONG = {**DEMO, "completion": " ".join("1" * 400)}  # 800 tokens: past the tiny model's 512 positions


@pytest.mark.parametrize("recipe, key, row", [("qwen3", "cold_start.data", LONG), ("r1", "mixed_sft.data", LONG),
                                              ("qwen3", "fusion.data", {**TRACE, "thinking": " ".join("1" * 400)}),
                                              ("r1", "sft.data", LONG)])  # the base's warm start
def test_an_sft_row_too_long_for_the_model_is_named_by_stage_data_file_and_line(recipe, key, row, tmp_path, capsys):
    """A recipe's SFT row past the model's context stopped the recipe at its stage, after the stages (and the
    starting model) before it, as "SFT pair 1" (its index, not the file's line 3); now `STAGE.data: FILE:LINE`,
    as `rlvr sft` names `sft.data`, before the first stage."""
    good = {"cold_start.data": DEMO, "mixed_sft.data": DEMO, "sft.data": DEMO, "fusion.data": TRACE}[key]
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(row) + "\n")
    sets = [f"{key}={path}", *(["sft.steps=1"] if key == "sft.data" else [])]
    with pytest.raises(ConfigError, match=rf"^{re.escape(f'{key}: {path}:3: prompt + completion is ')}\d+ tokens"):
        load_recipe(RECIPES / f"{recipe}.yaml", ["model.tiny_preset=test", *sets])
    assert main(["recipe", str(RECIPES / f"{recipe}.yaml"), "--out", str(tmp_path / "out"),
                 *set_args(["model.tiny_preset=test", *sets])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}: {path}:3: prompt + completion" in err and "SFT pair" not in err
    assert not (tmp_path / "out").exists()


def test_an_sft_stage_names_a_data_row_too_long_by_its_file_and_line(tmp_path, monkeypatch):
    """The stage's own check (behind the recipe's, which names STAGE.data first) names the row too."""
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(DEMO) + "\n\n" + json.dumps(LONG) + "\n")
    recipe = tmp_path / "warm.yaml"
    recipe.write_text(yaml.safe_dump({"stages": [{"name": "warm", "kind": "sft", "steps": 1, "demonstrations": 2,
                                                  "data": str(path)}]}))
    monkeypatch.setattr("rlvr.pipelines.recipes.check_sft_lengths", lambda *_: None, raising=False)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:3: prompt \+ completion is 811 tokens"):
        run_recipe(load_recipe(recipe, [*TINY, "sft.steps=0"]), tmp_path / "out", log=lambda _: None)


SHIPPED = Path(__file__).resolve().parents[2] / "rlvr" / "configs"
# a config made for a GPU is checked here placed on the CPU (its sizes are the point, not its device or engine)
ON_CPU = {"smollm2_gpu.yaml": ["model.device=cpu", "model.dtype=float32", "rollout.engine=hf"]}


@pytest.mark.parametrize("path", sorted(SHIPPED.rglob("*.yaml")), ids=lambda p: str(p.relative_to(SHIPPED)))
def test_every_shipped_config_and_recipe_passes_its_checks_at_its_own_sizes(path):
    """r1_zero asked for 100 held-out lists of length 3 (95 exist): both ways its header runs it stopped, and
    `rlvr recipe` only after building the starting model. The smoke tests shrink task sizes, so they missed it:
    here every shipped file is loaded as shipped and its held-out set drawn."""
    if "recipes" in path.parts:
        recipe = load_recipe(path, ON_CPU.get(path.name, []))  # checks the base and every RL stage and held-out set
        configs = [rl_config(recipe, stage, None, Path("run"), None) for stage in recipe.stages if stage.kind == "rl"]
    else:
        configs = [check_registries(load_config(path))]
    for cfg in configs:
        held_out_examples(cfg, get_task(cfg.task.name, **cfg.task.options))


def test_a_held_out_set_too_large_is_refused_before_the_starting_model_is_built(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"task": {"name": "sort", "options": {"length": 3}, "eval_size": 100}}))
    assert main(["recipe", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task.eval_size=100: sort: could not draw 100" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=r"^stage 'rl' \(rl\): task.eval_size=100"):
        load_recipe(RECIPES / "r1_zero.yaml", ["rl.task.eval_size=100"])
    with pytest.raises(ConfigError, match=r"^budget.examples=5000: sort: could not draw 5000"):
        load_recipe(RECIPES / "qwen3.yaml", ["budget.examples=5000"])


def test_a_stage_name_that_is_not_a_plain_folder_name_is_refused(tmp_path, capsys, monkeypatch):
    """`a/../../escaped` wrote deep/escaped/{model,stage.json}, outside `--out deep/out`."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "esc.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a/../../escaped", "kind": "sft", "steps": 1,
                                                "demonstrations": 4}]}))
    assert main(["recipe", str(path), "--out", "deep/out", *set_args(TINY)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'a/../../escaped' is not a plain folder name" in err
    assert not (tmp_path / "deep").exists()
    for name in ["..", ".", "a.b", "", "x y"]:
        path.write_text(yaml.safe_dump({"stages": [{"name": name, "kind": "sft"}]}))
        with pytest.raises(ConfigError, match="not a plain folder name"):
            load_recipe(path)


@pytest.mark.parametrize("override, keys", [
    ("reasoning_rl.model.path=/somewhere", "model.path"),
    ("reasoning_rl.sft.steps=5", "sft.steps"),
    ("reasoning_rl.out_dir=elsewhere", "out_dir"),
    ("reasoning_rl.model.tiny_preset=small", "model.tiny_preset"),
])
def test_an_rl_stage_may_not_set_what_the_recipe_sets(override, keys, tmp_path, capsys):
    """An rl stage's own model.path, sft.steps and out_dir were replaced without a word (its config.yaml showed
    the previous stage's model and sft.steps 0); now refused, naming the key, before any work."""
    assert main(["recipe", str(RECIPES / "r1.yaml"), "--out", str(tmp_path / "out"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"stage 'reasoning_rl' (rl): the recipe sets {keys} itself" in err
    assert not (tmp_path / "out").exists()
    path = tmp_path / "own.yaml"
    key, _, value = override.partition(".")[2].partition("=")
    section, _, leaf = key.partition(".")
    path.write_text(yaml.safe_dump({"stages": [{"name": "rl", "kind": "rl",
                                                "config": {section: {leaf: value} if leaf else value}}]}))
    with pytest.raises(ConfigError, match=f"the recipe sets {keys} itself"):
        load_recipe(path)
    load_recipe(RECIPES / "r1.yaml", ["sft.steps=3", "model.tiny_preset=test"])  # the base's: the starting model


def test_the_recipe_folder_is_out_else_the_files_out_dir_else_runs_name(tmp_path, capsys, monkeypatch):
    """--out defaulted to runs/recipe for every recipe (r1_zero then kimi_k15 mixed their stage folders) and the
    file's or --set's out_dir was ignored without a word."""
    assert load_recipe(RECIPES / "r1_zero.yaml").out_dir == "runs/r1_zero"  # the file's out_dir
    assert load_recipe(RECIPES / "kimi_k15.yaml").out_dir == "runs/kimi_k15"
    assert load_recipe(RECIPES / "r1.yaml", ["out_dir=mine"]).out_dir == "mine"
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    assert main(["recipe", str(path), *set_args(TINY)]) == 0
    assert (tmp_path / "runs" / "one" / "01_a" / "stage.json").is_file()
    assert main(["recipe", str(path), *set_args([*TINY, "out_dir=there"])]) == 0
    assert (tmp_path / "there" / "01_a" / "stage.json").is_file()
    capsys.readouterr()
    assert main(["recipe", str(path), "--out", "here", *set_args([*TINY, "out_dir=there"])]) == 2
    assert "--out and --set out_dir" in capsys.readouterr().err and not (tmp_path / "here").exists()


def test_an_empty_recipe_is_refused_and_a_recipe_may_omit_base(tmp_path):
    """An empty file ran 100 steps of every default; `stages` without `base` ran while the error text said a
    staged recipe has exactly `base` and `stages`."""
    for text in ["", "# nothing\n", "{}"]:
        (tmp_path / "empty.yaml").write_text(text)
        with pytest.raises(ConfigError, match="empty.yaml: empty recipe"):
            load_recipe(tmp_path / "empty.yaml")
    (tmp_path / "nobase.yaml").write_text("stages: [{name: a, kind: sft}]")
    assert load_recipe(tmp_path / "nobase.yaml").base == {}
    (tmp_path / "extra.yaml").write_text("stages: [{name: a, kind: sft}]\nbse: {seed: 1}")
    with pytest.raises(ConfigError, match=r"`stages` and optionally `base` .*got \['bse', 'stages'\]"):
        load_recipe(tmp_path / "extra.yaml")


def test_a_missing_stage_data_file_is_named_once():
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPES / "r1.yaml", ["cold_start.data=nothere.jsonl"])
    assert str(err.value) == "cold_start.data: no such file 'nothere.jsonl'"


def test_a_changed_setting_on_an_interrupted_rl_stage_names_the_recipe_command(tmp_path):
    """It said "--resume: ... start a new run in another out_dir", though the user ran `rlvr recipe --out`."""
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "rl", "kind": "rl"}]}))
    out = tmp_path / "out"
    run_recipe(load_recipe(path, [*TINY, "sft.steps=0", "checkpoint.every=1"]), out, log=lambda _: None)
    (out / "01_rl" / "stage.json").unlink()  # as if interrupted after its last checkpoint
    with pytest.raises(ConfigError) as err:
        run_recipe(load_recipe(path, [*TINY, "sft.steps=0", "checkpoint.every=1", "optim.lr=0.5"]), out,
                   log=lambda _: None)
    text = str(err.value)
    assert text.startswith("stage 'rl' (rl) was interrupted and resumes: ") and "optim.lr" in text
    assert "another --out" in text and "--resume" not in text and "out_dir" not in text
