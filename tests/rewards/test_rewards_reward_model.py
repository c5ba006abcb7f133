"""The `reward_model` reward by name takes what `rlvr reward-model --out OUT` writes: OUT itself (the model is in
OUT/model) or OUT/model; the RLHF config of docs/preference_sft_rft.md validates as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.models import make_tiny_model_dir, model_folder
from rlvr.rewards import reward_from_name
from rlvr.rewards.reward_model import load_reward_model
from rlvr.train.validate import check_registries

DOC = Path(__file__).resolve().parents[2] / "docs" / "preference_sft_rft.md"
PROMPTS, COMPLETIONS = ["sort 3 1 2=", "sort 9 8 7="], ["1 2 3", "9 8 7"]


@pytest.fixture(scope="module")
def rm_out(tmp_path_factory) -> Path:
    """A real `rlvr reward-model` output folder (a tiny model, one epoch on six pairs)."""
    root = tmp_path_factory.mktemp("rm")
    make_tiny_model_dir(root / "lm", preset="test")
    pairs = [{"prompt": f"sort {a} {b}=", "chosen": f"{min(a, b)} {max(a, b)}", "rejected": f"{max(a, b)} {min(a, b)}"}
             for a, b in [(3, 1), (5, 2), (9, 4), (7, 6), (8, 1), (4, 2)]]
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    argv = ["reward-model", "--model", str(root / "lm"), "--data", str(root / "pairs.jsonl"), "--set", "epochs=1",
            "--set", "batch_size=2", "--set", "eval_fraction=0", "--out", str(root / "rm")]
    assert main(argv) == 0
    assert sorted(p.name for p in (root / "rm").iterdir()) == ["metrics.json", "model"]
    return root / "rm"


def test_the_output_folder_of_rlvr_reward_model_is_a_reward_model_path(rm_out):
    """`{path: runs/rm}` was refused ("is not a model folder (no config.json)"); only runs/rm/model worked."""
    by_out = reward_from_name("reward_model", path=str(rm_out))
    by_model = reward_from_name("reward_model", path=str(rm_out / "model"))
    assert by_out.scores(PROMPTS, COMPLETIONS) == by_model.scores(PROMPTS, COMPLETIONS)
    assert model_folder(rm_out) == rm_out / "model" and model_folder(rm_out / "model") == rm_out / "model"
    assert load_reward_model(rm_out).config.num_labels == 1


def test_a_folder_that_is_neither_is_refused_naming_both_forms(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError) as err:
        reward_from_name("reward_model", path=str(tmp_path / "empty"))
    assert str(err.value) == (f"reward_model path {str(tmp_path / 'empty')!r} is neither a Hugging Face model folder "
                              "(no config.json) nor the --out folder of an rlvr command (no model/config.json or "
                              "sft_model/config.json)")
    rewards = [{"name": "reward_model", "options": {"path": str(tmp_path / "empty")}}]
    with pytest.raises(ConfigError, match=r"^task.rewards: reward_model path .* is neither"):
        check_registries(load_config(None, ["task.rewards=" + json.dumps(rewards)]))


def test_the_documented_rlhf_config_validates_as_written(rm_out):
    """The docs' `rlvr reward-model ... --out runs/rm` then `{name: reward_model, options: {path: runs/rm}}`:
    the config block of docs/preference_sft_rft.md, runs/rm replaced by a real output folder."""
    text = DOC.read_text()
    assert re.search(r"rlvr reward-model .*--out runs/rm\n", text)
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "reward_model" in b)
    config = yaml.safe_load(block.replace("runs/rm", str(rm_out)))
    rewards = config["task"]["rewards"]
    assert rewards[0] == {"name": "reward_model", "options": {"path": str(rm_out)}}
    sets = [f"task.name={config['task']['name']}", "task.rewards=" + json.dumps(rewards)]
    cfg = check_registries(load_config(None, sets))
    assert cfg.task.rewards == rewards


def test_a_causal_lm_folder_is_refused_as_a_reward_model(tmp_path):
    """A causal LM folder (e.g. `rlvr dpo --out`) was accepted and scored with a freshly initialised random head."""
    make_tiny_model_dir(tmp_path / "dpo" / "model", preset="test")
    for path in (tmp_path / "dpo", tmp_path / "dpo" / "model"):
        with pytest.raises(ValueError, match=rf"^'{re.escape(str(tmp_path / 'dpo' / 'model'))}' is not a reward "
                                             r"model \(\w+ForCausalLM; `rlvr reward-model` saves"):
            reward_from_name("reward_model", path=str(path))
    rewards = [{"name": "reward_model", "options": {"path": str(tmp_path / "dpo")}}]
    with pytest.raises(ConfigError, match=r"^task.rewards: .* is not a reward model"):
        check_registries(load_config(None, ["task.rewards=" + json.dumps(rewards)]))
    assert load_reward_model(tmp_path / "dpo", from_lm=True).config.num_labels == 1  # what `rlvr reward-model` starts


@pytest.mark.parametrize("option", ["shift", "scale"])
@pytest.mark.parametrize("value", [".nan", ".inf", "'x'"])
def test_a_non_finite_shift_or_scale_is_refused_at_config_time(rm_out, option, value):
    """`scale: .nan` was accepted (`'x'` failed at the first score): every score was NaN, read as "not applicable"
    by combine, so the reward was 0."""
    rewards = f"[{{name: reward_model, options: {{path: '{rm_out}', {option}: {value}}}}}]"
    with pytest.raises(ConfigError, match=rf"^task.rewards: reward_model option {option} must be a finite number"):
        check_registries(load_config(None, ["task.rewards=" + rewards]))
