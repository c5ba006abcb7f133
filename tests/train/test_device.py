"""The device plumbing of `rlvr train`: one placement decides where the policy, the reference, the value
model, the engine and every batch tensor live. No GPU here, so the placement is made to resolve to
`cpu:0`, a device that compares unequal to the default `cpu` while running on it: whatever reaches
`cpu:0` was placed by the placement, not left where it was built."""

import math

import pytest
import torch

import rlvr.models.placement as placement
from rlvr.config import ConfigError, load_config
from rlvr.rollout.batch import RolloutBatch
from rlvr.train.setup import prepare_run
from rlvr.train.validate import check_model

PLACED = torch.device("cpu", 0)


@pytest.fixture
def placed(monkeypatch):
    """model.device=cpu resolves to `cpu:0`; returns the devices each RolloutBatch was moved to."""
    real = placement.resolve_device
    monkeypatch.setattr(placement, "resolve_device", lambda name: PLACED if name == "cpu" else real(name))
    moves: list[torch.device] = []
    real_to = RolloutBatch.to

    def spy(self, device):
        moves.append(torch.device(device))
        return real_to(self, device)

    monkeypatch.setattr(RolloutBatch, "to", spy)
    return moves


def test_batches_engine_and_value_model_follow_the_placement(config_factory, placed, monkeypatch):
    module_moves: list[tuple[str, torch.device]] = []
    real_to = torch.nn.Module.to

    def module_spy(self, *args, **kwargs):
        if args and isinstance(args[0], torch.device):
            module_moves.append((type(self).__name__, args[0]))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", module_spy)
    cfg = load_config(config_factory(algorithm={"preset": "ppo"}), ["model.device=cpu"])
    run = prepare_run(cfg)
    assert run.learner.device == PLACED and run.rollout.engine.device == PLACED
    assert ("ValueModel", PLACED) in module_moves  # the critic joins the policy's device
    assert placed == []
    metrics = run.learner.update(run.rollout.collect(1))
    assert placed == [PLACED]  # the batch is moved once, where the learner builds it
    assert math.isfinite(metrics["loss"])  # the update ran on the moved tensors


def test_rollout_batch_to_moves_every_tensor_and_keeps_the_rest():
    batch = RolloutBatch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool),
                         torch.ones(2, 1, dtype=torch.bool), 1, None, torch.zeros(2),
                         old_logprobs=torch.zeros(2, 1))
    moved = batch.to(PLACED)
    assert moved.start == 1 and moved.advantages is None and moved.ref_logprobs is None
    assert torch.equal(moved.input_ids, batch.input_ids) and torch.equal(moved.old_logprobs, batch.old_logprobs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cuda_placement_is_accepted(dtype, monkeypatch, config_factory):
    cfg = load_config(config_factory())
    fake = placement.Placement(torch.device("cuda", 0), dtype, "sdpa", False)
    monkeypatch.setattr("rlvr.train.validate.resolve_placement", lambda m: fake)
    check_model(cfg)  # no refusal: batches follow the policy to its device


def test_float16_training_is_refused_in_one_line(monkeypatch, config_factory):
    cfg = load_config(config_factory())
    fake = placement.Placement(torch.device("cuda", 0), torch.float16, "sdpa", False)
    monkeypatch.setattr("rlvr.train.validate.resolve_placement", lambda m: fake)
    with pytest.raises(ConfigError) as err:
        check_model(cfg)
    assert str(err.value).startswith("model.dtype=float16: ") and "\n" not in str(err.value)
