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


def test_the_reward_model_is_placed_by_its_device_and_dtype_options(reward_model_dir, config_factory,
                                                                    monkeypatch):
    """`device`/`dtype` put the reward model where model.device/model.dtype put the policy (it always
    scored on the CPU in float32): float32 weights there, the forward under autocast."""
    import torch

    import rlvr.models.placement as placement
    from rlvr.models.placement import cpu_supports_bf16
    from rlvr.rewards import reward_from_name

    real = placement.resolve_device
    monkeypatch.setattr(placement, "resolve_device",
                        lambda name: torch.device("cpu", 0) if name == "cpu" else real(name))
    moved = []
    real_to = torch.nn.Module.to
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moved.append(a[:1]) or real_to(self, *a, **k))
    prompts, completions = ["sort 3 1 2=", "sort 9 8 7="], ["1 2 3", "9 8 7"]
    plain = reward_from_name("reward_model", path=str(reward_model_dir))
    assert (torch.device("cpu", 0),) in moved  # placed by the option's device
    rewards = [{"name": "reward_model", "options": {"path": str(reward_model_dir), "device": "tpu"}}]
    with pytest.raises(ConfigError, match=r"^task.rewards: reward_model device: unknown device 'tpu'"):
        check_registries(load_config(config_factory(task={"rewards": rewards})))
    if not cpu_supports_bf16():
        with pytest.raises(ValueError, match="reward_model dtype=bfloat16: this CPU has no native bfloat16"):
            reward_from_name("reward_model", path=str(reward_model_dir), dtype="bfloat16")
        return
    half = reward_from_name("reward_model", path=str(reward_model_dir), dtype="bfloat16")
    assert all(p.dtype == torch.float32 for p in half.rm.parameters())
    a, b = plain.scores(prompts, completions), half.scores(prompts, completions)
    assert a != b and all(math.isclose(x, y, abs_tol=0.05 * (1 + abs(x))) for x, y in zip(a, b))
