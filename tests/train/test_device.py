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


def test_the_sft_warm_start_trains_where_the_policy_will(config_factory, placed, monkeypatch):
    """The warm start is placed as the policy (it ran on the CPU in float32 whatever model.device was):
    its model comes from `load_policy` with the run's model section (LoRA off: full fine-tuning), each
    SFT micro-batch is moved to that model's device, and the saved model is float32."""
    from safetensors.torch import load_file

    import rlvr.train.warm_start as warm_start

    loads = []
    real = warm_start.load_policy

    def spy(m, path, *args, **kwargs):
        model = real(m, path, *args, **kwargs)
        loads.append((m.device, m.dtype, hasattr(model, "peft_config"), model.device))
        return model

    monkeypatch.setattr(warm_start, "load_policy", spy)
    cfg = load_config(config_factory(sft={"steps": 3, "batch_size": 8}), ["model.device=cpu", "model.lora.r=4"])
    run = prepare_run(cfg)
    assert [load[:3] for load in loads] == [("cpu", "float32", False)]  # no adapters: full fine-tuning
    assert placed == [loads[0][3]] * 3  # one micro-batch per SFT step, each moved to the model's device
    saved = load_file(str(run.run_dir / "sft_model" / "model.safetensors"))
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in saved.values())


def test_the_sft_warm_start_runs_in_model_dtype(config_factory):
    """model.dtype=bfloat16: the warm start's forward runs under autocast too (float32 weights saved)."""
    from safetensors.torch import load_file

    from rlvr.models.placement import cpu_supports_bf16

    weights = {}
    for dtype in ("float32", "bfloat16"):
        cfg = load_config(config_factory(dtype, sft={"steps": 3, "batch_size": 8}), [f"model.dtype={dtype}"])
        if dtype == "bfloat16" and not cpu_supports_bf16():
            with pytest.raises(ConfigError, match="no native bfloat16"):
                prepare_run(cfg)
            return
        weights[dtype] = load_file(str(prepare_run(cfg).run_dir / "sft_model" / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in weights["bfloat16"].values())
    assert any(not torch.equal(weights["float32"][k], weights["bfloat16"][k]) for k in weights["float32"])


def test_recipe_stages_place_their_model_and_engine_as_the_policy(config_factory, placed, tmp_path):
    """A recipe's SFT / DPO / sampling stages ran on the CPU in float32 whatever the base config said."""
    from pathlib import Path

    from rlvr.config.stages import SFTStage
    from rlvr.pipelines import recipe_stages

    cfg = load_config(config_factory(), ["model.device=cpu", "model.lora.r=4"])
    model, tokenizer = recipe_stages._load(cfg, Path(cfg.model.path))
    assert not hasattr(model, "peft_config")  # full fine-tuning, as before
    assert recipe_stages._engine(cfg, model, tokenizer).device == PLACED
    opts = SFTStage(steps=2, batch_size=4, lr=1e-3, demonstrations=8)
    result = recipe_stages.run_sft(cfg, opts, Path(cfg.model.path), tmp_path)
    assert len(placed) == 2  # each SFT micro-batch moved to the model's device
    assert 0 <= result["metrics"]["heldout_greedy_accuracy"] <= 1
