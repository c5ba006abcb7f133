"""RLHF from a config: a Bradley-Terry reward model folder as the training reward, the task's verifier
kept at weight 0 so the gold reward is logged beside the proxy (over-optimisation shows)."""

import math

import pytest

from rlvr.rewards.reward_model import RewardModelReward, load_reward_model, reward_model_from_lm
from rlvr.train.validate import check_registries
from rlvr.config import ConfigError, load_config
from rlvr.jsonl import read_jsonl
from rlvr.models import load_model, load_tokenizer, save_model
from rlvr.train.loop import train


@pytest.fixture
def reward_model_dir(tmp_path, warm_model):
    rm = reward_model_from_lm(load_model(warm_model), seed=3)
    return save_model(rm, load_tokenizer(warm_model), tmp_path / "rm")


def test_reward_model_drives_training_and_gold_is_logged_beside_it(config_factory, reward_model_dir, tmp_path):
    rewards = [{"name": "reward_model", "options": {"path": str(reward_model_dir)}}, {"name": "task", "weight": 0.0}]
    cfg = load_config(config_factory(task={"rewards": rewards}, train={"steps": 2}))
    train(cfg)
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert len(rows) == 2
    for row in rows:  # the training reward is the proxy alone; the gold verifier is logged, weight 0
        assert math.isclose(row["reward"], row["reward/reward_model"], rel_tol=1e-5, abs_tol=1e-6)
        assert 0.0 <= row["reward/task"] <= 1.0
        assert row["reward/errors"] == 0.0


def test_reward_model_reward_by_name_scores_like_the_class(reward_model_dir):
    from rlvr.rewards import reward_from_name

    by_name = reward_from_name("reward_model", path=str(reward_model_dir), scale=2.0)
    direct = RewardModelReward(load_reward_model(reward_model_dir), load_tokenizer(reward_model_dir), scale=2.0)
    prompts, completions = ["sort 3 1 2=", "sort 9 8 7="], ["1 2 3", "9 8 7"]
    assert by_name.scores(prompts, completions) == direct.scores(prompts, completions)


def test_a_missing_reward_model_folder_is_a_config_error(config_factory, tmp_path):
    rewards = [{"name": "reward_model", "options": {"path": str(tmp_path / "nowhere")}}]
    with pytest.raises(ConfigError, match="task.rewards"):
        check_registries(load_config(config_factory(task={"rewards": rewards})))
