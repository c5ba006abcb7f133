from __future__ import annotations

import json
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
from rlvr.commands.grammar import set_args
from recipe_helpers import RECIPES, TRACE
from variant_helpers import TINY, changed

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


# the real model's recipes train in tests/train/test_real_model.py (marker real_model), two steps each
REAL_MODEL = ("smollm2_full", "smollm2_lora")
# made for a GPU: loaded and compared with the CPU recipe in tests/algorithms/test_gpu_recipe.py, run on a GPU by
# benchmarks/gpu/device_checks.sh
GPU = ("smollm2_gpu",)


def test_every_recipe_is_tested_and_cites_its_paper():
    assert sorted(p.stem for p in RECIPES.glob("*.yaml")) == sorted([*SMALL, *REAL_MODEL, *GPU])
    for path in RECIPES.glob("*.yaml"):
        text = path.read_text()
        assert text.startswith("#") and "20" in text.splitlines()[0], path.name  # author and year first


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_recipe_runs_end_to_end(name, tmp_path):
    code = main(["recipe", str(RECIPES / f"{name}.yaml"), "--out", str(tmp_path), *set_args([*TINY, *SMALL[name]])])
    assert code == 0
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/stage.json"))]
    final = Path(next(r["model"] for r in reversed(records) if r.get("model")))
    assert changed(tmp_path / "init_model", final)


def test_plain_config_is_one_rl_stage_and_sets_route_to_base_or_stage(tmp_path):
    plain = load_recipe(RECIPES / "dapo.yaml", ["train.steps=3"])
    assert [(s.name, s.kind) for s in plain.stages] == [("rl", "rl")] and plain.base_overrides == ["train.steps=3"]
    r1 = load_recipe(RECIPES / "r1.yaml", ["seed=4", "cold_start.steps=7", "reasoning_rl.train.steps=9"])
    stages = {s.name: s for s in r1.stages}
    assert stages["cold_start"].options.steps == 7 and r1.base_overrides == ["seed=4"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # validation checks the folder exists, not its weights
    cfg = rl_config(r1, stages["reasoning_rl"], tmp_path / "m", tmp_path / "run", None)
    assert (cfg.train.steps, cfg.seed, cfg.sft.steps, cfg.algorithm.preset) == (9, 4, 0, "grpo")
    assert cfg.task.rewards[0]["name"] == "language" and cfg.model.path == str(tmp_path / "m")


def test_recipe_errors_are_one_line_config_errors(tmp_path):
    cases = {
        "stages: [{name: a, kind: bake}]": "unknown kind 'bake'",
        "stages: [{name: a, kind: sft, stepz: 3}]": "^unknown config key 'a.stepz'; did you mean 'a.steps'\\?$",
        "stages: [{name: a, kind: dpo, lr: x}]": "^a.lr: expected float, got 'x' \\(str\\)$",
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
    with pytest.raises(ConfigError, match="^unknown config key 'cold_start.stepz'; did you mean 'cold_start.steps'"):
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
    argv = ["recipe", str(path), *set_args([*TINY, "train.steps=4", "checkpoint.every=2"])]
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


def test_the_command_lines_set_wins_over_a_stages_config():
    """`--set train.steps=2` left r1's RL stage at the 200 steps its config sets (precedence file < --set held
    for the base only); a stage's own `--set` wins over both."""
    r1 = load_recipe(RECIPES / "r1.yaml", ["train.steps=2"])
    stages = {s.name: s for s in r1.stages}
    assert stages["reasoning_rl"].options.config["train"]["steps"] == 200  # what the file says
    assert rl_config(r1, stages["reasoning_rl"], None, Path("run"), None).train.steps == 2
    both = load_recipe(RECIPES / "r1.yaml", ["train.steps=2", "reasoning_rl.train.steps=5"])
    assert rl_config(both, {s.name: s for s in both.stages}["reasoning_rl"], None, Path("run"), None).train.steps == 5


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


def test_a_plain_config_with_a_section_inside_a_section_loads_as_a_recipe(tmp_path):
    """model.lora in a one-stage recipe was flattened to `model.lora={...}`, which --set refuses (a section)."""
    path = tmp_path / "lora.yaml"
    path.write_text("model: {tiny_preset: test, lora: {r: 4, alpha: 8}}\ntrain: {steps: 3}\n")
    recipe = load_recipe(path)
    cfg = rl_config(recipe, recipe.stages[0], None, tmp_path / "run", None)
    assert (cfg.model.lora.r, cfg.model.lora.alpha, cfg.train.steps) == (4, 8.0, 3)
