"""Recipes: the file format, override routing, stage resume, and every shipped recipe end to end on
the tiny model (offline, a few steps per stage)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rlvr.pipelines.recipe_stages import preference_pairs
from rlvr.pipelines.recipes import load_recipe, rl_config, run_recipe
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.rewards import BatchContext
from rlvr.rewards.scoring import build_reward
from rlvr.rollout.base import Completion
from rlvr.tasks import Example, get_task
from rlvr.tasks.subset import read_examples, write_examples
from rlvr.train.setup import held_out_examples
from rlvr.train.validate import check_registries
from variant_helpers import TINY, changed

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"
# per recipe: stage options shrunk to a smoke test (TINY shrinks the shared base config)
SMALL = {
    "r1_zero": [],
    "dr_grpo": ["sft.steps=2"],
    "dapo": ["sft.steps=2", "task.rewards=[{name: overlong, options: {cache_len: 2}}]"],
    "r1": ["cold_start.steps=2", "cold_start.demonstrations=16", "mixed_sft.steps=2", "mixed_sft.prompts=4",
           "mixed_sft.demonstrations=8", "preference.prompts=8", "preference.samples=2",
           "reasoning_rl.train.steps=2"],
    "kimi_k15": ["warmup_sft.steps=2", "curation.prompts=16", "curation.samples=2", "rl.train.steps=2",
                 "rl.task.rewards=[{name: kimi_length, options: {start_step: 1}}]"],
    "qwen3": ["cold_start.steps=2", "difficulty_filter.prompts=16", "difficulty_filter.samples=2",
              "difficulty_filter.k=2", "reasoning_rl.train.steps=2", "fusion.steps=2", "fusion.demonstrations=8",
              "budget.budgets=[2,4]", "task.eval_size=4", "rollout.max_new_tokens=12"],
}


def test_every_recipe_is_tested_and_cites_its_paper():
    assert sorted(p.stem for p in RECIPES.glob("*.yaml")) == sorted(SMALL)
    for path in RECIPES.glob("*.yaml"):
        text = path.read_text()
        assert text.startswith("#") and "20" in text.splitlines()[0], path.name  # author and year first


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_recipe_runs_end_to_end(name, tmp_path):
    code = main(["recipe", str(RECIPES / f"{name}.yaml"), "--out", str(tmp_path), "--set", *TINY, *SMALL[name]])
    assert code == 0
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/stage.json"))]
    final = Path(next(r["model"] for r in reversed(records) if r.get("model")))
    assert changed(tmp_path / "init_model", final)


def test_plain_config_is_one_rl_stage_and_sets_route_to_base_or_stage(tmp_path):
    plain = load_recipe(RECIPES / "dapo.yaml", ["train.steps=3"])
    assert [(s.name, s.kind) for s in plain.stages] == [("rl", "rl")] and plain.base_overrides == ["train.steps=3"]
    r1 = load_recipe(RECIPES / "r1.yaml", ["seed=4", "cold_start.steps=7", "reasoning_rl.train.steps=9"])
    stages = {s.name: s for s in r1.stages}
    assert stages["cold_start"].options["steps"] == 7 and r1.base_overrides == ["seed=4"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # validation checks the folder exists, not its weights
    cfg = rl_config(r1, stages["reasoning_rl"], tmp_path / "m", tmp_path / "run", None)
    assert (cfg.train.steps, cfg.seed, cfg.sft.steps, cfg.algorithm.preset) == (9, 4, 0, "grpo")
    assert cfg.task.rewards[0]["name"] == "language" and cfg.model.path == str(tmp_path / "m")


def test_recipe_errors_are_one_line_config_errors(tmp_path):
    cases = {
        "stages: [{name: a, kind: bake}]": "unknown kind 'bake'",
        "stages: [{name: a, kind: sft, stepz: 3}]": "unknown options",
        "stages: [{name: a, kind: sft}, {name: a, kind: sft}]": "unique",
        "stages: [{name: train, kind: sft}]": "differ from config sections",
        "base: {}\nstages: []": "non-empty",
        "stages: [{name: a, kind: sft}]\nbase: {algorithm: {advantage: nope}}": "advantage",
    }
    for i, (text, match) in enumerate(cases.items()):
        path = tmp_path / f"r{i}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=match):
            load_recipe(path)
    with pytest.raises(ConfigError, match="no option 'stepz'"):
        load_recipe(RECIPES / "r1.yaml", ["cold_start.stepz=3"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_recipe(tmp_path / "missing.yaml")


def test_finished_stages_are_skipped_on_a_second_run(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a", "kind": "sft", "steps": 1, "demonstrations": 4},
                                               {"name": "b", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    recipe = load_recipe(path, TINY)
    first = run_recipe(recipe, tmp_path / "out", log=lambda _: None)
    lines = []
    second = run_recipe(recipe, tmp_path / "out", log=lines.append)
    assert first == second and sum("skipped" in line for line in lines) == 2
    assert second[1]["model"].endswith("02_b/model")


def test_preference_pairs_by_hand():
    task = get_task("sort", length=3)
    ex = Example("sort 3 1 2=", "1 2 3", {"digits": [3, 1, 2]})
    texts = ["1 2 3", "3 2 1", "1 2 3", "1 2 3"]  # prompt 1: a right and a wrong; prompt 2: both right
    comps = [Completion(ex.prompt, [1], [2], [0.0], t, "stop") for t in texts]
    assert preference_pairs(task, [ex, ex], comps, 2) == [{"prompt": ex.prompt, "chosen": "1 2 3", "rejected": "3 2 1"}]
    wrong_only = [Completion(ex.prompt, [1], [2], [0.0], "9", "stop")] * 2
    assert preference_pairs(task, [ex], wrong_only, 2)[0]["chosen"] == "1 2 3"  # the reference answer


def test_subset_task_round_trips_examples_and_keeps_the_base_verifier(tmp_path):
    base = get_task("sort", length=3)
    kept = base.train_examples(5, 0)
    path = write_examples(kept, tmp_path / "kept.jsonl")
    assert read_examples(path) == kept
    cfg = load_config(None, ["task.name=subset", f"task.options={json.dumps({'path': str(path), 'options': {'length': 3}})}"])
    sub = get_task(cfg.task.name, **cfg.task.options)
    assert sub.train_examples(100, 0) == kept and len(sub.train_examples(2, 0)) == 2
    assert sub.eval_examples(3, 0) == base.eval_examples(3, 0)
    assert sub.is_correct(kept[0].answer, kept[0])
    (tmp_path / "bad.jsonl").write_text('{"answer": "1"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing field\(s\) \['prompt'\]"):
        read_examples(tmp_path / "bad.jsonl")


@pytest.mark.slow
def test_an_interrupted_rl_stage_resumes_when_the_recipe_runs_again(tmp_path, capsys, monkeypatch, sigint_at_step):
    """SIGINT in the RL stage: the hint names the recipe command (there is no run to `rlvr train --resume` on
    its own); running it again skips the SFT stage and resumes the RL stage from its checkpoint, ending
    where a recipe never stopped ends (it stopped with "already holds a run; resume it with --resume")."""
    import signal

    import rlvr.train.loop as loop_module

    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "warm", "kind": "sft", "steps": 1, "demonstrations": 4},
                                               {"name": "rl", "kind": "rl"}]}))
    argv = ["recipe", str(path), "--set", *TINY, "train.steps=4", "checkpoint.every=2"]
    assert main([*argv, "--out", str(tmp_path / "full")]) == 0
    real_save = sigint_at_step(2)
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 128 + signal.SIGINT
    err = capsys.readouterr().err
    assert "SIGINT at step 2" in err and "the same `rlvr recipe` command" in err and "rlvr train" not in err
    monkeypatch.setattr(loop_module, "save_checkpoint", real_save)
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 0
    assert "warm (sft): done before, skipped" in capsys.readouterr().out
    full, cut = (tmp_path / name / "02_rl" for name in ("full", "cut"))
    assert (cut / "run" / "metrics.jsonl").read_text() == (full / "run" / "metrics.jsonl").read_text()
    records = [json.loads((d / "stage.json").read_text())["metrics"] for d in (full, cut)]
    assert records[0] == records[1] and records[1]["heldout_greedy_accuracy_before"] is not None


@pytest.mark.parametrize("override, words", [
    ("mixed_sft.samples=0", "mixed_sft.samples: expected an integer >= 1, got 0"),
    ("cold_start.steps=abc", "cold_start.steps: expected an integer >= 1, got 'abc'"),
    ("cold_start.lr=-1", "cold_start.lr: expected a number > 0"),
    ("preference.loss=foo", "preference.loss: expected one of ['dpo', 'ipo', 'ln_dpo', 'simpo'], got 'foo'"),
    ("preference.loss=ln_dpo", "stage 'preference' (dpo): loss 'ln_dpo' has no default beta"),
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
    ("qwen3", "fusion.unflagged_think=2", "fusion.unflagged_think: expected a number >= 0 and <= 1"),
])
def test_filter_and_budget_options_are_checked_before_any_stage(recipe, override, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_recipe(RECIPES / f"{recipe}.yaml", [override])


def test_the_command_lines_set_wins_over_a_stages_config():
    """`--set train.steps=2` left r1's RL stage at the 200 steps its config sets (precedence file < --set held
    for the base only); a stage's own `--set` wins over both."""
    r1 = load_recipe(RECIPES / "r1.yaml", ["train.steps=2"])
    stages = {s.name: s for s in r1.stages}
    assert stages["reasoning_rl"].options["config"]["train"]["steps"] == 200  # what the file says
    assert rl_config(r1, stages["reasoning_rl"], None, Path("run"), None).train.steps == 2
    both = load_recipe(RECIPES / "r1.yaml", ["train.steps=2", "reasoning_rl.train.steps=5"])
    assert rl_config(both, {s.name: s for s in both.stages}["reasoning_rl"], None, Path("run"), None).train.steps == 5


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


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["recipe", str(RECIPES / "r1_zero.yaml"), "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "not a folder" in err


def test_a_changed_starting_model_is_rebuilt_when_no_stage_has_begun(tmp_path):
    """The starting model's settings changed, but no stage has begun (stopped while the starting model was
    built): nothing depends on it yet, so it is rebuilt under the new settings (refused before), and the
    recipe gives what it gives in a fresh folder."""
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a", "kind": "sft", "steps": 1, "demonstrations": 4}]}))
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    run_recipe(load_recipe(path, TINY), out, log=lambda _: None)
    shutil.rmtree(out / "01_a")
    again = run_recipe(load_recipe(path, [*TINY, "seed=3"]), out, log=lambda _: None)
    expected = run_recipe(load_recipe(path, [*TINY, "seed=3"]), fresh, log=lambda _: None)
    assert [r["metrics"] for r in again] == [r["metrics"] for r in expected]
    assert json.loads((out / "recipe_start.json").read_text())["seed"] == 3
    weights = [load_file(next((d / "01_a").rglob("*.safetensors"))) for d in (out, fresh)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


TRACE = {"prompt": "sort 3 1 2=", "thinking": "sorted: 1 2 3", "answer": "1 2 3"}
DEMO = {"prompt": "sort 3 1 2=", "completion": "1 2 3"}
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
    assert main(["recipe", str(RECIPES / f"{recipe}.yaml"), "--out", str(tmp_path / "out"), "--set", *TINY,
                 f"{key}={path}"]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and f"{key}: {tmp_path}/{words}" in out.err and not (tmp_path / "out").exists()


def test_an_empty_fusion_data_file_is_refused_before_the_first_stage(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match=f"^fusion.data: {tmp_path}/empty.jsonl: no rows$"):
        load_recipe(RECIPES / "qwen3.yaml", [f"fusion.data={tmp_path}/empty.jsonl"])


def test_a_fusion_stage_trains_on_its_data_file(tmp_path):
    data = tmp_path / "traces.json"  # any file read_records reads: .jsonl, .json, .parquet
    data.write_text(json.dumps([TRACE, {**TRACE, "prompt": "sort 2 1=", "answer": "1 2", "thinking": "t"}]))
    path = tmp_path / "fusion.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "fusion", "kind": "fusion_sft", "steps": 1,
                                                "data": str(data)}]}))
    [record] = run_recipe(load_recipe(path, TINY), tmp_path / "out", log=lambda _: None)
    rows = [json.loads(line) for line in (tmp_path / "out" / "01_fusion" / "fusion.jsonl").read_text().splitlines()]
    assert record["metrics"]["fusion_rows"] == len(rows) == 4
    assert [r["mode"] for r in rows] == ["think", "no_think"] * 2


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
    assert main(["recipe", str(RECIPES / f"{recipe}.yaml"), "--out", str(tmp_path / "out"), "--set",
                 "model.tiny_preset=test", *sets]) == 2
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


@pytest.mark.parametrize("path", sorted(SHIPPED.rglob("*.yaml")), ids=lambda p: str(p.relative_to(SHIPPED)))
def test_every_shipped_config_and_recipe_passes_its_checks_at_its_own_sizes(path):
    """r1_zero asked for 100 held-out lists of length 3 (95 exist): both ways its header runs it stopped, and
    `rlvr recipe` only after building the starting model. The smoke tests shrink task sizes, so they missed it:
    here every shipped file is loaded as shipped and its held-out set drawn."""
    if "recipes" in path.parts:
        recipe = load_recipe(path)  # checks the base and every RL stage, held-out sets included
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


def test_the_r1_language_reward_never_pays_gibberish_over_a_correct_answer():
    """On r1's toy (sort, no <think> block) the whole completion was scored for language: "9eJ" got 1.0 and the
    correct "3 7 8 9" 0.0 (the same total as gibberish), and RL learned letters (reward/language 0.94, accuracy 0).
    Now the language term scores the reasoning block only, and its toy weight (0.5) keeps a correct answer,
    which on the toy has no reasoning block, above any wrong one that has."""
    r1 = load_recipe(RECIPES / "r1.yaml")
    cfg = rl_config(r1, {s.name: s for s in r1.stages}["reasoning_rl"], None, Path("run"), None)
    task = get_task(cfg.task.name, **cfg.task.options)
    reward = build_reward(task, cfg.task.rewards, timeout=None)
    ex = Example("sort 9 3 7 8=", "3 7 8 9", {"digits": [9, 3, 7, 8]})
    right = reward.score_batch([ex.prompt], ["3 7 8 9"], [ex], BatchContext()).scores[0]
    for junk in ["9eJ", "hello world", "abc def ghi", "3 7 8 x", "<think>the words</think> abc", "<think>ab"]:
        wrong = reward.score_batch([ex.prompt], [junk], [ex], BatchContext()).scores[0]
        assert right > wrong, junk


def test_a_stage_name_that_is_not_a_plain_folder_name_is_refused(tmp_path, capsys, monkeypatch):
    """`a/../../escaped` wrote deep/escaped/{model,stage.json}, outside `--out deep/out`."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "esc.yaml"
    path.write_text(yaml.safe_dump({"stages": [{"name": "a/../../escaped", "kind": "sft", "steps": 1,
                                                "demonstrations": 4}]}))
    assert main(["recipe", str(path), "--out", "deep/out", "--set", *TINY]) == 2
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
    assert main(["recipe", str(path), "--set", *TINY]) == 0
    assert (tmp_path / "runs" / "one" / "01_a" / "stage.json").is_file()
    assert main(["recipe", str(path), "--set", *TINY, "out_dir=there"]) == 0
    assert (tmp_path / "there" / "01_a" / "stage.json").is_file()
    capsys.readouterr()
    assert main(["recipe", str(path), "--out", "here", "--set", *TINY, "out_dir=there"]) == 2
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


def test_a_stages_held_out_accuracy_grades_the_answer_after_the_thinking(monkeypatch):
    """After qwen3's fusion stage the model answers `<think>...</think>\\n\\n1 2 3`; the sort verifier read the
    whole text and scored every such answer 0 (held-out 0.46 -> 0.06)."""
    from rlvr.pipelines import recipe_stages

    class Engine:
        def generate(self, prompts, n, sampling):
            answers = {ex.prompt: ex.answer for ex in examples}
            return [Completion(p, [1], [2], [0.0], f"<think>\nsorted: {answers[p]}\n</think>\n\n{answers[p]}", "stop")
                    for p in prompts]

    base = load_config(None, ["task.options={length: 3}", "task.eval_size=8"])
    examples = get_task("sort", length=3).eval_examples(8, base.task.eval_seed)
    monkeypatch.setattr(recipe_stages, "_engine", lambda *_: Engine())
    assert recipe_stages._heldout(base, None, None) == {"heldout_greedy_accuracy": 1.0}
