"""Rollout engines by registry (rlvr.rollout.engines): adding an engine is one module and one registry entry. A
test double registered here trains a short run through `rollout.engine`, and what the entry declares (its own
copy of the weights, no sampler stand-ins, the devices it runs on, its extra) decides what the run does with it;
no caller compares engine names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.jsonl import read_jsonl
from rlvr.models import load_model
from rlvr.rollout import HFEngine, engines
from rlvr.rollout.engines import EngineSpec, check_engine, engine_spec
from rlvr.rollout.sampling import SCORED_LOGPROBS
from rlvr.train.loop import train
from rlvr.train.setup import prepare_run
from rlvr.train.validate import check_registries


class CopyEngine:
    """The double: rlvr's sampler on a copy of its own, loaded from the start folder as vLLM loads one, kept
    current by `load_weights` (the loop's weight sync), counting what it is asked."""

    def __init__(self, model_path: Path, tokenizer) -> None:
        self.model = load_model(model_path)
        self.sampler = HFEngine(self.model, tokenizer, logprobs_mode=SCORED_LOGPROBS)
        self.generated, self.synced = 0, 0

    def generate(self, prompts, n, sampling):
        self.generated += 1
        return self.sampler.generate(prompts, n, sampling)

    def load_weights(self, named_tensors):
        self.sampler.load_weights(named_tensors)
        self.synced += 1


def _build(cfg, policy, tokenizer, model_path, max_batch_size):
    assert policy is None or isinstance(policy, torch.nn.Module)
    return CopyEngine(model_path, tokenizer)


@pytest.fixture
def copy_engine():
    spec = engines.register(EngineSpec("copy", _build, "a test double with its own copy of the weights",
                                       processed_logprobs=True, devices=("cpu",)))
    yield spec
    del engines.ENGINES["copy"]


def test_a_registered_engine_trains_a_run(config_factory, copy_engine):
    path = config_factory("copy", rollout={"engine": "copy"}, train={"steps": 2}, eval={"every": 0})
    run = prepare_run(load_config(path))
    engine = run.rollout.engine
    assert isinstance(engine, CopyEngine) and engine.model is not run.learner.policy  # built from the folder
    assert not run.learner.sampler_is_old  # it does not sample from the policy module: pi_old is recomputed
    train(run.cfg, run=run)
    assert engine.generated >= 2 and engine.synced == 2  # a weight sync after each step
    synced, trained = dict(engine.model.named_parameters()), dict(run.learner.named_weights())
    assert all(torch.equal(synced[k], trained[k]) for k in trained)
    steps = [r["step"] for r in read_jsonl(Path(run.cfg.out_dir) / "metrics.jsonl") if "loss" in r]
    assert steps == [1, 2]  # two updates on what it sampled


def test_what_an_entry_declares_is_checked_in_one_line(tmp_path, copy_engine):
    def refused(*sets):
        with pytest.raises(ConfigError) as err:
            check_registries(load_config(None, [f"out_dir={tmp_path}", *sets]))
        assert "\n" not in str(err.value)
        return str(err.value)

    assert engine_spec(load_config(None, ["rollout.engine=copy"])) is copy_engine
    assert "rollout.engine: unknown name 'nope'; choose from ['auto', 'hf', 'vllm', 'copy']" in \
        refused("rollout.engine=nope")
    assert refused("rollout.engine=copy", "model.lora.r=8", "rollout.vllm_lora=adapter").startswith(
        "rollout.vllm_lora=adapter loads LoRA adapters into the engine, which rollout.engine=copy does not do")
    assert engine_spec(load_config(None, [])).name == "hf"  # auto: not preferred anywhere, never picked
    with pytest.raises(ValueError, match="already registered"):
        engines.register(copy_engine)


def test_an_engine_elsewhere_or_not_installed_is_named(monkeypatch, copy_engine):
    gpu_only = EngineSpec("gpu_only", _build, "runs on a GPU only", devices=("cuda",))
    missing = EngineSpec("missing", _build, "its extra is not installed", package="no_such_module_rlvr",
                         install="pip install 'rlvr[missing]'")
    for spec in (gpu_only, missing):
        monkeypatch.setitem(engines.ENGINES, spec.name, spec)
    with pytest.raises(ConfigError, match=r"^rollout.engine=gpu_only runs on cuda, not model.device=cpu"):
        check_engine(load_config(None, ["rollout.engine=gpu_only"]))
    with pytest.raises(ConfigError, match=r"^rollout.engine=missing: no_such_module_rlvr is not installed; install "
                                          r"the extra: pip install 'rlvr\[missing\]'$"):
        check_engine(load_config(None, ["rollout.engine=missing"]))
    assert engine_spec(load_config(None, ["rollout.engine=missing"])) is missing  # what it declares: asked freely
    preferred = EngineSpec("preferred", _build, "auto's choice on a CPU", preferred_on=("cpu",))
    monkeypatch.setitem(engines.ENGINES, "preferred", preferred)
    assert engine_spec(load_config(None, [])) is preferred  # auto: the first installed engine preferred here


def test_tensor_parallel_size_reaches_vllm_only_where_an_engine_splits_its_model():
    from rlvr.config import load_config
    from rlvr.rollout.engines import ENGINES

    settings = ENGINES["vllm"].settings(load_config(None, ["rollout.tensor_parallel_size=4"]))
    assert settings["tensor_parallel_size"] == 4 and ENGINES["vllm"].tensor_parallel
    assert not ENGINES["hf"].tensor_parallel  # rlvr's sampler runs on one device
